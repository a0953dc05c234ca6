package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestBookingWithARuntimeTellsTheBuyer: a booking with the buyer's
// environment is held and the buyer told so, as any booking is.
func TestBookingWithARuntimeTellsTheBuyer(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	rt := market.Runtime{Image: "docker.io/library/busybox:1.36", Launch: market.LaunchSSH}
	r, err := db.CreateReservationWithRuntime(ctx, buyer.ID, []market.ReservationPiece{piece(o, 2, t0.Add(48*time.Hour), 2)}, "{}", rt, t0, hold)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := db.ListNotifications(ctx, buyer.ID, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(ns) != 1 || ns[0].Kind != NotifyBookingHeld || ns[0].URL != fmt.Sprintf("/reservations/%d", r.ID) {
		t.Fatalf("notifications after a booking with a runtime: %+v", ns)
	}
}
