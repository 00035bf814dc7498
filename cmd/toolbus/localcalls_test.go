package main

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/bus"
)

// echoCalls matches the worker's count of echo calls answered with a
// result in the text of /metrics.
var echoCalls = regexp.MustCompile(`(?m)^toolbus_worker_calls_total\{code="ok",method="echo"\} (\S+)$`)

// workerEchoCalls returns how many echo calls the worker of the toolbus
// dev at base has answered with a result, by its /metrics.
func workerEchoCalls(t *testing.T, base string) float64 {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET %s/metrics = %d, want 200", base, code)
	}
	m := echoCalls.FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("toolbus_worker_calls_total{echo,ok} = %q: %v", m[1], err)
	}
	return n
}

// TestDevLocalCalls checks that toolbus dev answers echo both with its
// worker's calls run in the process (the default) and with
// --local-calls=false, and that only the latter sends them over the
// embedded NATS.
//
// The worker's toolbus_worker_calls_total shows that the worker ran each
// call either way. Whether a call crossed the bus is seen by a subscriber
// on echo's call subject outside the workers' queue group, which the
// server hands every call published there; the server's own message
// counters would also count the ingress's and the worker's other traffic.
func TestDevLocalCalls(t *testing.T) {
	const calls = 3
	tests := []struct {
		name    string
		flags   []string
		overBus bool
	}{
		{name: "default", overBus: false},
		{name: "local calls off", flags: []string{"--local-calls=false"}, overBus: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"dev", "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0"}, tc.flags...)
			dev := runCommand(t, args...)
			url := dev.waitFor(t, readyLine)
			natsURL := dev.waitFor(t, natsLine)
			token := dev.waitFor(t, joinLine)
			base := strings.TrimSuffix(url, "/rpc")

			nc, err := bus.Connect(natsURL, bus.WithName("toolbus-test-spy"), bus.WithToken(token))
			if err != nil {
				t.Fatalf("connect to dev's NATS: %v", err)
			}
			t.Cleanup(nc.Close)
			subjects, err := bus.NewSubjects(bus.DefaultPrefix)
			if err != nil {
				t.Fatal(err)
			}
			subject, err := subjects.Call("echo")
			if err != nil {
				t.Fatal(err)
			}
			spy, err := nc.SubscribeSync(subject)
			if err != nil {
				t.Fatalf("subscribe to %s: %v", subject, err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}

			before := workerEchoCalls(t, base)
			for i := range calls {
				r := postEcho(t, url)
				var result map[string]string
				if r.Error != nil || json.Unmarshal(r.Result, &result) != nil || result["hello"] != "dev" {
					t.Fatalf("echo #%d = %s %v, want {\"hello\":\"dev\"}", i+1, r.Result, r.Error)
				}
			}
			if got := workerEchoCalls(t, base) - before; got != calls {
				t.Errorf("the worker counted %v echo calls, want %d", got, calls)
			}
			// A call published reached the spy's connection before its
			// worker could answer it; the flush's round trip comes after it
			// on that connection, so once it returns every call published
			// is pending.
			if err := nc.Flush(); err != nil {
				t.Fatal(err)
			}
			seen, _, err := spy.Pending()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.overBus && seen < calls:
				// More is fine: the aggregator may publish a call again.
				t.Errorf("%d echo calls crossed the bus, want at least %d", seen, calls)
			case !tc.overBus && seen != 0:
				t.Errorf("%d echo calls crossed the bus, want none: the worker of the same process runs them", seen)
			}
			nc.Close()
			if err := dev.stop(); err != nil {
				t.Errorf("dev stopped with %v, want nil", err)
			}
		})
	}
}
