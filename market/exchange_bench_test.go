package market

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkStandingOrderPass measures one matching pass over open standing
// orders on the 100,000-offer bench index, in the worst case: no order's
// limit is met, so every order is matched and none fills. The yardstick,
// measured in the same run, is one narrow quote (orders=1 is that plus the
// order's bookkeeping): a pass should cost about orders × a quote, since
// each order is one ordinary match.
func BenchmarkStandingOrderPass(b *testing.B) {
	bi := getBenchIndex(b, 100_000)
	reqs := narrowRequests()
	match := func(r Request) (Result, error) { return bi.idx.Match(r, benchNow) }
	b.Run("yardstick=one-quote", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := match(reqs[i%len(reqs)]); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, n := range []int{1, 5, 50, 500} {
		orders := make([]StandingOrder, n)
		for i := range orders {
			orders[i] = StandingOrder{ID: int64(i + 1), Request: reqs[i%len(reqs)], LimitKind: LimitPerRefDeviceHour,
				LimitCents: 1, FillBy: benchNow.Add(48 * time.Hour), State: OrderOpen, CreatedAt: benchNow.Add(-time.Duration(n-i) * time.Minute)}
		}
		b.Run(fmt.Sprintf("orders=%d", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, _, ok := NextFill(orders, match, benchNow); ok {
					b.Fatal("an order under a 1¢ limit filled")
				}
			}
		})
	}
}

// BenchmarkMayServe measures the pre-check that keeps a change to one
// offer from re-matching orders it cannot serve, and reports the share of
// 500 narrow orders a random bench offer may serve (the orders a change
// re-matches).
func BenchmarkMayServe(b *testing.B) {
	reqs := narrowRequests()
	offers := make([]Offer, 1000)
	for i := range offers {
		offers[i] = benchOffer(int64(i+1), 7)
	}
	kept := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := offers[i%len(offers)]
		for j := range 500 {
			if MayServe(o, reqs[j%len(reqs)]) {
				kept++
			}
		}
	}
	b.ReportMetric(float64(kept)/float64(b.N)/500*100, "%-rematched")
}

// BenchmarkClearSpot measures the spot clearing of one offer-hour against
// its yardstick in the same run: sorting the same bids by price, the least
// any rule ranking bids must do.
func BenchmarkClearSpot(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		rng := rand.New(rand.NewPCG(1, uint64(n)))
		bids := make([]SpotBid, n)
		for i := range bids {
			bids[i] = SpotBid{ID: int64(i + 1), Devices: 1 + rng.IntN(8), MaxCents: Cents(100 + rng.IntN(400)),
				PlacedAt: benchNow.Add(time.Duration(rng.IntN(3600)) * time.Second)}
		}
		capacity := n * 2 // about half the devices bid for win
		b.Run(fmt.Sprintf("bids=%d/yardstick=sort", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				s := slices.Clone(bids)
				slices.SortFunc(s, func(x, y SpotBid) int { return cmp.Compare(y.MaxCents, x.MaxCents) })
			}
		})
		b.Run(fmt.Sprintf("bids=%d/clear", n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if c := ClearSpot(150, capacity, bids); c.PriceCents < 150 {
					b.Fatal("cleared below the floor")
				}
			}
		})
	}
}
