package options

import (
	"errors"
	"testing"
)

type config struct{ a, b int }

type option func(*config) error

// TestApply checks that options apply in order, and that the first
// refusal stops the rest.
func TestApply(t *testing.T) {
	refused := errors.New("refused")
	set := func(a int) option { return func(c *config) error { c.a = a; return nil } }
	refuse := func(*config) error { return refused }
	cfg, err := Apply(config{b: 7}, []option{set(1), set(2)})
	if err != nil || cfg != (config{a: 2, b: 7}) {
		t.Errorf("Apply(set 1, set 2) = %+v, %v; want {2 7}, nil", cfg, err)
	}
	cfg, err = Apply(config{}, []option{set(1), refuse, set(3)})
	if !errors.Is(err, refused) || cfg.a != 1 {
		t.Errorf("Apply(set 1, refuse, set 3) = %+v, %v; want a 1 and the refusal", cfg, err)
	}
}
