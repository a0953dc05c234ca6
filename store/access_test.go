package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// testKey is a parsed public key as web hands it to AddSSHKey.
func testKey(n int) market.SSHKey {
	return market.SSHKey{Type: "ssh-ed25519", Bits: 256, Fingerprint: "SHA256:fp" + string(rune('a'+n)),
		Comment: "buyer@laptop", Line: "ssh-ed25519 AAAAkey" + string(rune('a'+n)) + " buyer@laptop"}
}

func TestSSHKeys(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)

	k, err := db.AddSSHKey(ctx, buyer.ID, testKey(0), t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.AddSSHKey(ctx, buyer.ID, testKey(0), t0)
	wantMessage(t, err, market.CodeConflict, "already added")
	// Another account may hold the same key.
	if _, err := db.AddSSHKey(ctx, other.ID, testKey(0), t0); err != nil {
		t.Fatal(err)
	}
	bad := testKey(1)
	bad.Type, bad.Bits = "ssh-rsa", 2048
	_, err = db.AddSSHKey(ctx, buyer.ID, bad, t0)
	wantCode(t, err, market.CodeInvalid)

	keys, err := db.ListSSHKeys(ctx, buyer.ID)
	if err != nil || len(keys) != 1 || keys[0].ID != k.ID || keys[0].UserID != buyer.ID || keys[0].Line != testKey(0).Line ||
		keys[0].Fingerprint != testKey(0).Fingerprint || keys[0].Bits != 256 || keys[0].Type != "ssh-ed25519" ||
		keys[0].Comment != "buyer@laptop" || !keys[0].CreatedAt.Equal(t0) {
		t.Fatalf("keys %+v %v", keys, err)
	}
	wantCode(t, db.RemoveSSHKey(ctx, other.ID, k.ID), market.CodeNotFound)
	if err := db.RemoveSSHKey(ctx, buyer.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	if keys, _ := db.ListSSHKeys(ctx, buyer.ID); len(keys) != 0 {
		t.Fatalf("key not removed: %+v", keys)
	}
	if keys, _ := db.ListSSHKeys(ctx, other.ID); len(keys) != 1 {
		t.Fatalf("the other account's key went too: %+v", keys)
	}

	for i := range market.MaxSSHKeys {
		if _, err := db.AddSSHKey(ctx, buyer.ID, testKey(i), t0); err != nil {
			t.Fatal(err)
		}
	}
	_, err = db.AddSSHKey(ctx, buyer.ID, testKey(market.MaxSSHKeys), t0)
	wantCode(t, err, market.CodeInvalid)
}

// rentedNode books and confirms a piece of devices on a two-node offer
// from start for hours, and returns the reservation, its piece and the
// node it was placed on.
func rentedNode(t *testing.T, db *DB, buyerID int64, o market.Offer, devices int, start time.Time, hours int) (market.Reservation, market.ReservationPiece, int) {
	t.Helper()
	r := book(t, db, buyerID, t0, piece(o, devices, start, hours))
	r, err := db.ConfirmReservation(context.Background(), r.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	p := r.Pieces[0]
	if len(p.Nodes) != 1 {
		t.Fatalf("piece on nodes %+v, want one", p.Nodes)
	}
	return r, p, p.Nodes[0].Node
}

func TestAssignmentsInstallRemoveAndScope(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	otherProv := createUser(t, db, "prov2@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := twoNodeOffer(t, db, prov.ID)
	o2 := twoNodeOffer(t, db, otherProv.ID)
	if _, err := db.AddSSHKey(ctx, buyer.ID, testKey(0), t0); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(2 * time.Hour)
	r, p, node := rentedNode(t, db, buyer.ID, o, 8, start, 4)
	tok, _ := hostToken(t, db, prov.ID, o.ID, node)
	otherNode, _ := hostToken(t, db, prov.ID, o.ID, 1-node)
	otherOffer, _ := hostToken(t, db, otherProv.ID, o2.ID, node)

	list := func(tokenID int64, at time.Time) []Assignment {
		t.Helper()
		as, err := db.ListAssignments(ctx, tokenID, at)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	if as := list(tok.ID, start.Add(-time.Second)); len(as) != 0 {
		t.Fatalf("assignments before the start: %+v", as)
	}
	as := list(tok.ID, start)
	if len(as) != 1 || as[0].ReservationID != r.ID || as[0].Piece.ID != p.ID || as[0].Devices != 8 ||
		as[0].State != market.AccessInstall || len(as[0].SSHKeys) != 1 || as[0].SSHKeys[0] != testKey(0).Line || !as[0].Acceptance {
		t.Fatalf("assignments at the start: %+v", as)
	}
	// Another node of the same offer, another provider's offer: nothing.
	if as := list(otherNode.ID, start); len(as) != 0 {
		t.Fatalf("the other node's agent sees %+v", as)
	}
	if as := list(otherOffer.ID, start); len(as) != 0 {
		t.Fatalf("another provider's agent sees %+v", as)
	}
	conn := market.Connection{Host: "203.0.113.7", Port: 22, User: "gpu"}
	for _, tk := range []int64{otherNode.ID, otherOffer.ID} {
		_, err := db.RecordInstalled(ctx, tk, p.ID, conn, start)
		wantCode(t, err, market.CodeNotFound)
		_, err = db.RecordRemoved(ctx, tk, p.ID, time.Time{}, p.End)
		wantCode(t, err, market.CodeNotFound)
	}
	_, err := db.RecordInstalled(ctx, tok.ID, p.ID+1000, conn, start)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.RecordInstalled(ctx, tok.ID, p.ID, conn, start.Add(-time.Minute))
	wantCode(t, err, market.CodeConflict)
	_, err = db.RecordInstalled(ctx, tok.ID, p.ID, market.Connection{Host: "x y", Port: 22, User: "gpu"}, start)
	wantCode(t, err, market.CodeInvalid)

	// Installed (and reported again later: the first time is kept).
	a, err := db.RecordInstalled(ctx, tok.ID, p.ID, conn, start.Add(time.Minute))
	if err != nil || !a.InstalledAt.Equal(start.Add(time.Minute)) || a.Connection != conn || a.Removed() || a.Node != node || a.Repeated {
		t.Fatalf("installed %+v %v", a, err)
	}
	conn2 := market.Connection{Host: "node1.example.com", Port: 2222, User: "gpu"}
	if a, err = db.RecordInstalled(ctx, tok.ID, p.ID, conn2, start.Add(2*time.Minute)); err != nil || !a.InstalledAt.Equal(start.Add(time.Minute)) || a.Connection != conn2 || !a.Repeated {
		t.Fatalf("installed again %+v %v", a, err)
	}
	// The buyer sees it; nobody else's reservation lookup does.
	nodes, err := db.ListReservationAccess(ctx, buyer.ID, r.ID)
	if err != nil || len(nodes) != 1 || nodes[0].PieceID != p.ID || nodes[0].Node != node || nodes[0].Devices != 8 ||
		nodes[0].Access.Connection != conn2 || nodes[0].Reported {
		t.Fatalf("buyer's access %+v %v", nodes, err)
	}
	_, err = db.ListReservationAccess(ctx, prov.ID, r.ID)
	wantCode(t, err, market.CodeNotFound)

	// Removal: refused while the rental runs; asked for after the end.
	_, err = db.RecordRemoved(ctx, tok.ID, p.ID, time.Time{}, p.End.Add(-time.Minute))
	wantCode(t, err, market.CodeConflict)
	as = list(tok.ID, p.End)
	if len(as) != 1 || as[0].State != market.AccessRemove || len(as[0].SSHKeys) != 0 {
		t.Fatalf("assignments at the end: %+v", as)
	}
	if f, err := db.ListOverdueRemovals(ctx, p.End.Add(market.RemovalDeadline-time.Second)); err != nil || len(f) != 0 {
		t.Fatalf("overdue before the deadline: %+v %v", f, err)
	}
	f, err := db.ListOverdueRemovals(ctx, p.End.Add(market.RemovalDeadline))
	if err != nil || len(f) != 1 || f[0].OfferID != o.ID || f[0].Node != node || f[0].ProviderID != prov.ID || !f[0].At.Equal(p.End) {
		t.Fatalf("overdue %+v %v", f, err)
	}
	// Long after the end, the removal is still asked for.
	if as := list(tok.ID, p.End.Add(30*24*time.Hour)); len(as) != 1 || as[0].State != market.AccessRemove {
		t.Fatalf("a month later: %+v", as)
	}
	// The agent removed the keys at the end while the server could not be
	// reached, and reports it late.
	a, err = db.RecordRemoved(ctx, tok.ID, p.ID, p.End, p.End.Add(time.Hour))
	if err != nil || !a.RemovedAt.Equal(p.End) {
		t.Fatalf("removed %+v %v", a, err)
	}
	if a, err = db.RecordRemoved(ctx, tok.ID, p.ID, time.Time{}, p.End.Add(2*time.Hour)); err != nil || !a.RemovedAt.Equal(p.End) {
		t.Fatalf("removed again %+v %v", a, err)
	}
	if as := list(tok.ID, p.End.Add(time.Hour)); len(as) != 0 {
		t.Fatalf("assignments after the removal: %+v", as)
	}
	if f, _ := db.ListOverdueRemovals(ctx, p.End.Add(time.Hour)); len(f) != 0 {
		t.Fatalf("overdue after the removal: %+v", f)
	}
	hosts, err := db.ListProviderHosts(ctx, prov.ID, p.End.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var rental *HostRental
	for _, n := range hosts[len(hosts)-1].Nodes {
		if n.Node == node && len(n.Rentals) == 1 {
			rental = &n.Rentals[0]
		}
	}
	if rental == nil || rental.Piece.ID != p.ID || rental.BuyerID != buyer.ID || rental.Devices != 8 || !rental.Access.Removed() {
		t.Fatalf("hosts page rental %+v in %+v", rental, hosts)
	}

	// A revoked token reads nothing.
	if err := db.RevokeHostToken(ctx, prov.ID, tok.ID, t0); err != nil {
		t.Fatal(err)
	}
	_, err = db.ListAssignments(ctx, tok.ID, start)
	wantCode(t, err, market.CodeUnauthorized)
	_, err = db.RecordInstalled(ctx, tok.ID, p.ID, conn, start)
	wantCode(t, err, market.CodeUnauthorized)
}
