package aggregator

import (
	"testing"

	"github.com/toolbus/toolbus/schema"
)

// A reply names a free slot only when its call asked for one, and names
// at most one, whatever Toolbus-Free says: a worker cannot draw to itself
// the calls that wait in line for a slot.
func TestFreeSlotClaims(t *testing.T) {
	const rogue = "toolbus.direct.rogue"
	for _, tc := range []struct {
		name    string
		asked   bool   // the answered call was published under pressure
		free    string // the reply's Toolbus-Free
		waiting int    // calls refused busy, in line
		// handed is how many calls in line are sent the rogue's slot;
		// kept how many slots are kept for the next calls.
		handed, kept int
	}{
		{name: "unasked claim of one is ignored", free: "1", waiting: 3},
		{name: "unasked claim of 64 is ignored", free: "64", waiting: 3},
		{name: "unasked claim, nobody waiting, is not kept", free: "1"},
		{name: "asked claim of one", asked: true, free: "1", waiting: 3, handed: 1},
		{name: "asked claim of 64 counts as one", asked: true, free: "64", waiting: 3, handed: 1},
		{name: "asked claim of 64, nobody waiting, keeps one", asked: true, free: "64", kept: 1},
		{name: "asked claim of zero", asked: true, free: "0", waiting: 3},
		{name: "asked claim not a number", asked: true, free: "many", waiting: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testPolicy)
			if tc.asked {
				h.tb.slots.pressedAt["hold"] = h.clk.now()
			}
			answered := h.start("hold")
			if answered.askedFree != tc.asked {
				t.Fatalf("start: asked for free slots = %v, want %v", answered.askedFree, tc.asked)
			}
			var line []*call
			for range tc.waiting {
				w := h.start("hold")
				h.busy(w, "")
				if w.state != refused {
					t.Fatalf("a call refused busy is %v, want refused", w.state)
				}
				line = append(line, w)
			}
			h.reply(answered, `"forged"`, schema.HeaderDirect, rogue, schema.HeaderFree, tc.free)
			h.answer(answered)
			handed := 0
			for _, w := range line {
				if w.state == published && w.direct == rogue {
					handed++
				}
			}
			if handed != tc.handed {
				t.Errorf("%d waiting calls sent to the claimed slot, want %d", handed, tc.handed)
			}
			if kept := len(h.tb.slots.free["hold"]); kept != tc.kept {
				t.Errorf("%d slots kept for the next calls, want %d", kept, tc.kept)
			}
		})
	}
}

// A call that asks for free slots only after it was refused, as every
// call of a method does from the first refusal on, counts the slot its
// reply names: what matters is that the call asked before the reply.
func TestFreeSlotClaimAfterAsking(t *testing.T) {
	h := newHarness(t, testPolicy)
	cl := h.start("hold")
	if cl.askedFree || h.wire.last(t).nameFree {
		t.Fatal("start: asked for free slots with no refusal yet")
	}
	h.busy(cl, "")
	h.advance(busyBackoffMin)
	if !h.wire.last(t).nameFree {
		t.Fatal("published again after a refusal without asking for free slots")
	}
	h.reply(cl, `"ok"`, schema.HeaderDirect, "toolbus.direct.w1", schema.HeaderFree, "1")
	if kept := len(h.tb.slots.free["hold"]); kept != 1 {
		t.Fatalf("%d slots kept, want the one the reply named", kept)
	}
}
