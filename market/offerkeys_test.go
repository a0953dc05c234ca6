package market

import (
	"math/rand/v2"
	"testing"
)

// TestOfferKeysAgainstMap: random sets and removals of ids small, large,
// zero and negative give what a plain map gives, id by id, and its length.
func TestOfferKeysAgainstMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 28))
	for round := range 200 {
		o, ref := newOfferKeys(rng.IntN(50)), map[int64]uint16{}
		ids := func() int64 {
			switch rng.IntN(5) {
			case 0:
				return -rng.Int64N(100)
			case 1:
				return 1<<40 + rng.Int64N(100)
			case 2:
				return rng.Int64N(200_000)
			}
			return rng.Int64N(300)
		}
		for range 2000 {
			id := ids()
			if rng.IntN(3) == 0 {
				o.remove(id)
				delete(ref, id)
			} else {
				k := uint16(rng.IntN(1 << 16))
				o.set(id, k)
				ref[id] = k
			}
			probe := ids()
			k, ok := o.get(probe)
			rk, rok := ref[probe]
			if ok != rok || k != rk {
				t.Fatalf("round %d: id %d: %d %v, want %d %v", round, probe, k, ok, rk, rok)
			}
		}
		for id, rk := range ref {
			if k, ok := o.get(id); !ok || k != rk {
				t.Fatalf("round %d: id %d: %d %v, want %d", round, id, k, ok, rk)
			}
		}
		if o.len() != len(ref) {
			t.Fatalf("round %d: length %d, want %d", round, o.len(), len(ref))
		}
	}
}
