package testwait

import (
	"fmt"
	"runtime"
	"testing"
)

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, func() bool { n++; return n == 3 }, "the third call")
	if n != 3 {
		t.Errorf("Eventually returned after %d calls, want 3", n)
	}
}

// fatalTB records a fatal failure and stops its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestEventuallyGivesUp(t *testing.T) {
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		eventually(f, func() bool { return false }, "a thing happens", 0)
	}()
	<-done
	if want := "gave up waiting until a thing happens (0s)"; f.msg != want {
		t.Errorf("failure = %q, want %q", f.msg, want)
	}
}
