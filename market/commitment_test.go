package market

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// nodeOffer is plainOffer with nodes × devicesPerNode devices.
func nodeOffer(id int64, nodes, perNode int, placement bool, price Cents) Offer {
	o := plainOffer(id, "nvidia-h100-80gb-sxm", "us-west-or", perNode, price)
	o.Nodes, o.PlacementGroup = nodes, placement
	if nodes > 1 {
		o.NetworkID = "infiniband-400"
	}
	return o
}

// held is a commitment of devices on one node of o over [t0, t0+48h).
func held(o Offer, node, devices int) Commitment {
	return Commitment{OfferID: o.ID, Devices: devices, Start: t0, End: t0.Add(48 * time.Hour), Gang: true,
		Nodes: []NodeShare{{Node: node, Devices: devices}}}
}

func jobOf(kind WorkloadKind, devices int) Request {
	r := Request{Workload: Workload{Kind: kind, Devices: devices, Hours: 4}, Limit: 10}
	if kind != WorkTraining {
		r.Workload.MinPieceDevices = 1
	}
	r.Constraints.Deadline = t0.Add(24 * time.Hour)
	return r
}

// TestGangNeedsOneNode: with 4 devices free on each of two 8-device nodes,
// an 8-device training job is neither quoted nor booked — with or without
// a placement group, a gang that fits in a node gets one node — while a
// split of 8 is quoted and placed 4 + 4.
func TestGangNeedsOneNode(t *testing.T) {
	for _, placement := range []bool{false, true} {
		o := nodeOffer(1, 2, 8, placement, 200)
		commits := []Commitment{held(o, 0, 4), held(o, 1, 4)}
		res, err := Match([]Candidate{{Offer: o}}, commits, jobOf(WorkTraining, 8), t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Quotes) != 0 || res.Explanation.Fit != 0 || len(res.Explanation.Eliminated) != 1 ||
			res.Explanation.Eliminated[0].Constraint != ConstraintBooked {
			t.Fatalf("placement %t: 8-device gang on 4 + 4 free quoted: %+v", placement, res)
		}
		gang := Commitment{OfferID: o.ID, Devices: 8, Start: t0, End: t0.Add(4 * time.Hour), Gang: true}
		if err := FitsCapacity(o, commits, []Commitment{gang}); ErrorCode(err) != CodeConflict {
			t.Fatalf("placement %t: 8-device gang on 4 + 4 free booked: %v", placement, err)
		}

		res, err = Match([]Candidate{{Offer: o}}, commits, jobOf(WorkBatch, 8), t0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Quotes) != 1 || res.Quotes[0].Pieces[0].Devices != 8 || res.Quotes[0].Pieces[0].Gang || !res.Quotes[0].Start.Equal(t0) {
			t.Fatalf("placement %t: split of 8 on 4 + 4 free: %+v", placement, res.Quotes)
		}
		placed, err := PlaceCommitments(o, commits, []Commitment{res.Quotes[0].Pieces[0].Commitment()})
		if err != nil {
			t.Fatal(err)
		}
		if want := []NodeShare{{0, 4}, {1, 4}}; !slices.Equal(placed[0].Nodes, want) {
			t.Fatalf("split placed on %v, want %v", placed[0].Nodes, want)
		}
	}
}

