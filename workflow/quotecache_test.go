package workflow

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// What a quote takes from memory instead of the database — the offers in
// the index, their stated carbon intensities, their own hourly profiles —
// follows every change, so the next quote shows it: on the replica that
// made it at once (on SQLite and PostgreSQL), on another replica through
// the change feed (PostgreSQL).

// quoteProbe quotes the fixture's offer, 8 devices for 10 hours from
// start, on a service.
type quoteProbe struct {
	t     *testing.T
	f     *fixture
	start time.Time
}

// emissions returns the only quote's emissions in grams, or -1 when
// nothing is quoted.
func (p quoteProbe) emissions(s *Service) int64 {
	p.t.Helper()
	req := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 8, Hours: 10},
		Constraints: market.Constraints{EarliestStart: p.start, Deadline: p.start.Add(10 * time.Hour)}}
	res, _, err := s.Quote(p.f.ctx, req, t0)
	if err != nil {
		p.t.Fatal(err)
	}
	switch len(res.Quotes) {
	case 0:
		return -1
	case 1:
		return res.Quotes[0].EmissionsG
	}
	p.t.Fatalf("%d quotes, want at most 1", len(res.Quotes))
	return 0
}

// wantG is what 8 H100 SXM devices emit in 10 hours at a flat g gCO2/kWh:
// their board power × 8 × 10 h × g, in grams.
func wantG(g int64) int64 {
	a, _ := market.FindAccelerator("nvidia-h100-80gb-sxm")
	return int64(a.TDPWatts) * 8 * 10 * g / 1000
}

// restate has the provider edit the offer's stated intensity and the
// platform approve the edit (an intensity is held for review).
func (p quoteProbe) restate(g int) {
	p.t.Helper()
	o, err := p.f.db.FindOfferByID(p.f.ctx, p.f.offer.ID)
	if err != nil {
		p.t.Fatal(err)
	}
	next := o.Offer
	next.CarbonGPerKWh = g
	if _, _, err := p.f.db.UpdateOffer(p.f.ctx, p.f.prov.ID, next, t0); err != nil {
		p.t.Fatal(err)
	}
	if err := p.f.db.ReviewOffer(p.f.ctx, p.f.offer.ID, market.ReviewApproved, "", t0); err != nil {
		p.t.Fatal(err)
	}
}

// TestQuotesFollowOfferChanges: on the replica that makes each change, the
// next quote shows it — the stated intensity edited, an own hourly profile
// set and deleted, the offer paused and resumed, booked and cancelled.
func TestQuotesFollowOfferChanges(t *testing.T) {
	f := newFixture(t, nil)
	p := quoteProbe{t: t, f: f, start: t0.Add(48 * time.Hour)}
	r, _ := market.FindRegion(f.offer.RegionID)
	if r.DefaultCarbon == 100 || r.DefaultCarbon == 400 {
		t.Fatalf("the region's default %d is one of the test's intensities", r.DefaultCarbon)
	}
	for _, g := range []int{100, 400} {
		p.restate(g)
		if got := p.emissions(f.wf); got != wantG(int64(g)) {
			t.Fatalf("stated %d g/kWh: quote emits %d g, want %d", g, got, wantG(int64(g)))
		}
	}
	if err := f.wf.SetOfferCarbonProfile(f.ctx, f.prov.ID, f.offer.ID, market.FlatProfile(12), "meter"); err != nil {
		t.Fatal(err)
	}
	if got := p.emissions(f.wf); got != wantG(12) {
		t.Fatalf("own profile 12 g/kWh: quote emits %d g, want %d", got, wantG(12))
	}
	if err := f.wf.DeleteOfferCarbonProfile(f.ctx, f.prov.ID, f.offer.ID); err != nil {
		t.Fatal(err)
	}
	if got := p.emissions(f.wf); got != wantG(400) {
		t.Fatalf("own profile deleted: quote emits %d g, want the stated %d", got, wantG(400))
	}
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	if got := p.emissions(f.wf); got != -1 {
		t.Fatalf("offer paused: quoted (%d g)", got)
	}
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferActive, t0); err != nil {
		t.Fatal(err)
	}
	if got := p.emissions(f.wf); got != wantG(400) {
		t.Fatalf("offer resumed: quote emits %d g, want %d", got, wantG(400))
	}
	booked := f.book(p.start)
	if got := p.emissions(f.wf); got != -1 {
		t.Fatalf("offer booked for the window: quoted (%d g)", got)
	}
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, booked.ID); err != nil {
		t.Fatal(err)
	}
	if got := p.emissions(f.wf); got != wantG(400) {
		t.Fatalf("booking cancelled: quote emits %d g, want %d", got, wantG(400))
	}
}

// TestQuotesFollowAnotherReplicasChanges runs on PostgreSQL in every run:
// what replica a changes — the stated intensity, a pause, a booking —
// shows in replica b's next quote within a second, through the change
// feed, with b doing nothing. (An own hourly profile set on a reaches b
// within carbonTTL: profiles are not on the feed.)
func TestQuotesFollowAnotherReplicasChanges(t *testing.T) {
	dsn := pgtest.Database(t)
	f := newFixtureAt(t, dsn, nil)
	dbB, err := store.Open(f.ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer dbB.Close()
	b, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return t0 }, Replica: "b"}, dbB,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.Follow(ctx) }()
	defer func() { cancel(); <-done }()
	p := quoteProbe{t: t, f: f, start: t0.Add(48 * time.Hour)}
	within := func(what string, want int64) {
		t.Helper()
		began := time.Now()
		for got := p.emissions(b); got != want; got = p.emissions(b) {
			if time.Since(began) > time.Second {
				t.Fatalf("after %s replica b's quote emits %d g (-1: none), want %d, after a second", what, got, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, g := range []int{100, 400} {
		p.restate(g)
		within("the intensity edited", wantG(int64(g)))
	}
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	within("the offer paused", -1)
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferActive, t0); err != nil {
		t.Fatal(err)
	}
	within("the offer resumed", wantG(400))
	booked := f.book(p.start)
	within("the booking", -1)
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, booked.ID); err != nil {
		t.Fatal(err)
	}
	within("the cancellation", wantG(400))
}
