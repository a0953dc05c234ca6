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
