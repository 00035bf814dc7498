package conform_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/toolbus/toolbus/worker"
	"github.com/toolbus/toolbus/worker/conformtools"
)

// foreignEnv, when set, makes the test binary the foreign worker of
// foreign_test.go instead of running tests: the kit starts it as a worker
// process, as it starts a worker in any language. Its value lists the
// faults, comma-separated, or "none".
const foreignEnv = "CONFORM_TEST_FOREIGN_WORKER"

// goWorkerEnv, when set, makes the test binary a worker of toolbus's own
// runtime serving the conformance toolset, as `toolbus worker --tools
// conform` does.
const goWorkerEnv = "CONFORM_TEST_GO_WORKER"

func TestMain(m *testing.M) {
	if faults, ok := os.LookupEnv(foreignEnv); ok {
		os.Exit(foreignMain(faults))
	}
	if _, ok := os.LookupEnv(goWorkerEnv); ok {
		os.Exit(goWorkerMain())
	}
	goleak.VerifyTestMain(m)
}

// foreignMain runs the foreign worker on the connection the kit's
// environment names until SIGTERM, then drains.
func foreignMain(list string) int {
	var faults []fault
	for _, f := range strings.Split(list, ",") {
		if f != "" && f != "none" {
			faults = append(faults, fault(f))
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	nc, err := nats.Connect(os.Getenv("TOOLBUS_NATS_URL"), nats.Token(os.Getenv("TOOLBUS_NATS_TOKEN")), nats.Name("foreign-worker"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "foreign worker:", err)
		return 1
	}
	w, err := startForeign(nc, os.Getenv("TOOLBUS_PREFIX"), faults...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "foreign worker:", err)
		return 1
	}
	<-sig
	w.stop()
	return 0
}

// goWorkerMain serves the conformance toolset with toolbus's worker runtime
// on the connection the kit's environment names until SIGTERM, then
// drains.
func goWorkerMain() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	nc, err := nats.Connect(os.Getenv("TOOLBUS_NATS_URL"), nats.Token(os.Getenv("TOOLBUS_NATS_TOKEN")), nats.Name("go-worker"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	defer nc.Close()
	rt, err := worker.New(nc, worker.WithPrefix(os.Getenv("TOOLBUS_PREFIX")), worker.WithoutStatus())
	if err == nil {
		err = conformtools.Register(rt)
	}
	if err == nil {
		err = rt.Start()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	<-sig
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "go worker:", err)
		return 1
	}
	return 0
}
