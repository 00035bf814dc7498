package clientcli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/schema"
)

// ErrReported means the command has already told the user what went wrong
// and only the exit status is left to set.
var ErrReported = errors.New("reported")

// defaultURL is the JSON-RPC endpoint of `toolbus dev` and of an ingress
// with its default --listen.
const defaultURL = "http://127.0.0.1:8080/rpc"

// dialTimeout bounds the wait for a WebSocket connection, so that a wrong
// ws:// URL or a server that is down is reported rather than waited on;
// the client tries again about every second meanwhile.
const dialTimeout = 3 * time.Second

func newCallCmd() *cobra.Command {
	var (
		url     string
		timeout time.Duration
		batch   string
		notify  bool
	)
	cmd := &cobra.Command{
		Use:   "call [METHOD [PARAMS_JSON]]",
		Short: "Send one call or a batch file to an ingress and print the answer",
		Long: `call sends a JSON-RPC 2.0 call to an ingress, over HTTP or, with a ws:// or
wss:// --url, over WebSocket, and prints the response. PARAMS_JSON is an object
or an array; every call gets an id of its own. With --batch FILE (- for standard
input) the file's JSON is posted as it is, over HTTP even when --url is a
WebSocket URL (the ingress serves both on the same path). The exit status is 1
when any response is an error.`,
		Example: `  toolbus call echo '{"hello":"world"}'
  toolbus call --timeout 300ms sleep '{"ms":1000}'
  toolbus call --url ws://127.0.0.1:8080/rpc echo '[1,2,3]'
  toolbus call --batch calls.json`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := CommandContext(cmd)
			switch {
			case batch != "" && len(args) > 0:
				return errors.New("give either --batch or METHOD, not both")
			case batch != "":
				body, err := readInput(cmd.InOrStdin(), batch)
				if err != nil {
					return err
				}
				endpoint, err := httpURL(url)
				if err != nil {
					return err
				}
				return sendAndPrint(ctx, cmd.OutOrStdout(), endpoint, timeout, body)
			case len(args) == 0:
				return errors.New("give a METHOD or --batch FILE")
			}
			params, err := parseParams(args[1:])
			if err != nil {
				return err
			}
			return callAndPrint(ctx, cmd.OutOrStdout(), url, timeout, args[0], params, notify)
		},
	}
	cmd.Flags().StringVar(&url, "url", defaultURL, "URL of the ingress's JSON-RPC endpoint: http(s):// or ws(s)://")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "per-call deadline sent as Toolbus-Timeout (default: the server's)")
	cmd.Flags().StringVar(&batch, "batch", "", "file holding a JSON-RPC message to send as it is (- for standard input)")
	cmd.Flags().BoolVar(&notify, "notify", false, "send a notification: no id, no answer")
	return cmd
}

// CommandContext returns the command's context, which is nil when it was
// executed without one.
func CommandContext(cmd *cobra.Command) context.Context {
	if ctx := cmd.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// parseParams returns the optional PARAMS_JSON argument as raw JSON, nil
// when it is absent. It must be an object or an array, as JSON-RPC 2.0
// wants; whitespace around it is allowed, as anywhere in JSON.
func parseParams(args []string) (json.RawMessage, error) {
	if len(args) == 0 {
		return nil, nil
	}
	params := json.RawMessage(bytes.TrimSpace([]byte(args[0])))
	if !json.Valid(params) || (params[0] != '{' && params[0] != '[') {
		return nil, fmt.Errorf("PARAMS_JSON must be a JSON object or array, got %s", args[0])
	}
	return params, nil
}

// dial returns a client of rawURL; for a WebSocket URL it waits until the
// connection is up, at most dialTimeout.
func dial(ctx context.Context, rawURL string, opts ...client.Option) (*client.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	return client.Dial(dctx, rawURL, opts...)
}

// httpURL returns the HTTP URL of the same endpoint as rawURL: ws:// and
// wss:// become http:// and https://.
func httpURL(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("--url: %w", err)
	}
	switch strings.ToLower(u.Scheme) {
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	}
	return u.String(), nil
}

// noDeadlineWait bounds a call that asks for no timeout: a little longer
// than the longest deadline an ingress gives by default (5m), so that the
// server's timeout error arrives rather than a client-side one.
const noDeadlineWait = 6 * time.Minute

// printedResponse is a response as call prints it. The id is left out: it
// is the one the client made up for the call, which says nothing to the
// reader.
type printedResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *schema.Error   `json:"error,omitempty"`
	ID      json.RawMessage `json:"id"`
}

// callAndPrint sends one call (or notification) through package client and
// prints its response. An error the server answered is printed, and
// returned as ErrReported.
func callAndPrint(ctx context.Context, out io.Writer, rawURL string, timeout time.Duration, method string, params json.RawMessage, notify bool) error {
	var opts []client.Option
	if timeout > 0 {
		// Sent as Toolbus-Timeout on every HTTP request and in the
		// WebSocket handshake, which is where a WebSocket carries it.
		opts = append(opts, client.WithTimeout(timeout))
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, noDeadlineWait)
		defer cancel()
	}
	c, err := dial(ctx, rawURL, opts...)
	if err != nil {
		return err
	}
	defer c.Close()
	var p any // a nil json.RawMessage in an interface would not be nil
	if params != nil {
		p = params
	}
	if notify {
		if err := c.Notify(ctx, method, p); err != nil {
			return err
		}
		fmt.Fprintln(out, "(no answer: notifications only)")
		return nil
	}
	var result json.RawMessage
	var id string
	err = c.Call(ctx, method, p, &result, client.SentID(&id))
	resp := printedResponse{JSONRPC: schema.Version, Result: result, ID: json.RawMessage(id)}
	if err != nil && !errors.As(err, &resp.Error) {
		return err
	}
	b, err := json.MarshalIndent(resp, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, string(b))
	if resp.Error != nil {
		return ErrReported
	}
	return nil
}

// sendAndPrint posts body as it is and prints the answer.
func sendAndPrint(ctx context.Context, out io.Writer, url string, timeout time.Duration, body []byte) error {
	// The answer can take as long as the deadline; wait a little longer so
	// the server's timeout error arrives rather than a client-side one.
	wait := noDeadlineWait
	if timeout > 0 {
		wait = timeout + 10*time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if timeout > 0 {
		req.Header.Set(schema.HeaderTimeout, timeout.String())
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("call %s: %w", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode == http.StatusNoContent {
		fmt.Fprintln(out, "(no answer: notifications only)")
		return nil
	}
	var pretty bytes.Buffer
	if json.Indent(&pretty, data, "", "  ") != nil {
		pretty.Reset()
		pretty.Write(data)
	}
	fmt.Fprintln(out, pretty.String())
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("ingress answered HTTP %d", resp.StatusCode)
	}
	if hasError(data) {
		return ErrReported
	}
	return nil
}

// hasError reports whether a response or any response of a batch is an
// error.
func hasError(data []byte) bool {
	var batch []schema.Response
	if json.Unmarshal(data, &batch) == nil {
		for _, r := range batch {
			if r.Error != nil {
				return true
			}
		}
		return false
	}
	var single schema.Response
	return json.Unmarshal(data, &single) != nil || single.Error != nil
}
