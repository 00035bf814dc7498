package egress

import "testing"

func TestRangesAreWellFormed(t *testing.T) {
	for _, r := range ranges {
		if r.Kind == "" || !r.Prefix.IsValid() || r.Prefix != r.Prefix.Masked() {
			t.Errorf("range %+v: want a kind and a masked prefix", r)
		}
		// A range that an earlier, wider one holds would never name an
		// address.
		for _, earlier := range ranges {
			if earlier == r {
				break
			}
			if earlier.Prefix.Bits() <= r.Prefix.Bits() && earlier.Prefix.Contains(r.Prefix.Addr()) {
				t.Errorf("range %v is hidden by the earlier %v", r.Prefix, earlier.Prefix)
			}
		}
	}
}
