package worker

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ProbeHandler serves what Prometheus and a container orchestrator ask of
// a worker process, which otherwise speaks only NATS:
//
//	GET /metrics   the metrics of g in the Prometheus or OpenMetrics format
//	               (404 when g is nil); see [WithMetrics]
//	GET /healthz   200 {"status":"ok"} while the process runs
//	GET /readyz    200 {"status":"ready"}, or 503 {"status":"not ready","reason":…}
//	               with the first error of ready
//
// ready is the worker's readiness: [Runtime.Ready], or a function that
// checks more first, such as what the process still waits for; nil
// panics. Serve the
// handler until the runtime has drained, so that /readyz says so
// meanwhile.
func ProbeHandler(g prometheus.Gatherer, ready func() error) http.Handler {
	if ready == nil {
		panic("worker: ProbeHandler with a nil readiness func")
	}
	mux := http.NewServeMux()
	if g != nil {
		opts := promhttp.HandlerOpts{EnableOpenMetrics: true}
		// A registry also counts the handler's own errors.
		if reg, ok := g.(prometheus.Registerer); ok {
			opts.Registry = reg
		}
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, opts))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "{\"status\":\"not ready\",\"reason\":%q}\n", err.Error())
			return
		}
		fmt.Fprintln(w, `{"status":"ready"}`)
	})
	return mux
}
