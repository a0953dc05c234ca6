package store

import (
	"context"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

func TestImportOffersStoresThemAsGiven(t *testing.T) {
	db, _ := openTestDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "prov@example.com", true)
	a, b := validOffer(prov.ID), validOffer(prov.ID)
	a.Review, a.State = market.ReviewApproved, market.OfferActive
	b.Review, b.State = market.ReviewPending, market.OfferPaused
	ids, err := db.ImportOffers(ctx, []market.Offer{a, b}, t0)
	if err != nil {
		t.Fatalf("ImportOffers: %v", err)
	}
	if len(ids) != 2 || ids[0] == ids[1] {
		t.Fatalf("ids = %v", ids)
	}
	for i, want := range []market.Offer{a, b} {
		got, err := db.FindProviderOffer(ctx, prov.ID, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if got.Review != want.Review || got.State != want.State || got.Title != want.Title ||
			len(got.CreditSchedule) != len(want.CreditSchedule) || len(got.Figures) != len(want.Figures) {
			t.Errorf("offer %d stored as %+v, want review %s state %s", i, got, want.Review, want.State)
		}
	}
}
