package node

import "time"

// SampleJobsQueued starts the background sampling of the jobs queue at
// interval, for tests that cannot wait for the trends' step.
func (g *Gateway) SampleJobsQueued(interval time.Duration) (stop func()) {
	return g.sampleJobsQueued(interval)
}
