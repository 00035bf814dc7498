package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/toolbus/toolbus/bus"
	"github.com/toolbus/toolbus/internal/heapgoal"
)

// common holds the settings a gateway and a worker share.
type common struct {
	// subjects are the process's subject names, made once from its
	// prefix and handed to every part.
	subjects bus.Subjects
	log      *slog.Logger
	version  string
	// gcHeadroom is the heap goal's headroom above the live heap that
	// the process keeps while it runs (see internal/heapgoal); 0 keeps
	// none.
	gcHeadroom int64
}

func defaultCommon() common {
	return common{subjects: bus.DefaultSubjects(), log: slog.Default(), version: "dev"}
}

// Option configures a gateway or a worker: [NewGateway] and [NewWorker]
// both accept it.
type Option func(*common) error

func (o Option) applyGateway(c *gatewaySettings) error { return o(&c.common) }
func (o Option) applyWorker(c *workerSettings) error   { return o(&c.common) }

// GatewayOption configures [NewGateway]: an [Option] or one of the
// gateway's own.
type GatewayOption interface {
	applyGateway(*gatewaySettings) error
}

type gatewayOption func(*gatewaySettings) error

func (o gatewayOption) applyGateway(c *gatewaySettings) error { return o(c) }

// WorkerOption configures [NewWorker]: an [Option] or one of the worker's
// own.
type WorkerOption interface {
	applyWorker(*workerSettings) error
}

// withPrefix sets the NATS subject prefix of the cluster (default
// [bus.DefaultPrefix]) for every part: calls, announcements, status, jobs
// and idempotency records. It is [withSubjects] for a program that has
// only its prefix.
func withPrefix(prefix string) Option {
	return func(c *common) error {
		s, err := bus.NewSubjects(prefix)
		if err != nil {
			return err
		}
		return withSubjects(s)(c)
	}
}

// withSubjects sets the subjects of the cluster (default
// [bus.DefaultSubjects]) for every part, for a program that made them
// once and hands the same value to the parts it makes itself, such as a
// worker's runtime. The zero value is refused.
func withSubjects(s bus.Subjects) Option {
	return func(c *common) error {
		if s.IsZero() {
			return errors.New("node: zero subjects: make them with bus.NewSubjects")
		}
		c.subjects = s
		return nil
	}
}

// WithLogger sets the logger of every part (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *common) error {
		if l == nil {
			return errors.New("node: nil logger")
		}
		c.log = l
		return nil
	}
}

// withGCHeadroom keeps the process's heap goal at least n bytes above
// its live heap while the gateway or worker runs (--gc-headroom).
func withGCHeadroom(n int64) Option {
	return func(c *common) error {
		if n < 0 {
			return fmt.Errorf("the heap's headroom must be 0 (none) or more bytes, got %d", n)
		}
		c.gcHeadroom = n
		return nil
	}
}

// keepHeapGoal keeps the heap goal's headroom of c from now on, and adds
// its stop to stops; it logs why when it keeps none though one was asked
// for (an operator's GOGC or GOMEMLIMIT, or a second part of the same
// process, which shares the first's).
func keepHeapGoal(c common, stops *stops) {
	if c.gcHeadroom == 0 {
		return
	}
	k, why := heapgoal.Keep(uint64(c.gcHeadroom))
	if k == nil {
		c.log.Debug("the heap goal keeps no headroom of its own", "reason", why)
		return
	}
	stops.add("heap goal", func(context.Context) error { k.Stop(); return nil })
}

// withVersion sets the version the status service reports (default
// "dev").
func withVersion(v string) Option {
	return func(c *common) error {
		if v == "" {
			return errors.New("node: empty version")
		}
		c.version = v
		return nil
	}
}
