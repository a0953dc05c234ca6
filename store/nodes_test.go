package store

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// nodesOffer stores a listed offer of nodes × perNode devices, with or
// without a placement group.
func nodesOffer(t testing.TB, db *DB, providerID int64, nodes, perNode int, placement bool) market.Offer {
	t.Helper()
	ctx := context.Background()
	in := validOffer(providerID)
	in.Nodes, in.DevicesPerNode, in.PlacementGroup, in.NetworkID = nodes, perNode, placement, "infiniband-400"
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatalf("CreateOffer: %v", err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatalf("ReviewOffer: %v", err)
	}
	if o, err = db.FindProviderOffer(ctx, providerID, o.ID); err != nil {
		t.Fatalf("FindProviderOffer: %v", err)
	}
	return o
}

// gangPiece is piece as a training job's: tightly coupled.
func gangPiece(o market.Offer, devices int, start time.Time, hours int) market.ReservationPiece {
	p := piece(o, devices, start, hours)
	p.Gang = true
	return p
}

// TestGangNotBookedOnTwoHalves: with 4 devices free on each of two
// 8-device nodes, an 8-device gang is refused with or without a placement
// group, while a split of 8 is booked on both halves; the nodes each piece
// holds are stored and read back.
func TestGangNotBookedOnTwoHalves(t *testing.T) {
	ctx := context.Background()
	for _, placement := range []bool{false, true} {
		db := newDB(t)
		prov := createUser(t, db, "prov@example.com", true)
		buyer := createUser(t, db, "buyer@example.com", false)
		o := nodesOffer(t, db, prov.ID, 2, 8, placement)
		start := t0.Add(24 * time.Hour)
		half0, half1 := gangPiece(o, 4, start, 8), gangPiece(o, 4, start, 8)
		half0.Nodes, half1.Nodes = []market.NodeShare{{Node: 0, Devices: 4}}, []market.NodeShare{{Node: 1, Devices: 4}}
		early := book(t, db, buyer.ID, t0, half0, half1)

		_, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{gangPiece(o, 8, start.Add(2*time.Hour), 2)}, "{}", t0, hold)
		wantMessage(t, err, market.CodeConflict, "Someone else just booked")

		split := book(t, db, buyer.ID, t0, piece(o, 8, start.Add(2*time.Hour), 2))
		if want := []market.NodeShare{{Node: 0, Devices: 4}, {Node: 1, Devices: 4}}; !reflect.DeepEqual(split.Pieces[0].Nodes, want) || split.Pieces[0].Gang {
			t.Fatalf("placement %t: split of 8 on %+v, want %v", placement, split.Pieces[0], want)
		}
		found, err := db.FindReservation(ctx, split.ID)
		if err != nil || !reflect.DeepEqual(found.Pieces, split.Pieces) {
			t.Fatalf("FindReservation = %+v, %v; want the pieces as booked %+v", found.Pieces, err, split.Pieces)
		}
		if found, err = db.FindReservation(ctx, early.ID); err != nil || !found.Pieces[0].Gang ||
			!reflect.DeepEqual(found.Pieces[1].Nodes, half1.Nodes) {
			t.Fatalf("FindReservation = %+v, %v; want the gangs where they were named", found.Pieces, err)
		}
		pp, err := db.ListProviderPieces(ctx, prov.ID)
		if err != nil || len(pp) != 3 || !reflect.DeepEqual(pp[2].Piece.Nodes, split.Pieces[0].Nodes) {
			t.Fatalf("ListProviderPieces = %+v, %v", pp, err)
		}
		cs, err := db.ListOfferCommitments(ctx, o.ID, t0)
		if err != nil || len(cs) != 3 || !reflect.DeepEqual(cs[2].Nodes, split.Pieces[0].Nodes) || !cs[0].Gang || cs[2].Gang {
			t.Fatalf("ListOfferCommitments = %+v, %v", cs, err)
		}
	}
}

