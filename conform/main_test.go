package conform_test

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"
)

// foreignEnv, when set, makes the test binary the foreign worker of
// foreign_test.go instead of running tests: the kit starts it as a worker
// process, as it starts a worker in any language. Its value lists the
// faults, comma-separated, or "none".
const foreignEnv = "CONFORM_TEST_FOREIGN_WORKER"

func TestMain(m *testing.M) {
	if faults, ok := os.LookupEnv(foreignEnv); ok {
		os.Exit(foreignMain(faults))
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
