package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

func TestTradesHistoryAndWorkReports(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)

	// A held booking is not a trade; a confirmed one is.
	held := book(t, db, buyer.ID, t0, piece(o, 2, t0.Add(48*time.Hour), 4))
	paid := book(t, db, other.ID, t0, piece(o, 4, t0.Add(72*time.Hour), 10))
	if _, err := db.ConfirmReservation(ctx, paid.ID, t0); err != nil {
		t.Fatal(err)
	}

	// Ninety days of history before t0, settled.
	var past []market.Reservation
	for d := 1; d <= 90; d++ {
		booked := t0.Add(-time.Duration(d) * 24 * time.Hour)
		p := piece(o, 1+d%8, booked.Add(time.Hour), 3)
		p.PriceCents = market.Cents(200 + d)
		past = append(past, market.Reservation{BuyerID: buyer.ID, State: market.ReservationSettled,
			Pieces: []market.ReservationPiece{p}, RequestJSON: `{"version":1}`, CreatedAt: booked, UpdatedAt: booked})
	}
	if err := db.ImportPastReservations(ctx, past, t0); err != nil {
		t.Fatal(err)
	}
	future := past[0]
	future.Pieces = []market.ReservationPiece{piece(o, 1, t0, 3)}
	wantCode(t, db.ImportPastReservations(ctx, []market.Reservation{future}, t0), market.CodeInvalid)
	heldPast := past[0]
	heldPast.State = market.ReservationHeld
	wantCode(t, db.ImportPastReservations(ctx, []market.Reservation{heldPast}, t0), market.CodeInvalid)

	trades, err := db.ListTrades(ctx, t0.AddDate(0, 0, -100), t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(trades) != 91 {
		t.Fatalf("%d trades, want 90 settled + 1 confirmed", len(trades))
	}
	first, last := trades[0], trades[90]
	if !first.BookedAt.Equal(t0.Add(-90*24*time.Hour)) || first.AcceleratorID != o.AcceleratorID || first.RegionID != o.RegionID ||
		first.Devices != 1+90%8 || first.PriceCents != 290 || first.End.Sub(first.Start) != 3*time.Hour || first.Interruptible ||
		first.BuyerID != buyer.ID || first.ProviderID != prov.ID {
		t.Errorf("first trade %+v", first)
	}
	if !last.BookedAt.Equal(t0) || last.Devices != 4 || last.PriceCents != o.PriceCentsPerDeviceHour || last.BuyerID != other.ID || last.ProviderID != prov.ID {
		t.Errorf("last trade %+v", last)
	}
	// Past reservations hold no capacity: the index sees only the live ones.
	cs, err := db.ListAllCommitments(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 {
		t.Errorf("%d commitments, want the held and the paid booking only", len(cs))
	}

	// Work reports: only once started, only the buyer's own, only offers in it.
	rep := market.WorkReport{ReservationID: held.ID, OfferID: o.ID, ReporterID: buyer.ID, Metric: market.MetricStepsPerHour,
		Workload: "GPT-2 124M", Value: 9000, ObservedMinutes: 180, LostMinutes: 18}
	_, err = db.CreateWorkReport(ctx, rep, t0)
	wantCode(t, err, market.CodeConflict)
	var settled market.Reservation
	list, err := db.ListBuyerReservations(ctx, buyer.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list {
		if r.State == market.ReservationSettled {
			settled = r
			break
		}
	}
	rep.ReservationID = settled.ID
	rep.ReporterID = other.ID
	_, err = db.CreateWorkReport(ctx, rep, t0)
	wantCode(t, err, market.CodeNotFound)
	rep.ReporterID = buyer.ID
	bad := rep
	bad.OfferID = o.ID + 1000
	_, err = db.CreateWorkReport(ctx, bad, t0)
	wantCode(t, err, market.CodeInvalid)
	got, err := db.CreateWorkReport(ctx, rep, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID == 0 || got.Devices != settled.Devices() || got.AcceleratorID != o.AcceleratorID {
		t.Errorf("report %+v", got)
	}
	for _, f := range []WorkReportFilter{{OfferIDs: []int64{o.ID}}, {AcceleratorID: o.AcceleratorID}, {ReservationID: settled.ID}} {
		rs, err := db.ListWorkReports(ctx, f)
		if err != nil || len(rs) != 1 || rs[0] != got {
			t.Errorf("filter %+v: %+v %v", f, rs, err)
		}
	}
	if rs, err := db.ListWorkReports(ctx, WorkReportFilter{AcceleratorID: "amd-mi300x-192gb-oam"}); err != nil || len(rs) != 0 {
		t.Errorf("other model: %+v %v", rs, err)
	}
}

func TestOfferCarbonProfile(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	stranger := createUser(t, db, "stranger@example.com", true)
	o := listedOffer(t, db, prov.ID, 8)

	_, err := db.FindOfferCarbonProfile(ctx, o.ID)
	wantCode(t, err, market.CodeNotFound)
	p := market.FlatProfile(40)
	p[12] = 10
	wantCode(t, db.SetOfferCarbonProfile(ctx, stranger.ID, o.ID, p, "PPA", t0), market.CodeNotFound)
	if err := db.SetOfferCarbonProfile(ctx, prov.ID, o.ID, market.FlatProfile(1), "first", t0); err != nil {
		t.Fatal(err)
	}
	if err := db.SetOfferCarbonProfile(ctx, prov.ID, o.ID, p, "Site meter 2025", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	got, err := db.FindOfferCarbonProfile(ctx, o.ID)
	if err != nil || got.Profile != p || got.Source != "Site meter 2025" || !got.UpdatedAt.Equal(t0.Add(time.Hour)) || got.OfferID != o.ID {
		t.Errorf("profile %+v %v", got, err)
	}
	all, err := db.ListOfferCarbonProfiles(ctx)
	if err != nil || len(all) != 1 || all[o.ID] != p {
		t.Errorf("all %+v %v", all, err)
	}
	wantCode(t, db.DeleteOfferCarbonProfile(ctx, stranger.ID, o.ID), market.CodeNotFound)
	if err := db.DeleteOfferCarbonProfile(ctx, prov.ID, o.ID); err != nil {
		t.Fatal(err)
	}
	_, err = db.FindOfferCarbonProfile(ctx, o.ID)
	wantCode(t, err, market.CodeNotFound)
}

func TestListForwardMarket(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	paused := listedOffer(t, db, prov.ID, 4)
	if err := db.SetOfferState(ctx, prov.ID, paused.ID, market.OfferPaused, t0); err != nil {
		t.Fatal(err)
	}

	// t0 is Saturday 1 March 2025: the curve's weeks run from Monday
	// 24 February to Monday 19 May 2025 (exclusive).
	first := time.Date(2025, 2, 24, 0, 0, 0, 0, time.UTC)
	book(t, db, buyer.ID, t0, piece(o, 1, t0.Add(24*time.Hour), 2)) // held: not a trade
	confirm := func(p market.ReservationPiece) market.Reservation {
		r := book(t, db, buyer.ID, t0, p)
		if _, err := db.ConfirmReservation(ctx, r.ID, t0); err != nil {
			t.Fatal(err)
		}
		return r
	}
	near := piece(o, 3, time.Date(2025, 3, 18, 9, 0, 0, 0, time.UTC), 5) // three weeks ahead
	near.PriceCents, near.AmountCents = 250, 250*15
	confirm(near)
	confirm(piece(o, 2, first.AddDate(0, 0, 84).Add(-time.Hour), 1)) // the last hour of week 11
	confirm(piece(o, 2, first.AddDate(0, 0, 84), 1))                 // week 12: past the curve
	// Past pieces: one this week (counts), one last week (does not).
	var past []market.Reservation
	for _, start := range []time.Time{first.Add(10 * time.Hour), first.Add(-14 * time.Hour)} {
		p := piece(o, 1, start, 2)
		past = append(past, market.Reservation{BuyerID: buyer.ID, State: market.ReservationSettled, Pieces: []market.ReservationPiece{p},
			RequestJSON: `{"version":1}`, CreatedAt: start.Add(-time.Hour), UpdatedAt: start.Add(-time.Hour)})
	}
	if err := db.ImportPastReservations(ctx, past, t0); err != nil {
		t.Fatal(err)
	}

	offers, trades, err := db.ListForwardMarket(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(offers) != 1 || offers[0].ID != o.ID || offers[0].Devices() != 8 || !offers[0].AvailableUntil.Equal(o.AvailableUntil) ||
		offers[0].MinRentalHours != o.MinRentalHours || offers[0].PriceCentsPerDeviceHour != o.PriceCentsPerDeviceHour {
		t.Errorf("offers %+v, want the listed one only", offers)
	}
	if len(trades) != 3 {
		t.Fatalf("%d trades, want this week's, three weeks ahead and week 11's: %+v", len(trades), trades)
	}
	if !trades[0].Start.Equal(first.Add(10*time.Hour)) || !trades[2].Start.Equal(first.AddDate(0, 0, 84).Add(-time.Hour)) {
		t.Errorf("first %v last %v", trades[0].Start, trades[2].Start)
	}
	n := trades[1]
	if !n.Start.Equal(near.Start) || !n.End.Equal(near.End) || n.Devices != 3 || n.PriceCents != 250 || n.BuyerID != buyer.ID ||
		n.ProviderID != prov.ID || n.AcceleratorID != o.AcceleratorID || n.RegionID != o.RegionID || n.Interruptible || !n.BookedAt.Equal(t0) {
		t.Errorf("three weeks ahead: %+v", n)
	}
}
