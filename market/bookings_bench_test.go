package market

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkBookings measures one request against one offer of 8 nodes of
// 8 devices holding n two-hour bookings of one device each on random nodes,
// spread over a horizon that keeps the offer about 5 % used whatever n
// (the capacity check's cost in the bookings an offer holds, issue 28):
//
//	go test -run '^$' -bench Bookings -benchtime 3x ./market
//
// batch is a split of 32 devices for 24 hours; gang8 a training job on one
// whole node for 24 hours. Both may start anywhere in the offer's window.
func BenchmarkBookings(b *testing.B) {
	for _, n := range []int{200, 800, 3200, 12800} {
		idx, until := bookingsIndex(n)
		reqs := map[string]Request{
			"batch": {Workload: Workload{Kind: WorkBatch, Devices: 32, MinPieceDevices: 1, Hours: 24},
				Constraints: Constraints{Deadline: until}, Limit: 5},
			"gang8": {Workload: Workload{Kind: WorkTraining, Devices: 8, Hours: 24},
				Constraints: Constraints{Deadline: until}, Limit: 5},
		}
		for _, kind := range []string{"batch", "gang8"} {
			b.Run(fmt.Sprintf("bookings=%d/%s", n, kind), func(b *testing.B) {
				req := reqs[kind]
				res, err := idx.Match(req, benchNow)
				if err != nil {
					b.Fatal(err)
				}
				if len(res.Quotes) == 0 {
					b.Fatalf("no quote: %s", res.Explanation.Summary())
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := idx.Match(req, benchNow); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/booking")
			})
		}
	}
}

// bookingsIndex is an index of one 8×8 offer holding n bookings, and the
// end of its availability.
func bookingsIndex(n int) (*Index, time.Time) {
	rng := rand.New(rand.NewPCG(28, uint64(n)))
	// n bookings of one device for 2 hours over 64 devices at 5 %.
	horizon := time.Duration(n) * 2 * time.Hour * 100 / (64 * 5)
	until := benchNow.Add(horizon).Truncate(time.Hour)
	o := Offer{
		ID: 1, ProviderID: 1, Title: "bookings", AcceleratorID: "nvidia-a100-80gb-sxm", MemoryGB: 80,
		DevicesPerNode: 8, Nodes: 8, PlacementGroup: true, Interconnect: InterconnectNVLink, NetworkID: "infiniband-400",
		DriverVersion: "550.54", CUDAVersion: "12.4", RegionID: "us-west-or", CarbonGPerKWh: 100,
		AvailableFrom: benchNow, AvailableUntil: until, MinRentalHours: 1, MaxRentalHours: 24,
		PriceCentsPerDeviceHour: 200, BillingBasis: BillingWallClock, Review: ReviewApproved, State: OfferActive,
	}
	var cs []Commitment
	hours := int(horizon/time.Hour) - 2
	for i := 0; i < n; i++ {
		start := benchNow.Add(time.Duration(rng.IntN(hours*60)) * time.Minute)
		d := 1
		cs = append(cs, Commitment{OfferID: 1, Devices: d, Start: start, End: start.Add(2 * time.Hour),
			Nodes: []NodeShare{{Node: rng.IntN(8), Devices: d}}})
	}
	idx := NewIndex()
	if err := idx.Load([]Candidate{{Offer: o, ReliabilityBP: 9900}}, cs); err != nil {
		panic(err)
	}
	return idx, until
}
