package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestFairShare: broad matches take turns on the slots while narrow ones
// run at once; a broad match finding every slot and the queue full is
// refused at once, one waiting too long is refused, and a slot given back
// lets the next in.
func TestFairShare(t *testing.T) {
	idx := market.NewIndex()
	for i := range 3 {
		o := market.Offer{ID: int64(i + 1), ProviderID: 1, Title: "o", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80,
			DevicesPerNode: 8, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none", CPUCores: 32, RAMGB: 256,
			StorageGB: 1000, DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04", ContainerRuntime: "Docker",
			RegionID: "us-east-va", AvailableFrom: t0, AvailableUntil: t0.AddDate(0, 1, 0), MinRentalHours: 1,
			MaxRentalHours: 720, PriceCentsPerDeviceHour: 200, BillingBasis: market.BillingWallClock, UptimeBP: 9950,
			Review: market.ReviewApproved, State: market.OfferActive}
		if err := idx.Upsert(market.Candidate{Offer: o}); err != nil {
			t.Fatal(err)
		}
	}
	broad := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 8, Hours: 4}}
	narrow := broad
	narrow.Constraints.AcceleratorIDs = []string{"nvidia-a100-80gb-sxm"} // no such offers: evaluates none
	f := newFairShare(1)
	f.broad, f.wait = 2, 200*time.Millisecond
	f.waiting = make(chan struct{}, 1)
	ctx := context.Background()

	isBroad, release, err := f.enter(ctx, idx, broad, t0)
	if err != nil || !isBroad {
		t.Fatalf("broad: %v, broad %v", err, isBroad)
	}
	start := time.Now()
	if isBroad, rel, err := f.enter(ctx, idx, narrow, t0); err != nil || isBroad || time.Since(start) > 50*time.Millisecond {
		t.Fatalf("narrow behind a broad one: %v (broad %v) after %s", err, isBroad, time.Since(start))
	} else {
		rel()
	}
	got := make(chan error, 1)
	go func() {
		_, rel, err := f.enter(ctx, idx, broad, t0)
		if err == nil {
			rel()
		}
		got <- err
	}()
	for len(f.waiting) == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, _, err := f.enter(ctx, idx, broad, t0); market.ErrorCode(err) != market.CodeRateLimited {
		t.Fatalf("broad with the queue full: %v, want rate limited", err)
	}
	release()
	if err := <-got; err != nil {
		t.Fatalf("the waiting broad match after the slot was given back: %v", err)
	}

	_, release, _ = f.enter(ctx, idx, broad, t0)
	defer release()
	if _, _, err := f.enter(ctx, idx, broad, t0); market.ErrorCode(err) != market.CodeRateLimited {
		t.Fatalf("broad waiting past the limit: %v, want rate limited", err)
	}
	if n := f.broadIn.Load(); n != 1 {
		t.Fatalf("broad quotes counted in: %d, want 1 (the one holding the slot)", n)
	}
}

// A standing order fills with the quote a buyer would be shown for the
// same request: with the carbon-aware start, the fill starts at the clean
// hours of the offer's own profile, as Quote's first quote does (before,
// the orders' matcher ran without the shift and filled at the earliest
// start). The offer's profile is 600 g/kWh but 50 from 14:00 to 16:00 UTC;
// the request wants 8 devices for 2 hours from 09:00 two days ahead, by
// 23:00: the cleanest start is 14:00.
func TestStandingOrderFillsAsQuoted(t *testing.T) {
	f := newFixture(t, nil)
	var p market.CarbonProfile
	for h := range p {
		p[h] = 600
	}
	p[14], p[15] = 50, 50
	if err := f.wf.SetOfferCarbonProfile(f.ctx, f.prov.ID, f.offer.ID, p, "test"); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(48 * time.Hour) // 09:00
	req := gangRequest(start, 8, 2)
	req.Constraints.Deadline = start.Add(14 * time.Hour)
	req.Preferences.CarbonAwareStart = true
	res, _, err := f.wf.Quote(f.ctx, req, f.now)
	if err != nil || len(res.Quotes) == 0 {
		t.Fatalf("quote: %v, %d quotes", err, len(res.Quotes))
	}
	want := start.Add(5 * time.Hour) // 14:00
	if !res.Quotes[0].Start.Equal(want) {
		t.Fatalf("quoted start %s, want %s", res.Quotes[0].Start, want)
	}
	o := f.place(f.buyer.ID, req, 100_000, market.FillHold)
	f.matchInBackground()
	row := f.waitOrder(f.buyer.ID, o.ID)
	f.waitIdle()
	r, err := f.db.FindBuyerReservation(f.ctx, f.buyer.ID, row.ReservationID)
	if err != nil {
		t.Fatalf("order %+v: %v", row, err)
	}
	if !r.Start().Equal(want) {
		t.Fatalf("filled at %s, want the quoted %s", r.Start(), want)
	}
}

// TestBroadPausesForOthers: a broad match's pause sleeps while another
// request is being served and for a moment after it is done, and not when
// the only requests being served are broad quotes or none was lately.
func TestBroadPausesForOthers(t *testing.T) {
	f := newFairShare(1)
	f.sleep, f.quiet = 40*time.Millisecond, 20*time.Millisecond
	took := func() time.Duration {
		start := time.Now()
		f.pause()
		return time.Since(start)
	}
	time.Sleep(f.quiet) // since the share began: quiet
	if d := took(); d >= f.sleep {
		t.Fatalf("nothing served: paused %s", d)
	}
	done := f.serve()
	if d := took(); d < f.sleep {
		t.Fatalf("a request being served: paused %s, want %s", d, f.sleep)
	}
	f.broadIn.Add(1) // that request is a broad quote
	if d := took(); d >= f.sleep {
		t.Fatalf("only a broad quote served: paused %s", d)
	}
	f.broadIn.Add(-1)
	done()
	if d := took(); d < f.sleep {
		t.Fatalf("just after a request: paused %s, want %s", d, f.sleep)
	}
	time.Sleep(f.quiet)
	if d := took(); d >= f.sleep {
		t.Fatalf("quiet again: paused %s", d)
	}
}
