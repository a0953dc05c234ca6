package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// A claim edit of a listed offer is held beside it: the listed version is
// unchanged until the edit is approved (here by moderation), and asking for
// changes on an edit drops it and leaves the listed version alone.
func TestHeldEditKeepsTheListedVersion(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	p := createUser(t, db, "prov@example.com", true)
	o := validOffer(p.ID)
	mustValidate(t, &o)
	o, err := db.CreateOffer(ctx, o, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}

	edit := o
	edit.Title = "8× H100 SXM, renamed"
	edit.UptimeBP = o.UptimeBP - 100 // a term against the buyer
	later := t0.Add(time.Hour)
	rev, held, err := db.UpdateOffer(ctx, p.ID, edit, later)
	if err != nil || !held {
		t.Fatalf("UpdateOffer = held %v, %v; want held", held, err)
	}
	if rev.Title != edit.Title || rev.UptimeBP != edit.UptimeBP || rev.Review != market.ReviewPending {
		t.Fatalf("revision = %+v", rev)
	}
	listed, _ := db.FindProviderOffer(ctx, p.ID, o.ID)
	if listed.Title != o.Title || listed.UptimeBP != o.UptimeBP || listed.Review != market.ReviewApproved {
		t.Fatalf("listed version changed: %q %d %s", listed.Title, listed.UptimeBP, listed.Review)
	}
	queue, err := db.ListOffersForReview(ctx)
	if err != nil || len(queue) != 1 || queue[0].Offer.Title != edit.Title || queue[0].Listed.Title != o.Title {
		t.Fatalf("review queue = %+v, %v", queue, err)
	}
	if got, ok, err := db.FindOfferRevision(ctx, p.ID, o.ID); err != nil || !ok || got.UptimeBP != edit.UptimeBP {
		t.Fatalf("FindOfferRevision = %+v %v %v", got, ok, err)
	}
	other := createUser(t, db, "other@example.com", true)
	if _, _, err := db.FindOfferRevision(ctx, other.ID, o.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("another provider reads the revision: %v", err)
	}

	ok, err := db.AutoApproveOffer(ctx, o.ID, later)
	if err != nil || !ok {
		t.Fatalf("AutoApproveOffer = %v, %v", ok, err)
	}
	applied, _ := db.FindProviderOffer(ctx, p.ID, o.ID)
	if applied.Title != edit.Title || applied.UptimeBP != edit.UptimeBP || applied.Review != market.ReviewApproved {
		t.Fatalf("after approval: %q %d %s", applied.Title, applied.UptimeBP, applied.Review)
	}
	if _, ok, _ := db.FindOfferRevision(ctx, p.ID, o.ID); ok {
		t.Fatal("the revision is still held after approval")
	}
	if q, _ := db.ListOffersForReview(ctx); len(q) != 0 {
		t.Fatalf("queue after approval: %d rows", len(q))
	}

	// Held again; changes asked for on the edit drop it, the offer listed
	// as it was.
	edit.Title = "third title"
	if _, held, err := db.UpdateOffer(ctx, p.ID, edit, later); err != nil || !held {
		t.Fatalf("second claim edit: %v %v", held, err)
	}
	if _, err := db.DecideOffer(ctx, 0, o.ID, market.ReviewChangesRequested, "Say why.", later); err != nil {
		t.Fatal(err)
	}
	if cur, _ := db.FindProviderOffer(ctx, p.ID, o.ID); cur.Review != market.ReviewApproved || cur.Title != "8× H100 SXM, renamed" {
		t.Fatalf("changes asked on the edit touched the listed offer: %s %q", cur.Review, cur.Title)
	}
	if _, ok, _ := db.FindOfferRevision(ctx, p.ID, o.ID); ok {
		t.Fatal("the revision is still held after changes were asked for")
	}
}