// TestGangOverNodesBooking: a gang larger than a node is booked on whole
// nodes of a placement group and refused without one.
func TestGangOverNodesBooking(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	start := t0.Add(24 * time.Hour)

	pg := nodesOffer(t, db, prov.ID, 3, 8, true)
	book(t, db, buyer.ID, t0, gangPiece(pg, 1, start, 4))
	r := book(t, db, buyer.ID, t0, gangPiece(pg, 12, start, 4))
	if want := []market.NodeShare{{Node: 1, Devices: 8}, {Node: 2, Devices: 8}}; !reflect.DeepEqual(r.Pieces[0].Nodes, want) {
		t.Fatalf("12-device gang on %v, want whole nodes %v", r.Pieces[0].Nodes, want)
	}
	// Node 0 keeps 7 free; no 8-device gang fits now, a 7-device one does.
	_, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{gangPiece(pg, 8, start, 4)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, "Someone else just booked")
	if r := book(t, db, buyer.ID, t0, gangPiece(pg, 7, start, 4)); !reflect.DeepEqual(r.Pieces[0].Nodes, []market.NodeShare{{Node: 0, Devices: 7}}) {
		t.Fatalf("7-device gang on %v, want node 0", r.Pieces[0].Nodes)
	}

	other := createUser(t, db, "other@example.com", false)
	flat := nodesOffer(t, db, prov.ID, 3, 8, false)
	_, err = db.CreateReservation(ctx, other.ID, []market.ReservationPiece{gangPiece(flat, 12, start, 4)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, "no placement group")
}

// TestPlaceRecorded: a recorded piece goes where a booking would put it,
// else spread, else packed from node 0 (the only record that may
// overcommit a node); the stored form reads back.
func TestPlaceRecorded(t *testing.T) {
	o := market.Offer{ID: 1, DevicesPerNode: 8, Nodes: 2}
	at := func(node, devices int) market.Commitment {
		return market.Commitment{OfferID: 1, Devices: devices, Start: t0, End: t0.Add(time.Hour), Gang: true,
			Nodes: []market.NodeShare{{Node: node, Devices: devices}}}
	}
	halves := []market.Commitment{at(0, 4), at(1, 4)}
	for _, c := range []struct {
		earlier []market.Commitment
		devices int
		want    []market.NodeShare
	}{
		{halves[:1], 8, []market.NodeShare{{Node: 1, Devices: 8}}},                     // as booked
		{halves, 8, []market.NodeShare{{Node: 0, Devices: 4}, {Node: 1, Devices: 4}}},  // spread
		{halves, 12, []market.NodeShare{{Node: 0, Devices: 8}, {Node: 1, Devices: 4}}}, // packed
		{halves, 20, []market.NodeShare{{Node: 0, Devices: 8}, {Node: 1, Devices: 12}}},
	} {
		gang := market.Commitment{OfferID: 1, Devices: c.devices, Start: t0.Add(-time.Hour), End: t0.Add(2 * time.Hour), Gang: true}
		got := placeRecorded(o, c.earlier, gang)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("%d-device gang beside %d pieces recorded on %v, want %v", c.devices, len(c.earlier), got, c.want)
		}
		back, err := parseNodes(formatNodes(got))
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("nodes %v stored as %q read back as %v, %v", got, formatNodes(got), back, err)
		}
	}
	for _, bad := range []string{"0", "0:", "a:1", "0:0", "-1:2", "0:1,"} {
		if _, err := parseNodes(bad); err == nil {
			t.Errorf("parseNodes(%q) accepted", bad)
		}
	}
}

// TestNodeBookingRace has many buyers, through two handles on one file,
// race for the nodes of one offer over one interval with gangs of 1 to 8
// devices and split pieces. No node may be overbooked at any instant, gangs
// must be on one node, every loser must get a conflict; and since some
// losers asked for a single device as a split, every node must end up
// fully booked.
func TestNodeBookingRace(t *testing.T) {
	ctx := context.Background()
	db, path := openTestDB(t)
	db2, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	handles := []*DB{db, db2}
	prov := createUser(t, db, "prov@example.com", true)
	const nodes, perNode = 3, 8
	o := nodesOffer(t, db, prov.ID, nodes, perNode, false)
	start := t0.Add(24 * time.Hour)

	const n = 60
	buyers := make([]market.User, n)
	for i := range buyers {
		buyers[i] = createUser(t, db, fmt.Sprintf("b%d@example.com", i), false)
	}
	request := func(i int) market.ReservationPiece {
		switch i % 4 {
		case 0:
			return gangPiece(o, 1+i%perNode, start, 4)
		case 1:
			return gangPiece(o, perNode-i%3, start, 4)
		case 2:
			return piece(o, 2+i%5, start, 4)
		}
		return piece(o, 1, start, 4)
	}
	var wg sync.WaitGroup
	begin := make(chan struct{})
	results := make([]market.Reservation, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			results[i], errs[i] = handles[i%2].CreateReservation(ctx, buyers[i].ID, []market.ReservationPiece{request(i)}, "{}", t0, hold)
		}()
	}
	close(begin)
	wg.Wait()

	won, lostOne := 0, false
	for i, err := range errs {
		if err == nil {
			won++
			continue
		}
		var me *market.Error
		if !errors.As(err, &me) || me.Code != market.CodeConflict || me.Message == "" {
			t.Errorf("booker %d failed with %v; want a conflict *market.Error", i, err)
		}
		lostOne = lostOne || (i%4 == 3)
	}
	// Every stored piece, read back from the file, node by node.
	cs, err := db.ListOfferCommitments(ctx, o.ID, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != won {
		t.Errorf("%d pieces stored, %d winners", len(cs), won)
	}
	used := make([]int, nodes)
	for _, c := range cs {
		sum := 0
		for _, s := range c.Nodes {
			if s.Node < 0 || s.Node >= nodes {
				t.Fatalf("piece %d on node %d of %d", c.ID, s.Node, nodes)
			}
			used[s.Node] += s.Devices
			sum += s.Devices
		}
		if sum != c.Devices || (c.Gang && len(c.Nodes) != 1) {
			t.Errorf("piece %+v: nodes do not hold its devices as its coupling needs", c)
		}
	}
	for node, u := range used {
		if u > perNode {
			t.Errorf("node %d overbooked: %d of %d devices", node, u, perNode)
		}
		if lostOne && u != perNode {
			t.Errorf("node %d has %d of %d devices booked although a 1-device split lost", node, u, perNode)
		}
	}
	if won == 0 || won == n || !lostOne {
		t.Errorf("%d of %d bookers won (a 1-device split lost: %t); the race did not contest the nodes", won, n, lostOne)
	}
	t.Logf("%d of %d bookers won; nodes booked %v", won, n, used)
}

