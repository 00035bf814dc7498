package main

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/clientcli"
)

func TestDemo(t *testing.T) {
	out, err := execute(t, context.Background(), "demo")
	if err != nil {
		t.Fatalf("demo = %v, want nil; output:\n%s", err, out)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ID +METHOD +OUTCOME +LATENCY$`),
		regexp.MustCompile(`(?m)^1 +echo +ok `),
		regexp.MustCompile(`(?m)^9 +fail +error 2001: insufficient funds `),
		regexp.MustCompile(`(?m)^10 +sleep +error -32001: `),
		regexp.MustCompile(`the same 10 calls as one batch \(Toolbus-Timeout: 1s\): 10 answers \(8 results, 2 errors\)`),
	}
	for i, method := range clientcli.ShowcaseMethods() {
		want = append(want, regexp.MustCompile(fmt.Sprintf(`(?m)^%d +%s `, i+1, regexp.QuoteMeta(method))))
	}
	for _, re := range want {
		if !re.MatchString(out) {
			t.Errorf("demo printed:\n%s\nwant a match for %s", out, re)
		}
	}
	if strings.Contains(out, "unexpected") {
		t.Errorf("demo printed:\n%s\nwant no unexpected outcome", out)
	}
}
