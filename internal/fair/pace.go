package fair

import "time"

// Pacing keeps the process's CPU from saturating while more than one flow
// is active. On a saturated core a Go process polls the network only when
// its run queues are empty, and otherwise every 10 ms, so a caller with
// one call in flight gets about one call through per poll whatever its
// share of the window; the window's order only helps the calls that have
// been read. With a CPU target below 1 ([Config.CPUTarget]; pacing is off
// by default), while two flows or more have been admitted lately and the
// process uses more than the target of its CPUs, the window admits at a
// pace: a rate that starts at what was admitted, falls by a tenth each
// period the process stays above the target, never below a quarter of
// where it started, and rises by a tenth each period the process stays
// well below it; it is dropped once it no longer binds or one flow is
// left. The idle moments it leaves let the process read every
// connection's next request, whose entry then goes first by its start
// tag. A flow alone is never paced.

// Defaults and bounds of pacing.
const (
	// DefaultCPUTarget is the share of its CPUs the process may use for
	// the work it admits while flows compete: all of them, so that
	// nothing is paced unless a target below 1 is asked for.
	DefaultCPUTarget = 1.0
	// pacePeriod is how often the pace is looked at.
	pacePeriod = 20 * time.Millisecond
	// activeSpan is how long a flow counts as active after an admission.
	activeSpan = 200 * time.Millisecond
	// paceBurst is the time of admissions the tokens may hold.
	paceBurst = 2 * time.Millisecond
	// minPace is the slowest pace, in admissions a second.
	minPace = 100.0
	// paceFloor is the share of the rate at which pacing began that the
	// pace never falls below.
	paceFloor = 0.25
)

// pacer is the scheduler's pacing state; it is guarded by the
// scheduler's lock.
type pacer struct {
	// cpu reports the process's CPU time used so far, on cores CPUs;
	// nil: no pacing.
	cpuTime func() time.Duration
	cores   int
	// rate is the admissions a second while paced; 0 when not paced.
	// floor is the slowest rate of this spell of pacing.
	rate, floor float64
	tokens      float64
	refill      time.Time
	// since, cpu and admitted are the start of the current period, the
	// process's CPU time then, and the admissions since.
	since    time.Time
	cpu      time.Duration
	admitted int
	// recent holds when each flow was last admitted, for a while.
	recent map[string]time.Time
}

// MeasureCPU lets s pace its window (see pace.go): cpu reports the CPU
// time the process has used so far (such as user and system time from
// getrusage), on cores CPUs (GOMAXPROCS). It is called at most once a
// pace period, under the scheduler's lock. Without it nothing is paced.
func (s *Scheduler[T]) MeasureCPU(cpu func() time.Duration, cores int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pace.cpuTime, s.pace.cores = cpu, max(cores, 1)
}

// pacing reports whether s paces its window.
func (s *Scheduler[T]) pacing() bool { return s.pace.cpuTime != nil && s.cpuTarget() < 1 }

// cpuTarget is [Config.CPUTarget] with its default.
func (s *Scheduler[T]) cpuTarget() float64 {
	if s.cfg.CPUTarget == 0 {
		return DefaultCPUTarget
	}
	return s.cfg.CPUTarget
}

// steer looks at the pace once a period: the CPU the process used since
// the last look, the admissions, and the flows active.
func (s *Scheduler[T]) steer(now time.Time) {
	p := &s.pace
	if p.since.IsZero() {
		p.since, p.cpu = now, p.cpuTime()
		return
	}
	span := now.Sub(p.since)
	if span < pacePeriod {
		return
	}
	cpu := p.cpuTime()
	util := float64(cpu-p.cpu) / (float64(span) * float64(p.cores))
	admitted := float64(p.admitted) / span.Seconds()
	p.since, p.cpu, p.admitted = now, cpu, 0
	for name, at := range p.recent {
		if now.Sub(at) > activeSpan {
			delete(p.recent, name)
		}
	}
	active := len(p.recent)
	for _, fl := range s.busy {
		if _, in := p.recent[fl.name]; !in {
			active++ // queued, and not admitted lately: it waits too
		}
	}
	target := s.cpuTarget()
	switch {
	case active < 2:
		p.rate = 0
	case p.rate == 0:
		if util > target {
			p.floor = max(admitted*paceFloor, minPace)
			p.rate = max(admitted*target/util, p.floor)
			p.tokens, p.refill = 0, now
		}
	case util > target:
		p.rate = max(p.rate*0.9, p.floor)
	case util < 0.9*target:
		p.rate *= 1.1
		if p.rate > 2*admitted && admitted > 0 {
			p.rate = 0 // no longer binds
		}
	}
}

// take reports whether the pace lets one more entry in at now, and
// counts it when it does.
func (s *Scheduler[T]) take(now time.Time, name string) bool {
	p := &s.pace
	if p.rate > 0 {
		p.tokens = min(p.tokens+now.Sub(p.refill).Seconds()*p.rate, max(1, p.rate*paceBurst.Seconds()))
		p.refill = now
		if p.tokens < 1 {
			return false
		}
		p.tokens--
	}
	p.admitted++
	if p.recent == nil {
		p.recent = map[string]time.Time{}
	}
	p.recent[name] = now
	return true
}

// nextToken returns when the pace lets the next entry in, when entries
// wait for it.
func (s *Scheduler[T]) nextToken() (time.Time, bool) {
	p := &s.pace
	if p.rate == 0 || p.tokens >= 1 || len(s.busy) == 0 {
		return time.Time{}, false
	}
	return p.refill.Add(time.Duration((1 - p.tokens) / p.rate * float64(time.Second))), true
}
