package clientcli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestHealth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/readyz":
			w.WriteHeader(http.StatusOK)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		default:
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	tests := []struct {
		name    string
		args    []string
		wantErr bool
	}{
		{name: "ready", args: []string{"--url", srv.URL + "/readyz"}},
		{name: "unavailable", args: []string{"--url", srv.URL + "/down"}, wantErr: true},
		{name: "too slow", args: []string{"--url", srv.URL + "/slow", "--timeout", "100ms"}, wantErr: true},
		{name: "nothing listening", args: []string{"--url", "http://127.0.0.1:1/readyz"}, wantErr: true},
		{name: "bad timeout", args: []string{"--url", srv.URL + "/readyz", "--timeout", "0s"}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := newHealthCmd()
			cmd.SetArgs(tc.args)
			cmd.SetOut(new(bytes.Buffer))
			cmd.SetErr(new(bytes.Buffer))
			err := cmd.ExecuteContext(context.Background())
			if (err != nil) != tc.wantErr {
				t.Errorf("health %v = %v, want error %v", tc.args, err, tc.wantErr)
			}
		})
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
