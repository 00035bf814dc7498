package node

import "time"

// SampleJobsQueued starts the background sampling of the jobs queue at
// interval, for tests that cannot wait for the trends' step.
func (g *Gateway) SampleJobsQueued(interval time.Duration) (stop func()) {
	return g.sampleJobsQueued(interval)
}

// The gateway's and worker's own options, which programs set through a
// config ([NewGatewayFrom], [NewWorkerFrom]), for the tests that build
// the parts with [NewGateway] and [NewWorker] directly.
var (
	WithA2A            = withA2A
	WithRegistry       = withRegistry
	WithToolsRetention = withToolsRetention
	WithValidation     = withValidation
	WithJobs           = withJobs
	WithJobCounters    = withJobCounters
	WithIdempotency    = withIdempotency
	WithReplicas       = withReplicas
	WithMetrics        = withMetrics
	WithPrefix         = withPrefix
	WithSubjects       = withSubjects
	WithVersion        = withVersion
)
