package store

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// travellingRuntime is a runtime with a plain variable and a secret.
func travellingRuntime() market.Runtime {
	return market.Runtime{Image: "docker.io/library/busybox:1.36", Launch: market.LaunchSSH, OnStart: "echo hi", Ports: []int{8080},
		Env: []market.EnvVar{{Name: "MODE", Value: "train"}, {Name: "HF_TOKEN", Value: "hf_secret", Secret: true}}}
}

// runtimeOf reads the runtime kept with a reservation, secrets included.
func runtimeOf(t *testing.T, db *DB, reservationID int64) (market.Runtime, bool) {
	t.Helper()
	tx, err := db.read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rt, ok, err := getReservationRuntime(context.Background(), tx, reservationID)
	if err != nil {
		t.Fatal(err)
	}
	return rt, ok
}

// TestExtensionKeepsTheRuntime: an extension runs in the environment of
// the reservation it continues, secrets included.
func TestExtensionKeepsTheRuntime(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(2 * time.Hour)
	rt := travellingRuntime()
	r, err := db.CreateReservationWithRuntime(ctx, buyer.ID, []market.ReservationPiece{piece(o, 2, start, 4)}, "{}", rt, t0, hold)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ConfirmReservation(ctx, r.ID, t0); err != nil {
		t.Fatal(err)
	}
	now := start.Add(time.Hour)
	if _, err := db.AdvanceReservations(ctx, now); err != nil {
		t.Fatal(err)
	}
	if r, err = db.FindReservation(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	ext, err := market.ExtensionPieces(r, map[int64]market.Offer{o.ID: o}, 2, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	e, err := db.CreateExtension(ctx, buyer.ID, r.ID, ext.Pieces, now, hold)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := runtimeOf(t, db, e.ID)
	if !ok || !reflect.DeepEqual(got, rt) {
		t.Fatalf("the extension's runtime %+v (kept %v), want the original's %+v", got, ok, rt)
	}

	// An extension of a reservation without a runtime has none.
	plain := running(t, db, buyer.ID, now, piece(o, 2, start, 4))
	ext2, err := market.ExtensionPieces(plain, map[int64]market.Offer{o.ID: o}, 2, 100, now)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := db.CreateExtension(ctx, buyer.ID, plain.ID, ext2.Pieces, now, hold)
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := runtimeOf(t, db, e2.ID); ok {
		t.Fatalf("an extension of a plain reservation got a runtime: %+v", got)
	}
}

// TestResaleBuyerGetsTheRuntimeWithoutTheSellersSecrets: the resale
// buyer's reservation runs the seller's image, launch mode, script, ports
// and plain environment; the seller's secret goes nowhere.
func TestResaleBuyerGetsTheRuntimeWithoutTheSellersSecrets(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	seller := createUser(t, db, "seller@example.com", false)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	start := t0.Add(2 * time.Hour)
	r := paidRental(t, db, seller.ID, o, 8, start, 4, "pi_seller")
	tx, err := db.begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := insertReservationRuntime(ctx, tx, r.ID, travellingRuntime()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.AdvanceReservations(ctx, start); err != nil {
		t.Fatal(err)
	}
	now := start.Add(70 * time.Minute)
	l, err := db.CreateResaleListing(ctx, seller.ID, r.ID, start.Add(2*time.Hour), 1000, now)
	if err != nil {
		t.Fatal(err)
	}
	_, n, err := db.SellResaleListing(ctx, l.ID, buyer.ID, "pi_buyer", 0, 1000, now)
	if err != nil {
		t.Fatal(err)
	}
	want := market.Runtime{Image: "docker.io/library/busybox:1.36", Launch: market.LaunchSSH, OnStart: "echo hi", Ports: []int{8080},
		Env: []market.EnvVar{{Name: "MODE", Value: "train"}}}
	got, ok := runtimeOf(t, db, n.ID)
	if !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("the resale buyer's runtime %+v (kept %v), want %+v", got, ok, want)
	}
	if shown, err := db.FindReservationRuntime(ctx, buyer.ID, n.ID); err != nil || shown.Image != want.Image {
		t.Fatalf("the buyer's reservation page runtime %+v, %v", shown, err)
	}
}

// TestStandingOrderFillKeepsTheRuntime: a fill runs in the order's
// runtime with its secret, which the order's portable JSON leaves out.
func TestStandingOrderFillKeepsTheRuntime(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	off := listedOffer(t, db, prov.ID, 8)
	start := t0.Add(48 * time.Hour)
	in := standingOrder(buyer.ID, off, start, 4)
	in.Request.Runtime = travellingRuntime()
	o, err := db.CreateStandingOrder(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	row, err := db.FindStandingOrder(ctx, buyer.ID, o.ID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Request.Runtime.Image != in.Request.Runtime.Image || len(row.Request.Runtime.Env) != 2 || row.Request.Runtime.Env[1].Value != "" {
		t.Fatalf("the order's request runtime %+v: want the image and both names, the secret without its value", row.Request.Runtime)
	}
	_, r, err := db.FillStandingOrder(ctx, o.ID, []market.ReservationPiece{piece(off, 4, start, 2)}, t0, hold)
	if err != nil {
		t.Fatal(err)
	}
	got, ok := runtimeOf(t, db, r.ID)
	if want := travellingRuntime(); !ok || !reflect.DeepEqual(got, want) {
		t.Fatalf("the fill's runtime %+v (kept %v), want %+v", got, ok, want)
	}
}
