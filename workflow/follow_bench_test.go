package workflow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// idleP99 is the idle sub-benchmark's p99, for the ratio the loaded ones
// report (0 until it has run).
var idleP99 time.Duration

// BenchmarkFollowLatency measures, on PostgreSQL (store/pgtest), how long a
// change committed through replica a takes to show in replica b's index
// while a books at 0 (idle), 1, 10 and 100 bookings a second: each
// iteration pauses or resumes a probe offer through a and waits until b's
// index has the offer out or back. It reports the change-visible latency's
// p50 and p99, their ratio to the idle p99, and the booking rate a
// sustained.
//
//	go test ./workflow/ -run '^$' -bench FollowLatency -benchtime 200x
func BenchmarkFollowLatency(b *testing.B) {
	for _, rate := range []int{0, 1, 10, 100} {
		name := "idle"
		if rate > 0 {
			name = fmt.Sprintf("book%d/s", rate)
		}
		b.Run(name, func(b *testing.B) { benchFollow(b, rate) })
	}
}

func benchFollow(b *testing.B, rate int) {
	ctx := context.Background()
	dsn := pgtest.Database(b)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	open := func() *store.DB {
		db, err := store.Open(ctx, dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		return db
	}
	dbA, dbB := open(), open()
	prov, err := dbA.CreateUser(ctx, market.User{Email: "prov@example.com", DisplayName: "prov", IsProvider: true}, []byte("x"), t0)
	if err != nil {
		b.Fatal(err)
	}
	// A buyer may hold three unpaid reservations: enough buyers for 20 s of
	// the load.
	buyers := make([]market.User, rate*20/3+1)
	for i := range buyers {
		if buyers[i], err = dbA.CreateUser(ctx, market.User{Email: fmt.Sprintf("buyer%d@example.com", i), DisplayName: "buyer", IsBuyer: true},
			[]byte("x"), t0); err != nil {
			b.Fatal(err)
		}
	}
	offer := func(title string) market.Offer {
		o, err := dbA.CreateOffer(ctx, market.Offer{
			ProviderID: prov.ID, Title: title, AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
			DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 96, RAMGB: 1024,
			StorageGB: 7680, DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker 26",
			RegionID: "us-west-or", AvailableFrom: t0, AvailableUntil: t0.Add(365 * 24 * time.Hour), MinRentalHours: 1, MaxRentalHours: 720,
			ProvisioningMins: 15, PriceCentsPerDeviceHour: 249, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
			FreeCancelHours: 24, CancelFeeBP: 1000,
		}, t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := dbA.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
			b.Fatal(err)
		}
		return o
	}
	const loadOffers = 20
	load := make([]market.Offer, loadOffers)
	for i := range load {
		load[i] = offer(fmt.Sprintf("load %d", i))
	}
	probe := offer("probe")
	clock := func() time.Time { return t0 }
	a, err := New(ctx, Config{PlatformFeeBP: feeBP, Now: clock, Replica: "a"}, dbA, log)
	if err != nil {
		b.Fatal(err)
	}
	rb, err := New(ctx, Config{PlatformFeeBP: feeBP, Now: clock, Replica: "b"}, dbB, log)
	if err != nil {
		b.Fatal(err)
	}
	fctx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() { defer close(followed); rb.Follow(fctx) }()
	defer func() { stopFollow(); <-followed }()
	time.Sleep(300 * time.Millisecond) // the feed joins

	// The load: one device for one hour per booking, each in an hour of
	// its own, spread over the load offers, at rate a second.
	lctx, stopLoad := context.WithCancel(ctx)
	var booked, failed atomic.Int64
	var wg sync.WaitGroup
	if rate > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(time.Second / time.Duration(rate))
			defer tick.Stop()
			var n atomic.Int64
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for {
				select {
				case <-lctx.Done():
					return
				case <-tick.C:
				}
				k := n.Add(1) - 1
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					start := t0.Add(48*time.Hour + time.Duration(k/loadOffers)*time.Hour)
					p := market.ReservationPiece{OfferID: load[k%loadOffers].ID, Devices: 1, Start: start, End: start.Add(time.Hour),
						PriceCents: 249, AmountCents: 249}
					if k/3 >= int64(len(buyers)) {
						failed.Add(1)
						return
					}
					if _, err := a.Book(lctx, buyers[k/3].ID, []market.ReservationPiece{p}, `{"version":1}`, 30*time.Minute); err != nil {
						if lctx.Err() == nil && failed.Add(1) == 1 {
							b.Logf("booking: %v", err)
						}
						return
					}
					booked.Add(1)
				}()
			}
		}()
		time.Sleep(time.Second) // the load runs before the first probe
	}

	want := loadOffers + 1
	if got := rb.Index().Len(); got != want {
		b.Fatalf("b's index holds %d offers, want %d", got, want)
	}
	lat := make([]time.Duration, 0, b.N)
	began := time.Now()
	booked0 := booked.Load()
	b.ResetTimer()
	for i := range b.N {
		state := market.OfferPaused
		want = loadOffers
		if i%2 == 1 {
			state, want = market.OfferActive, loadOffers+1
		}
		if err := dbA.SetOfferState(ctx, prov.ID, probe.ID, state, t0); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		for rb.Index().Len() != want {
			if time.Since(committed) > 2*time.Minute {
				b.Fatalf("b did not see probe %d within 2 minutes", i)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(committed))
		time.Sleep(10 * time.Millisecond) // probes apart, as changes are
	}
	b.StopTimer()
	elapsed := time.Since(began)
	stopLoad()
	wg.Wait()
	if failed.Load() > 0 {
		b.Errorf("%d bookings failed", failed.Load())
	}
	slices.Sort(lat)
	pct := func(p float64) time.Duration { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	p50, p99 := pct(0.50), pct(0.99)
	b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(booked.Load()-booked0)/elapsed.Seconds(), "bookings/s")
	if rate == 0 {
		idleP99 = p99
	} else if idleP99 > 0 {
		b.ReportMetric(float64(p99)/float64(idleP99), "p99/idle-p99")
	}
	b.ReportMetric(0, "ns/op") // the latency figures above are what this measures
}