// TestGangOverNodes: a gang larger than a node needs the placement group
// and wholly free nodes, and holds them whole.
func TestGangOverNodes(t *testing.T) {
	o := nodeOffer(1, 3, 8, true, 200)
	twelve := Commitment{OfferID: o.ID, Devices: 12, Start: t0, End: t0.Add(4 * time.Hour), Gang: true}

	placed, err := PlaceCommitments(o, []Commitment{held(o, 0, 1)}, []Commitment{twelve})
	if err != nil {
		t.Fatal(err)
	}
	if want := []NodeShare{{1, 8}, {2, 8}}; !slices.Equal(placed[0].Nodes, want) {
		t.Fatalf("12-device gang placed on %v, want whole nodes %v", placed[0].Nodes, want)
	}
	// One device on each of two nodes leaves one whole node: 12 does not fit.
	busy := []Commitment{held(o, 0, 1), held(o, 2, 1)}
	if err := FitsCapacity(o, busy, []Commitment{twelve}); ErrorCode(err) != CodeConflict {
		t.Fatalf("12-device gang with one node wholly free: %v", err)
	}
	res, err := Match([]Candidate{{Offer: o}}, busy, jobOf(WorkTraining, 12), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quotes) != 0 {
		t.Fatalf("12-device gang quoted with one node wholly free: %+v", res.Quotes)
	}
	// The busy nodes free up after 48 hours; without a deadline the gang
	// starts then.
	req := jobOf(WorkTraining, 12)
	req.Constraints.Deadline = time.Time{}
	if res, err = Match([]Candidate{{Offer: o}}, busy, req, t0); err != nil || len(res.Quotes) != 1 ||
		!res.Quotes[0].Start.Equal(t0.Add(48*time.Hour)) {
		t.Fatalf("12-device gang without a deadline: %v %+v", err, res.Quotes)
	}
	// Without a placement group it is refused whatever is free.
	o.PlacementGroup = false
	if err := FitsCapacity(o, nil, []Commitment{twelve}); ErrorCode(err) != CodeConflict {
		t.Fatalf("12-device gang without a placement group: %v", err)
	}
	// Nodes a booking names are checked as named.
	named := twelve
	named.Nodes = []NodeShare{{0, 8}, {1, 4}}
	o.PlacementGroup = true
	if err := FitsCapacity(o, nil, []Commitment{named}); ErrorCode(err) != CodeInvalid {
		t.Fatalf("gang naming a part node: %v", err)
	}
}

// TestPlacementBestFit: within an offer a gang goes to the node with the
// fewest free devices that holds it; a split piece too when one node holds
// it, else the nodes with the fewest free devices first.
func TestPlacementBestFit(t *testing.T) {
	o := nodeOffer(1, 4, 8, false, 200)
	commits := []Commitment{held(o, 0, 3), held(o, 1, 6), held(o, 2, 4)} // free 5, 2, 4, 8
	cases := []struct {
		devices int
		gang    bool
		want    []NodeShare
	}{
		{2, true, []NodeShare{{1, 2}}},
		{3, true, []NodeShare{{2, 3}}},
		{5, true, []NodeShare{{0, 5}}},
		{7, true, []NodeShare{{3, 7}}},
		{4, false, []NodeShare{{2, 4}}},
		{9, false, []NodeShare{{0, 3}, {1, 2}, {2, 4}}},
		{12, false, []NodeShare{{0, 5}, {1, 2}, {2, 4}, {3, 1}}},
	}
	for _, c := range cases {
		add := Commitment{OfferID: o.ID, Devices: c.devices, Start: t0, End: t0.Add(time.Hour), Gang: c.gang}
		placed, err := PlaceCommitments(o, commits, []Commitment{add})
		if err != nil {
			t.Fatalf("%d devices (gang %t): %v", c.devices, c.gang, err)
		}
		if !slices.Equal(placed[0].Nodes, c.want) {
			t.Errorf("%d devices (gang %t) placed on %v, want %v", c.devices, c.gang, placed[0].Nodes, c.want)
		}
	}
	over := Commitment{OfferID: o.ID, Devices: 20, Start: t0, End: t0.Add(time.Hour)}
	if err := FitsCapacity(o, commits, []Commitment{over}); ErrorCode(err) != CodeConflict {
		t.Fatalf("20 devices with 19 free: %v", err)
	}
}

// TestTieBreakKeepsLargeBlocks: of two offers at the same cost, a gang
// goes where it fills a fragment, leaving the other offer's idle node
// whole.
func TestTieBreakKeepsLargeBlocks(t *testing.T) {
	idle := nodeOffer(1, 1, 8, false, 200)
	part := nodeOffer(2, 1, 8, false, 200)
	cands := []Candidate{{Offer: idle}, {Offer: part}}
	res, err := Match(cands, []Commitment{held(part, 0, 4)}, jobOf(WorkTraining, 4), t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quotes) != 2 || res.Quotes[0].Pieces[0].OfferID != part.ID || res.Quotes[0].Cost != res.Quotes[1].Cost {
		t.Fatalf("want the part-used offer first at equal cost: %+v", res.Quotes)
	}
	// Without the fragment the lower offer id wins the tie.
	if res, err = Match(cands, nil, jobOf(WorkTraining, 4), t0); err != nil || res.Quotes[0].Pieces[0].OfferID != idle.ID {
		t.Fatalf("tie on empty offers: %v %+v", err, res.Quotes)
	}
}

