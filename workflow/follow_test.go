package workflow

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
)

// TestFollowSeesAnotherReplicasChanges runs on PostgreSQL in every run:
// replica b, on its own connection to the database, follows the change
// feed; what replica a books, cancels and pauses reaches b's index within a
// second, without b doing anything.
func TestFollowSeesAnotherReplicasChanges(t *testing.T) {
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

	start := t0.Add(48 * time.Hour)
	req := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 8, Hours: 10},
		Constraints: market.Constraints{EarliestStart: start, Deadline: start.Add(10 * time.Hour)}}
	quotes := func() int {
		res, err := b.Index().Match(req, t0)
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Quotes)
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		began := time.Now()
		for !cond() {
			if time.Since(began) > time.Second {
				t.Fatalf("replica b did not see %s within a second", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("b saw %s after %v", what, time.Since(began).Round(time.Millisecond))
	}
	if quotes() != 1 {
		t.Fatalf("b quotes %d offers for the free window, want 1", quotes())
	}
	r := f.book(start) // all 8 devices, on replica a
	within("the booking", func() bool { return quotes() == 0 })
	if _, err := f.wf.Cancel(f.ctx, f.buyer.ID, r.ID); err != nil {
		t.Fatal(err)
	}
	within("the cancellation", func() bool { return quotes() == 1 })
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	within("the offer paused", func() bool { return b.Index().Len() == 0 })
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferActive, t0); err != nil {
		t.Fatal(err)
	}
	within("the offer resumed", func() bool { return b.Index().Len() == 1 && quotes() == 1 })
}

// TestFollowKeepsUpWithAStorm runs on PostgreSQL in every run: another
// replica commits a storm of changes to one offer (3,000 transactions, one
// notification each), then pauses a second offer. Replica b must see the
// pause within a second of its commit: the feed is coalesced, so b reads
// each changed offer once per batch of what is pending rather than once
// per change, and the pause does not wait behind the storm.
func TestFollowKeepsUpWithAStorm(t *testing.T) {
	dsn := pgtest.Database(t)
	f := newFixtureAt(t, dsn, nil)
	probe := f.offer
	probe.Title = "probe"
	probe, err := f.db.CreateOffer(f.ctx, probe, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.db.ReviewOffer(f.ctx, probe.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	b := followingReplica(t, f, dsn)
	if n := b.Index().Len(); n != 2 {
		t.Fatalf("b's index holds %d offers, want 2", n)
	}

	raw, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	const writers, each = 6, 500
	var wg sync.WaitGroup
	began := time.Now()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				// A committed change the trigger announces, as an edit is.
				if _, err := raw.ExecContext(f.ctx, `UPDATE offers SET title = title WHERE id = $1`, f.offer.ID); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d changes committed in %v", writers*each, time.Since(began).Round(time.Millisecond))
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, probe.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	for b.Index().Len() != 1 {
		if time.Since(paused) > time.Second {
			t.Fatalf("replica b did not see the pause within a second of its commit, after a storm of %d changes", writers*each)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("b saw the pause %v after its commit", time.Since(paused).Round(time.Millisecond))
}

// followingReplica opens a second replica on dsn whose index follows the
// change feed until the test ends.
func followingReplica(t *testing.T, f *fixture, dsn string) *Service {
	t.Helper()
	dbB, err := store.Open(f.ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbB.Close() })
	b, err := New(f.ctx, Config{Billing: f.proc, PlatformFeeBP: feeBP, Now: func() time.Time { return t0 }, Replica: "b"}, dbB,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); b.Follow(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// The feed is joined (and the index reloaded) before the test changes anything.
	time.Sleep(200 * time.Millisecond)
	return b
}

// TestIndexFollowsEveryCommitWithoutACall writes through the store alone,
// with methods no workflow step wraps (store's TestCommittedOfferChanges…
// adds plain SQL statements), and finds the index in step as soon as each
// write returns, with no call to the workflow: the store publishes what
// each transaction committed (store.DB.OnOffersChanged). A write that
// fails leaves the index as it was. On both engines.
func TestIndexFollowsEveryCommitWithoutACall(t *testing.T) {
	f := newFixture(t, nil)
	start := t0.Add(48 * time.Hour)
	req := market.Request{Workload: market.Workload{Kind: market.WorkTraining, Devices: 4, Hours: 10},
		Constraints: market.Constraints{EarliestStart: start, Deadline: start.Add(10 * time.Hour)}}
	quoted := func() []int64 {
		t.Helper()
		res, err := f.wf.Index().Match(req, t0)
		if err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for _, q := range res.Quotes {
			ids = append(ids, q.Pieces[0].OfferID)
		}
		slices.Sort(ids)
		return ids
	}
	want := func(what string, ids ...int64) {
		t.Helper()
		if got := quoted(); !slices.Equal(got, ids) {
			t.Fatalf("after %s the index quotes offers %v, want %v", what, got, ids)
		}
	}
	want("the start", f.offer.ID)

	// A new offer, listed by the store alone.
	o := f.offer
	o.ID, o.Title, o.DevicesPerNode = 0, "4× H100", 4
	second, err := f.db.CreateOffer(f.ctx, o, t0)
	if err != nil {
		t.Fatal(err)
	}
	want("a new offer awaiting review", f.offer.ID)
	if err := f.db.ReviewOffer(f.ctx, second.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	want("its approval", f.offer.ID, second.ID)

	// A booking through the store, not Book: the second offer is full.
	p := market.ReservationPiece{OfferID: second.ID, Devices: 4, Start: start, End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 9960}
	r, err := f.db.CreateReservation(f.ctx, f.buyer.ID, []market.ReservationPiece{p}, `{"version":1}`, t0, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want("a booking filling the second offer", f.offer.ID)
	// A booking refused (more than the offer has) changes nothing.
	big := market.ReservationPiece{OfferID: f.offer.ID, Devices: 9, Start: start, End: start.Add(10 * time.Hour), PriceCents: 249, AmountCents: 22410}
	if _, err := f.db.CreateReservation(f.ctx, f.buyer.ID, []market.ReservationPiece{big}, `{"version":1}`, t0, time.Hour); err == nil {
		t.Fatal("a 9-device booking of an 8-device offer was accepted")
	}
	want("a booking refused", f.offer.ID)
	// The hold lapses in the store's own sweep.
	if expired, err := f.db.ExpireHolds(f.ctx, t0.Add(2*time.Hour)); err != nil || len(expired) != 1 || expired[0].ID != r.ID {
		t.Fatalf("ExpireHolds: %v, %v", expired, err)
	}
	want("the hold expired", f.offer.ID, second.ID)

	// The provider pauses the first offer, through the store.
	if err := f.db.SetOfferState(f.ctx, f.prov.ID, f.offer.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	want("the first offer paused", second.ID)
}
