package aggregator

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

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
			in, _, _ := testInbox(t)
			if tc.asked {
				in.pressedAt["hold"] = time.Now()
			}
			subject, answered, pressed, closeCall := in.open("hold", false)
			defer closeCall()
			if pressed != tc.asked {
				t.Fatalf("open: pressed = %v, want %v", pressed, tc.asked)
			}
			var line []*pending
			for range tc.waiting {
				_, p, _, closeWaiting := in.open("hold", false)
				defer closeWaiting()
				in.refuse(p, time.Now())
				line = append(line, p)
			}

			in.deliver(replyMsg(t, subject, nats.Header{
				schema.HeaderDirect: []string{rogue}, schema.HeaderFree: []string{tc.free}}))
			select {
			case <-answered.reply:
			default:
				t.Fatal("the reply did not answer its call")
			}
			handed := 0
			for _, p := range line {
				select {
				case to := <-p.direct:
					if to != rogue {
						t.Errorf("a waiting call was sent %q, want %q", to, rogue)
					}
					handed++
				default:
				}
			}
			if handed != tc.handed {
				t.Errorf("%d waiting calls sent to the claimed slot, want %d", handed, tc.handed)
			}
			if kept := len(in.free["hold"]); kept != tc.kept {
				t.Errorf("%d slots kept for the next calls, want %d", kept, tc.kept)
			}
		})
	}
}

// A call that asks for free slots only after it was refused, as every
// call of a method does from the first refusal on, counts the slot its
// reply names: what matters is that the call asked before the reply.
func TestFreeSlotClaimAfterAsking(t *testing.T) {
	in, _, _ := testInbox(t)
	subject, answered, pressed, closeCall := in.open("hold", false)
	defer closeCall()
	if pressed {
		t.Fatal("open: pressed with no refusal yet")
	}
	answered.askedFree.Store(true) // as exchange does on a busy refusal
	in.deliver(replyMsg(t, subject, nats.Header{
		schema.HeaderDirect: []string{"toolbus.direct.w1"}, schema.HeaderFree: []string{"1"}}))
	if kept := len(in.free["hold"]); kept != 1 {
		t.Fatalf("%d slots kept, want the one the reply named", kept)
	}
}