// TestFreeDevices: what buyers are shown is what requests can get, node by
// node.
func TestFreeDevices(t *testing.T) {
	o := nodeOffer(1, 3, 8, true, 200)
	commits := []Commitment{held(o, 0, 4), held(o, 1, 4)}
	a := FreeDevices(o, commits, t0, t0.Add(time.Hour))
	if !slices.Equal(a.Free, []int{4, 4, 8}) || a.Spread != 16 || a.Gang != 8 {
		t.Fatalf("free %+v, want 4, 4, 8: 16 spread, gangs of 8", a)
	}
	a = FreeDevices(o, commits, t0.Add(48*time.Hour), t0.Add(49*time.Hour))
	if !slices.Equal(a.Free, []int{8, 8, 8}) || a.Spread != 24 || a.Gang != 24 {
		t.Fatalf("free after the commitments %+v, want all 24 as one gang", a)
	}
	o.PlacementGroup = false
	if a = FreeDevices(o, nil, t0, t0.Add(time.Hour)); a.Gang != 8 || a.Spread != 24 {
		t.Fatalf("without a placement group %+v, want gangs of 8", a)
	}
	if a = FreeDevices(o, nil, t0.Add(-time.Hour), t0); a.Spread != 0 || a.Gang != 0 {
		t.Fatalf("before the offer's window %+v, want nothing", a)
	}

	// Now, for the shortest rental; and a calendar whose days are free
	// throughout, clipped to the offer's window.
	o.PlacementGroup, o.MinRentalHours = true, 2
	late := Commitment{OfferID: o.ID, Devices: 8, Start: t0.Add(time.Hour), End: t0.Add(3 * time.Hour), Gang: true,
		Nodes: []NodeShare{{Node: 2, Devices: 8}}}
	if a = FreeNow(o, append(commits, late), t0); !slices.Equal(a.Free, []int{4, 4, 0}) || a.Gang != 4 || a.Spread != 8 {
		t.Fatalf("free now %+v, want 4, 4, 0 (the third node is taken within the minimum rental)", a)
	}
	o.AvailableUntil = t0.Add(60 * time.Hour)
	days := FreeByDay(o, commits, t0.Add(-24*time.Hour), 5)
	want := [][]int{{0, 0, 0}, {4, 4, 8}, {4, 4, 8}, {8, 8, 8}, {0, 0, 0}} // before, 48 h held, free, after
	for i, d := range days {
		if !slices.Equal(d.Free, want[i]) {
			t.Errorf("day %d free %v, want %v", i, d.Free, want[i])
		}
	}
}

// TestPlaceLeftAgreesWithPlace: the ranking's leftover is the placement's,
// and a layout fits at an instant exactly when it can be placed there.
func TestPlaceLeftAgreesWithPlace(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	checked := 0
	for i := range 3000 {
		o := randomOffer(rng, 1)
		var spans []span
		for range rng.IntN(8) {
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(12)) * time.Hour)
			spans = appendSpans(spans, randomCommitment(rng, o, s, s.Add(time.Duration(1+rng.IntN(8))*time.Hour)))
		}
		sh := shape{nodes: int64(o.Nodes), dpn: int64(o.DevicesPerNode)}
		from := compactUnix(o.AvailableFrom.Add(time.Duration(rng.IntN(12)) * time.Hour))
		to := from + int64(1+rng.IntN(6))*3600
		for _, gang := range []bool{false, true} {
			d := int64(1 + rng.IntN(o.Devices()))
			l := layoutOf(gang, d, sh.dpn)
			shares, left, ok := place(spans, sh, l, d, from, to)
			if fits := fitsAt(spans, sh, l, d, from, to); fits != ok {
				t.Fatalf("instance %d: fitsAt %t, place %t (%d devices, layout %d, %v)", i, fits, ok, d, l, shares)
			}
			if !ok {
				continue
			}
			checked++
			if got := placeLeft(spans, sh, l, d, from, to); got != left {
				t.Fatalf("instance %d: placeLeft %d, place left %d (%v)", i, got, left, shares)
			}
		}
	}
	if checked < 1000 {
		t.Fatalf("only %d placements checked", checked)
	}
}
