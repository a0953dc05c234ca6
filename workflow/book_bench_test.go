package workflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// BenchmarkBookAndFollow measures bookings per second on SQLite through
// workflow.Book — the booking transaction and the matcher index following
// it before Book returns — with 1, 8 and 64 concurrent bookers, and, as
// its yardstick in the same run, the same bookings through the store
// alone (store.CreateReservation, with no workflow on the database, so no
// index follows: path=store). The
// schedule never conflicts: booking k takes 1 device for 1 hour on offer
// k mod 64 (8 devices each) in hour k div 64, for buyer k div 3 (the
// unpaid-hold limit). Afterwards the index must have followed the
// bookings (checked on the first: 8 devices of its hour are not quoted).
//
//	go test ./workflow/ -run '^$' -bench BookAndFollow -benchtime 3000x
func BenchmarkBookAndFollow(b *testing.B) {
	for _, bookers := range []int{1, 8, 64} {
		for _, path := range []string{"store", "workflow"} {
			b.Run(fmt.Sprintf("bookers=%d/path=%s", bookers, path), func(b *testing.B) { benchBookAndFollow(b, bookers, path == "workflow") })
		}
	}
}

func benchBookAndFollow(b *testing.B, bookers int, throughWorkflow bool) {
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	prov, err := db.CreateUser(ctx, market.User{Email: "prov@example.com", DisplayName: "prov", IsProvider: true}, []byte("x"), t0)
	if err != nil {
		b.Fatal(err)
	}
	const offers = 64
	ids := make([]int64, offers)
	for i := range ids {
		o, err := db.CreateOffer(ctx, market.Offer{
			ProviderID: prov.ID, Title: fmt.Sprintf("offer %d", i), AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
			DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024,
			StorageGB: 7680, DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26",
			RegionID: "us-west-or", AvailableFrom: t0, AvailableUntil: t0.Add(365 * 24 * time.Hour), MinRentalHours: 1, MaxRentalHours: 720,
			ProvisioningMins: 15, PriceCentsPerDeviceHour: 249, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
			FreeCancelHours: 24, CancelFeeBP: 1000,
		}, t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
			b.Fatal(err)
		}
		ids[i] = o.ID
	}
	buyers := make([]int64, b.N/market.MaxUnpaidHolds+1)
	for i := range buyers {
		u, err := db.CreateUser(ctx, market.User{Email: fmt.Sprintf("b%d@example.com", i), DisplayName: "b", IsBuyer: true}, []byte("x"), t0)
		if err != nil {
			b.Fatal(err)
		}
		buyers[i] = u.ID
	}
	var wf *Service // none on the store path: nothing follows its commits
	if throughWorkflow {
		if wf, err = New(ctx, Config{PlatformFeeBP: feeBP, Now: func() time.Time { return t0 }}, db, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
			b.Fatal(err)
		}
	}
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for range bookers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1) - 1)
				if k >= b.N {
					return
				}
				start := t0.Add(24*time.Hour + time.Duration(k/offers)*time.Hour)
				p := []market.ReservationPiece{{OfferID: ids[k%offers], Devices: 1, Start: start, End: start.Add(time.Hour), PriceCents: 249, AmountCents: 249}}
				var err error
				if throughWorkflow {
					_, err = wf.Book(ctx, buyers[k/market.MaxUnpaidHolds], p, "{}", time.Hour)
				} else {
					_, err = db.CreateReservation(ctx, buyers[k/market.MaxUnpaidHolds], p, "{}", t0, time.Hour)
				}
				if err != nil && failed.Add(1) == 1 {
					b.Errorf("booking %d: %v", k, err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "bookings/s")
	b.ReportMetric(0, "ns/op")
	if !throughWorkflow {
		return
	}
	// Booking 0 took one device of offer 0's first hour: the index must
	// not quote all 8 there.
	first := t0.Add(24 * time.Hour)
	res, err := wf.Index().Match(market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 8, Hours: 1},
		Constraints: market.Constraints{EarliestStart: first, Deadline: first.Add(time.Hour), OfferIDs: []int64{ids[0]}}}, t0)
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Quotes) != 0 {
		b.Fatalf("the index quotes 8 devices of offer 0 in an hour where 1 is booked: %+v", res.Quotes[0])
	}
}
