package clientcli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newHealthCmd is the probe of the container images: they are built FROM
// scratch and have no shell or curl, so a health check runs the binary
// itself.
func newHealthCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Probe an HTTP health endpoint; exit 0 on a 2xx answer",
		Long: `health sends GET to --url and exits 0 when the answer is 2xx, and 1 with the
status and body otherwise. Container health checks use it, since the toolbus
images have no shell: the ingress's /readyz or /healthz, or a NATS server's
monitoring endpoint /healthz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return probe(cmd.Context(), url, timeout)
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/readyz", "URL to probe")
	cmd.Flags().DurationVar(&timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	return cmd
}

// probe gets url within timeout and fails unless the status is 2xx.
func probe(ctx context.Context, url string, timeout time.Duration) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if timeout <= 0 {
		return fmt.Errorf("health: --timeout %v: want a positive duration", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("health: %s answered %s: %s", url, resp.Status, body)
	}
	return nil
}
