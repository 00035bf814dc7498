package toolbustest_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/toolbus/toolbus/toolbustest"
	"github.com/toolbus/toolbus/worker"
)

// hangTool registers "hang", which reports how its context ended.
func hangTool(started chan<- struct{}, ended chan<- error) func(rt *worker.Runtime) error {
	return func(rt *worker.Runtime) error {
		return rt.HandleFunc("hang", func(ctx context.Context, _ *worker.Request) (any, error) {
			started <- struct{}{}
			select {
			case <-ctx.Done():
				ended <- ctx.Err()
				return nil, ctx.Err()
			case <-time.After(30 * time.Second):
				ended <- nil
				return "never canceled", nil
			}
		})
	}
}

func TestClientCancellationReachesTheWorker(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, c *toolbustest.Cluster, started <-chan struct{})
	}{
		{"websocket rpc.cancel", func(t *testing.T, c *toolbustest.Cluster, started <-chan struct{}) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.CloseNow()
			conn.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"h","method":"hang"}`))
			<-started
			conn.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"c","method":"rpc.cancel","params":{"id":"h"}}`))
			for range 2 {
				if _, _, err := conn.Read(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"websocket closed", func(t *testing.T, c *toolbustest.Cluster, started <-chan struct{}) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(c.URL, "http"), nil)
			if err != nil {
				t.Fatal(err)
			}
			conn.Write(ctx, websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":"h","method":"hang"}`))
			<-started
			conn.Close(websocket.StatusNormalClosure, "bye")
		}},
		{"http client gone", func(t *testing.T, c *toolbustest.Cluster, started <-chan struct{}) {
			ctx, cancel := context.WithCancel(context.Background())
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"hang"}`))
			req.Header.Set("Content-Type", "application/json")
			go func() {
				<-started
				cancel()
			}()
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
				t.Fatal("the request was answered although the client went away")
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			ended := make(chan error, 1)
			c := toolbustest.Start(t, toolbustest.WithTools(hangTool(started, ended)))
			tc.run(t, c, started)
			select {
			case err := <-ended:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("the worker's handler ended with %v, want context.Canceled", err)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the worker's handler never saw the cancellation")
			}
		})
	}
}
