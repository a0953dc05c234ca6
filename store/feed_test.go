package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// heard collects what OnOffersChanged publishes, one entry per commit.
type heard struct {
	mu      sync.Mutex
	commits []OfferChanges
}

func listen(t *testing.T, db *DB) *heard {
	h := &heard{}
	stop := db.OnOffersChanged(func(ch OfferChanges) {
		h.mu.Lock()
		h.commits = append(h.commits, ch)
		h.mu.Unlock()
	})
	t.Cleanup(stop)
	return h
}

// take returns the commits heard since the last take.
func (h *heard) take() []OfferChanges {
	h.mu.Lock()
	defer h.mu.Unlock()
	c := h.commits
	h.commits = nil
	return c
}

// TestCommittedOfferChangesArePublished writes through store methods and
// through plain SQL in write transactions no method wraps (what a new
// write path would be), and checks that each commit publishes exactly the
// offers it changed, once each — those whose listing changed apart from
// those whose commitments alone did — and that what rolls back — a transaction,
// a savepoint, a method that fails — publishes nothing.
func TestCommittedOfferChangesArePublished(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	admin := createUser(t, db, "admin@example.com", false)
	if err := db.SetUserAdmin(ctx, admin.ID, true); err != nil {
		t.Fatal(err)
	}
	prov := createUser(t, db, "prov@example.com", true)
	other := createUser(t, db, "other@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	a, b := listedOffer(t, db, prov.ID, 8), listedOffer(t, db, prov.ID, 8)
	c := listedOffer(t, db, other.ID, 8)
	in := validOffer(other.ID)
	in.Interruptible, in.InterruptibleCentsPerDH, in.PreemptNoticeMins = true, 100, 30
	spot, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, spot.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	now := a.AvailableFrom.Add(-time.Hour)

	h := listen(t, db)
	// rawWrite runs statements in one write transaction, then commits or
	// rolls back.
	rawWrite := func(commit bool, stmts ...string) {
		t.Helper()
		tx, err := db.begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		if commit {
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var r market.Reservation
	steps := []struct {
		name  string
		write func()
		want  []OfferChanges // one entry per commit
	}{
		{"a plain UPDATE of one offer", func() {
			rawWrite(true, fmt.Sprintf(`UPDATE offers SET title = 'renamed' WHERE id = %d`, a.ID))
		}, []OfferChanges{OfferChanges{Listings: []int64{a.ID}}}},
		{"an UPDATE of every offer of a provider, each offer twice", func() {
			rawWrite(true, fmt.Sprintf(`UPDATE offers SET title = 'again' WHERE provider_id = %d`, prov.ID),
				fmt.Sprintf(`UPDATE offers SET title = 'once more' WHERE provider_id = %d`, prov.ID))
		}, []OfferChanges{OfferChanges{Listings: []int64{a.ID, b.ID}}}},
		{"a transaction rolled back", func() {
			rawWrite(false, fmt.Sprintf(`UPDATE offers SET title = 'never' WHERE id = %d`, a.ID))
		}, nil},
		{"a savepoint rolled back to, then another offer changed", func() {
			rawWrite(true, `SAVEPOINT s`, fmt.Sprintf(`UPDATE offers SET title = 'undone' WHERE id = %d`, a.ID),
				`ROLLBACK TO s`, `RELEASE s`, fmt.Sprintf(`UPDATE offers SET title = 'kept' WHERE id = %d`, c.ID))
		}, []OfferChanges{OfferChanges{Listings: []int64{c.ID}}}},
		{"a credit tier deleted", func() {
			rawWrite(true, fmt.Sprintf(`DELETE FROM offer_credit_tiers WHERE offer_id = %d`, b.ID))
		}, []OfferChanges{OfferChanges{Listings: []int64{b.ID}}}},
		{"a write that changes no offer", func() {
			createUser(t, db, "late@example.com", false)
		}, nil},
		{"a booking on two offers", func() {
			r = book(t, db, buyer.ID, now, piece(a, 2, a.AvailableFrom, 4), piece(c, 1, c.AvailableFrom, 4))
		}, []OfferChanges{OfferChanges{Commitments: []int64{a.ID, c.ID}}}},
		{"a booking refused for capacity", func() {
			_, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{piece(b, 9, b.AvailableFrom, 1)}, "{}", now, hold)
			if err == nil {
				t.Fatal("a 9-device booking of an 8-device offer was accepted")
			}
		}, nil},
		{"the reservation cancelled (its state, not its pieces)", func() {
			if _, err := db.CancelReservation(ctx, buyer.ID, r.ID, 0, now); err != nil {
				t.Fatal(err)
			}
		}, []OfferChanges{OfferChanges{Commitments: []int64{a.ID, c.ID}}}},
		{"an offer paused", func() {
			if err := db.SetOfferState(ctx, prov.ID, b.ID, market.OfferPaused, now); err != nil {
				t.Fatal(err)
			}
		}, []OfferChanges{OfferChanges{Listings: []int64{b.ID}}}},
		{"an interruptible booking (its payment moves the spot price: the listing)", func() {
			p := piece(spot, 1, spot.AvailableFrom, 2)
			p.Interruptible, p.PriceCents, p.AmountCents = true, spot.InterruptibleCentsPerDH, 2*spot.InterruptibleCentsPerDH
			book(t, db, buyer.ID, now, p, piece(c, 1, c.AvailableFrom.Add(8*time.Hour), 1))
		}, []OfferChanges{{Listings: []int64{spot.ID}, Commitments: []int64{c.ID}}}},
		{"its provider suspended", func() {
			if _, err := db.SuspendProvider(ctx, admin.ID, prov.ID, "Listed hardware it does not have", now); err != nil {
				t.Fatal(err)
			}
		}, []OfferChanges{OfferChanges{Listings: []int64{a.ID, b.ID}}}},
	}
	for _, s := range steps {
		s.write()
		if got := h.take(); !slices.EqualFunc(got, s.want, sameChanges) {
			t.Errorf("%s: published %v, want %v", s.name, got, s.want)
		}
	}
}

// TestOffersChangedOnANewWriterConnection checks that a writer connection
// opened after the first (the one lost, or closed when idle) notes changes
// too, and that a stopped subscription hears nothing.
func TestOffersChangedOnANewWriterConnection(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)
	h := listen(t, db)
	db.writer.SetMaxIdleConns(0) // every transaction on a connection of its own
	for i := range 3 {
		if err := db.SetOfferState(ctx, prov.ID, o.ID, []market.OfferState{market.OfferPaused, market.OfferActive}[i%2], t0); err != nil {
			t.Fatal(err)
		}
	}
	l := OfferChanges{Listings: []int64{o.ID}}
	if got := h.take(); !slices.EqualFunc(got, []OfferChanges{l, l, l}, sameChanges) {
		t.Errorf("three commits on new connections published %v", got)
	}
	var second []OfferChanges
	stop := db.OnOffersChanged(func(ch OfferChanges) { second = append(second, ch) })
	stop()
	if err := db.SetOfferState(ctx, prov.ID, o.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 || len(h.take()) != 1 {
		t.Errorf("a stopped subscription heard %v", second)
	}
}

func sameChanges(a, b OfferChanges) bool {
	return slices.Equal(a.Listings, b.Listings) && slices.Equal(a.Commitments, b.Commitments)
}