// TestMigrationPlacesRecordedPieces rolls a database back to before
// 0011_piece_nodes.sql and opens it again: pieces booked without nodes get
// the placement a booking would have given them, replayed in id order
// (even where the old pool rule let two gangs share what is now one node),
// fall back to a spread when no valid gang placement is left, and training
// requests' pieces become gangs.
func TestMigrationPlacesRecordedPieces(t *testing.T) {
	sqliteOnly(t) // it rewinds an SQLite file to before 0011
	ctx := context.Background()
	db, path := openTestDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := nodesOffer(t, db, prov.ID, 2, 8, false)
	start := t0.Add(24 * time.Hour)
	const training = `{"version":1,"workload":{"kind":"training","devices":4}}`
	book1 := func(p market.ReservationPiece, req string) market.Reservation {
		t.Helper()
		r, err := db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{p}, req, t0, hold)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ConfirmReservation(ctx, r.ID, t0); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Two 4-device gangs named on different nodes, then a split of 5 and
	// one of 3 after them: as recorded before nodes, the pool rule saw 16
	// devices.
	g0, g1 := gangPiece(o, 4, start, 8), gangPiece(o, 4, start, 8)
	g0.Nodes, g1.Nodes = []market.NodeShare{{Node: 0, Devices: 4}}, []market.NodeShare{{Node: 1, Devices: 4}}
	a, b := book1(g0, training), book1(g1, training)
	c := book1(piece(o, 5, start.Add(time.Hour), 2), `{"version":1,"workload":{"kind":"batch"}}`)
	d := book1(piece(o, 3, start.Add(time.Hour), 2), "{}")
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// Back to before 0011, with an 8-device gang booked under the pool rule
	// beside the two halves.
	raw, rawReader, err := openSQLite(ctx, path, &commitFeed{})
	if err != nil {
		t.Fatal(err)
	}
	var gangRes, gangPieceID int64
	for _, q := range []string{
		`ALTER TABLE reservation_pieces DROP COLUMN gang`,
		`ALTER TABLE reservation_pieces DROP COLUMN nodes`,
		`DELETE FROM schema_migrations WHERE version = 11`,
	} {
		if _, err := raw.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := raw.QueryRowContext(ctx, `INSERT INTO reservations (buyer_id, state, amount_cents, hold_expires_at, request_json, starts_at, ends_at, created_at, updated_at)
		VALUES (?, 'confirmed', 100, ?, ?, ?, ?, ?, ?) RETURNING id`,
		buyer.ID, unix(t0), training, unix(start.Add(4*time.Hour)), unix(start.Add(6*time.Hour)), unix(t0), unix(t0)).Scan(&gangRes); err != nil {
		t.Fatal(err)
	}
	if err := raw.QueryRowContext(ctx, `INSERT INTO reservation_pieces (reservation_id, position, offer_id, provider_id, devices, start_at, end_at,
			interruptible, price_cents, amount_cents, free_cancel_hours, cancel_fee_bp)
		VALUES (?, 0, ?, ?, 8, ?, ?, 0, 249, 100, 24, 1000) RETURNING id`,
		gangRes, o.ID, prov.ID, unix(start.Add(4*time.Hour)), unix(start.Add(6*time.Hour))).Scan(&gangPieceID); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	rawReader.Close()

	db, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	nodesOf := func(id int64) market.ReservationPiece {
		t.Helper()
		r, err := db.FindReservation(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r.Pieces[0]
	}
	// Replayed by best fit in id order: the second half joins the first on
	// node 0, the splits share node 1 while the halves run, and node 1 is
	// whole again for the pool-era 8-device gang after them.
	for _, w := range []struct {
		id   int64
		gang bool
		want []market.NodeShare
	}{
		{a.ID, true, []market.NodeShare{{Node: 0, Devices: 4}}},
		{b.ID, true, []market.NodeShare{{Node: 0, Devices: 4}}},
		{c.ID, false, []market.NodeShare{{Node: 1, Devices: 5}}},
		{d.ID, false, []market.NodeShare{{Node: 1, Devices: 3}}},
		{gangRes, true, []market.NodeShare{{Node: 1, Devices: 8}}},
	} {
		if p := nodesOf(w.id); p.Gang != w.gang || !reflect.DeepEqual(p.Nodes, w.want) {
			t.Errorf("reservation %d after the migration: gang %t on %v, want gang %t on %v", w.id, p.Gang, p.Nodes, w.gang, w.want)
		}
	}
	// Booking goes on node by node from there.
	_, err = db.CreateReservation(ctx, buyer.ID, []market.ReservationPiece{gangPiece(o, 1, start, 2)}, "{}", t0, hold)
	wantMessage(t, err, market.CodeConflict, "Someone else just booked")
}
