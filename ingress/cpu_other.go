//go:build !unix

package ingress

import "time"

// processCPU reads no CPU time where getrusage is not there: the
// fairness window, which sees the process as idle, is never paced.
func processCPU() time.Duration { return 0 }
