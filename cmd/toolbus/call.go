package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/toolbus/toolbus/schema"
)

// errReported means the command has already told the user what went wrong
// and only the exit status is left to set.
var errReported = errors.New("reported")

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
		Long: `call sends a JSON-RPC 2.0 call to an ingress and prints the response. PARAMS_JSON
is an object or an array. With --batch FILE (- for standard input) the file's
JSON is sent as it is. The exit status is 1 when any response is an error.`,
		Example: `  toolbus call echo '{"hello":"world"}'
  toolbus call --timeout 300ms sleep '{"ms":1000}'
  toolbus call --batch calls.json`,
		Args: cobra.RangeArgs(0, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var body []byte
			switch {
			case batch != "" && len(args) > 0:
				return errors.New("give either --batch or METHOD, not both")
			case batch != "":
				var err error
				if body, err = readInput(cmd.InOrStdin(), batch); err != nil {
					return err
				}
			case len(args) == 0:
				return errors.New("give a METHOD or --batch FILE")
			default:
				var err error
				if body, err = buildCall(args, notify); err != nil {
					return err
				}
			}
			return sendAndPrint(cmd.Context(), cmd.OutOrStdout(), url, timeout, body)
		},
	}
	cmd.Flags().StringVar(&url, "url", "http://127.0.0.1:8080/rpc", "URL of the ingress's JSON-RPC endpoint")
	cmd.Flags().DurationVar(&timeout, "timeout", 0, "per-call deadline sent as Toolbus-Timeout (default: the server's)")
	cmd.Flags().StringVar(&batch, "batch", "", "file holding a JSON-RPC message to send as it is (- for standard input)")
	cmd.Flags().BoolVar(&notify, "notify", false, "send a notification: no id, no answer")
	return cmd
}

func readInput(stdin io.Reader, name string) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(stdin)
	}
	return os.ReadFile(name)
}

// buildCall makes a request with a fresh random id, so that ids never repeat
// across calls.
func buildCall(args []string, notify bool) ([]byte, error) {
	req := map[string]any{"jsonrpc": schema.Version, "method": args[0]}
	if len(args) == 2 {
		// Whitespace around the JSON is allowed, as anywhere in JSON.
		params := json.RawMessage(bytes.TrimSpace([]byte(args[1])))
		if !json.Valid(params) || (params[0] != '{' && params[0] != '[') {
			return nil, fmt.Errorf("PARAMS_JSON must be a JSON object or array, got %s", args[1])
		}
		req["params"] = params
	}
	if !notify {
		var b [8]byte
		rand.Read(b[:])
		req["id"] = "call-" + hex.EncodeToString(b[:])
	}
	return json.Marshal(req)
}

func sendAndPrint(ctx context.Context, out io.Writer, url string, timeout time.Duration, body []byte) error {
	if ctx == nil {
		ctx = context.Background()
	}
	// The answer can take as long as the deadline; wait a little longer so
	// the server's timeout error arrives rather than a client-side one.
	wait := 6 * time.Minute
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
		req.Header.Set("Toolbus-Timeout", timeout.String())
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
		return errReported
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
