package quota

import (
	"testing"

	"github.com/toolbus/toolbus/schema"
)

// TestOneCallerNeverClosesTheBudget: a named caller holding all of its
// share leaves room for another caller's calls; only two at once reach
// the bound of all.
func TestOneCallerNeverClosesTheBudget(t *testing.T) {
	b := NewBytes(1000, 0)
	if e := b.take("a", 500); e != nil {
		t.Fatalf("a's share: %v", e)
	}
	if e := b.take("a", 1); e == nil {
		t.Fatal("a byte over a's share was taken")
	}
	if e := b.Admit("a"); e == nil || e.Limit() != "caller_max_bytes_in_flight" {
		t.Fatalf("a's next call = %v, want caller_max_bytes_in_flight", e)
	}
	if e := b.Admit("b"); e != nil {
		t.Fatalf("b's call while a holds its share = %v, want it admitted", e)
	}
	if e := b.take("b", 300); e != nil {
		t.Fatal(e)
	}
	if e := b.Admit("c"); e == nil || e.Limit() != "max_bytes_in_flight" {
		t.Fatalf("c's call while a and b hold 800 of 1000 = %v, want max_bytes_in_flight", e)
	}
	b.free("a", 500)
	b.free("b", 300)
	if n := b.Total(); n != 0 {
		t.Fatalf("Total() = %d after everything was freed, want 0", n)
	}
}

// TestCharge: a charge holds what fits, replaces an answer that does not
// with a refusal that says the call ran, and gives everything back on
// Close.
func TestCharge(t *testing.T) {
	b := NewBytes(1000, 400)
	ch := b.Open("a")
	small := schema.Response{ID: []byte("1"), Result: []byte(`"ok"`)}
	if got := ch.Hold(small); got.Error != nil {
		t.Fatalf("Hold(small) = %v, want it held", got.Error)
	}
	if n := b.Total(); n != AnswerSize(small) {
		t.Errorf("Total() = %d, want %d", n, AnswerSize(small))
	}
	big := schema.Response{ID: []byte("2"), Result: make([]byte, 400)}
	got := ch.Hold(big)
	if got.Error == nil || got.Error.Code != schema.CodeOverloaded || got.Error.Limit() != "caller_max_bytes_in_flight" || string(got.ID) != "2" {
		t.Fatalf("Hold(big) = %+v, want -32002 caller_max_bytes_in_flight for id 2", got)
	}
	ch.Close()
	if n := b.Total(); n != 0 {
		t.Errorf("Total() after Close = %d, want 0", n)
	}
	var none *Charge
	if got := none.Hold(big); got.Error != nil {
		t.Errorf("a nil Charge refused %v, want it to hold nothing", got.Error)
	}
	none.Close()
}
