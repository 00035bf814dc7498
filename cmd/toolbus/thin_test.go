package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxCommandLines bounds the non-test lines of package main: it holds
// main, the cobra tree and the glue between flags, fx and node. Logic
// that grows past it belongs in an importable package (node for serving,
// internal/clientcli for the client commands, internal/bench for the
// bench, bus/natsd for the NATS server).
const maxCommandLines = 1500

func TestCommandStaysThin(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(b, []byte("\n"))
	}
	if total == 0 {
		t.Fatal("found no source of package main")
	}
	if total > maxCommandLines {
		t.Errorf("package main has %d non-test lines, more than %d: move the logic that grew into the package that owns it, and keep here only main, the cobra tree and the glue", total, maxCommandLines)
	}
}
