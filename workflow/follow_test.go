package workflow

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
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
