package store

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestSettlementFollowsBookedTerms books under one set of terms, lets the
// provider change every settlement term of the offer, books again, and
// settles both reservations with the same outage: each follows the terms it
// was booked under. The figures are worked out by hand from the terms.
func TestSettlementFollowsBookedTerms(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "p@example.com", true)
	buyer := createUser(t, db, "b@example.com", false)

	in := validOffer(prov.ID)
	in.BillingBasis, in.UptimeBP, in.CreditCapBP = market.BillingWallClock, 9950, 3000
	in.CreditSchedule = []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}}
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	booked := market.TermsOf(in)

	pay := func(r market.Reservation, now time.Time) {
		t.Helper()
		checkout, intent := fmt.Sprintf("cs_%d", r.ID), fmt.Sprintf("pi_%d", r.ID)
		if err := db.RecordCheckout(ctx, buyer.ID, r.ID, checkout, r.AmountCents, now); err != nil {
			t.Fatal(err)
		}
		ev := PaymentEvent{EventID: "evt_" + intent, EventType: "payment_intent.succeeded", ReservationID: r.ID, PaymentIntentID: intent, Amount: r.AmountCents, Currency: "usd"}
		if out, err := db.RecordPayment(ctx, ev, now); err != nil || out != PaymentConfirmed {
			t.Fatalf("RecordPayment %d: %v %v", r.ID, out, err)
		}
	}

	// 8 devices × 10 h × 249¢ = 19,920¢ each.
	start1 := o.AvailableFrom.Add(24 * time.Hour)
	r1 := book(t, db, buyer.ID, t0, piece(o, 8, start1, 10))
	pay(r1, t0)

	edited := o
	edited.BillingBasis, edited.UptimeBP, edited.CreditCapBP = market.BillingCommittedBlock, 9000, 10000
	edited.CreditSchedule = []market.CreditTier{{BelowBP: 8000, CreditBP: 500}}
	if err := market.ValidateOffer(&edited, t0); err != nil {
		t.Fatalf("edited offer invalid: %v", err)
	}
	if _, _, err := db.UpdateOffer(ctx, prov.ID, edited, t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	start2 := start1.Add(24 * time.Hour)
	r2 := book(t, db, buyer.ID, t0.Add(2*time.Hour), piece(o, 8, start2, 10))
	pay(r2, t0.Add(2*time.Hour))

	for _, c := range []struct {
		r    market.Reservation
		want market.SLATerms
	}{{r1, booked}, {r2, market.TermsOf(edited)}} {
		got, err := db.FindReservation(ctx, c.r.ID)
		if err != nil || !reflect.DeepEqual(got.Pieces[0].Terms, c.want) || !reflect.DeepEqual(c.r.Pieces[0].Terms, c.want) {
			t.Fatalf("reservation %d terms: stored %+v (%v), booked %+v; want %+v", c.r.ID, got.Pieces[0].Terms, err, c.r.Pieces[0].Terms, c.want)
		}
	}

	if _, err := db.CreatePayoutAccount(ctx, prov.ID, "acct_1", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdatePayoutAccount(ctx, AccountUpdate{AccountID: "acct_1", DetailsSubmitted: true, PayoutsEnabled: true, At: t0}, t0); err != nil {
		t.Fatal(err)
	}
	// The same outage on both: 4 of 8 devices down for 2 of 10 hours, so
	// 28,800 of 288,000 device-seconds are lost and uptime is 90.00%.
	settle := func(r market.Reservation, start time.Time) Settlement {
		t.Helper()
		during := start.Add(time.Hour)
		if _, err := db.AdvanceReservations(ctx, during); err != nil {
			t.Fatal(err)
		}
		inc := Incident{Incident: market.Incident{Kind: market.IncidentHostFailure, Start: start.Add(2 * time.Hour), End: start.Add(4 * time.Hour),
			DevicesAffected: 4, Note: "PSU failed on node 1"}, ReservationID: r.ID, ReportedBy: ReportedByProvider, ReporterID: prov.ID}
		if _, err := db.ReportIncident(ctx, inc, during); err != nil {
			t.Fatal(err)
		}
		end := start.Add(11 * time.Hour)
		if _, err := db.AdvanceReservations(ctx, end); err != nil {
			t.Fatal(err)
		}
		s, err := db.StartSettlement(ctx, r.ID, 1000, end)
		if err != nil {
			t.Fatal(err)
		}
		if s.Statement.Refund > 0 {
			if _, err := db.RecordSettlementRefund(ctx, r.ID, fmt.Sprintf("re_%d", r.ID), end); err != nil {
				t.Fatal(err)
			}
		}
		s, err = db.RecordSettlementTransfer(ctx, r.ID, prov.ID, fmt.Sprintf("tr_%d", r.ID), end)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}

	// Booked terms (wall clock, 99.50% guaranteed, tiers below 99.50% → 10%
	// and below 99.00% → 25%, cap 30%): the pro-rata credit is 19,920 ×
	// 28,800 / 288,000 = 1,992¢ and the uptime credit 25% = 4,980¢, 6,972¢
	// before the cap of 5,976¢; the buyer gets 5,976¢ back, 13,944¢ is kept,
	// the fee is 10% = 1,394.4 → 1,394¢ and the payout 12,550¢. Under the
	// edited terms it would have been no refund at all.
	s1 := settle(r1, start1)
	p1 := s1.Statement.Pieces[0]
	if p1.Basis != market.BillingWallClock || p1.GuaranteeBP != 9950 || !p1.Breached || p1.UptimeBP != 9000 ||
		p1.CreditsBeforeCap != 6972 || p1.CreditCap != 5976 || p1.Credits != 5976 || p1.NotCharged != 0 ||
		p1.Refund != 5976 || p1.Kept != 13944 || p1.Fee != 1394 || p1.Payout != 12550 {
		t.Errorf("first statement (booked terms) = %+v", p1)
	}
	if len(p1.Clauses) != 2 || p1.Clauses[0].Cents != 1992 || p1.Clauses[1].Kind != market.ClauseUptime ||
		p1.Clauses[1].RateBP != 2500 || p1.Clauses[1].Cents != 4980 {
		t.Errorf("first statement clauses = %+v", p1.Clauses)
	}
	if s1.RefundCents != 5976 || len(s1.Transfers) != 1 || s1.Transfers[0].Amount != 12550 || s1.State != SettlementDone {
		t.Errorf("first settlement = refund %s, transfers %+v, state %s", s1.RefundCents, s1.Transfers, s1.State)
	}

	// Edited terms (committed block, 90.00% guaranteed, a tier below 80.00%,
	// cap 100%): 90.00% meets the guarantee, so the outage gives nothing and
	// no tier applies; 19,920¢ is kept, the fee is 1,992¢ and the payout
	// 17,928¢.
	s2 := settle(r2, start2)
	p2 := s2.Statement.Pieces[0]
	if p2.Basis != market.BillingCommittedBlock || p2.GuaranteeBP != 9000 || p2.Breached || p2.UptimeBP != 9000 ||
		p2.CreditsBeforeCap != 0 || p2.CreditCap != 19920 || p2.Credits != 0 || p2.NotCharged != 0 ||
		p2.Refund != 0 || p2.Kept != 19920 || p2.Fee != 1992 || p2.Payout != 17928 {
		t.Errorf("second statement (edited terms) = %+v", p2)
	}
	if s2.RefundCents != 0 || len(s2.Transfers) != 1 || s2.Transfers[0].Amount != 17928 || s2.State != SettlementDone {
		t.Errorf("second settlement = refund %s, transfers %+v, state %s", s2.RefundCents, s2.Transfers, s2.State)
	}

	es, err := db.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckBalanced(es); err != nil {
		t.Fatal(err)
	}
	for _, r := range []market.Reservation{r1, r2} {
		if err := market.CheckSettled(es, r.ID); err != nil {
			t.Errorf("reservation %d: %v", r.ID, err)
		}
	}
}

// TestPieceTermsBackfill opens a database whose pieces were booked before
// the pieces kept their terms (0008_piece_terms.sql not applied): the
// migration gives them their offers' terms, credit schedule in order, and
// no schedule for an offer without tiers.
func TestPieceTermsBackfill(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	prov := createUser(t, db, "p@example.com", true)
	buyer := createUser(t, db, "b@example.com", false)
	o1 := listedOffer(t, db, prov.ID, 8)
	in := validOffer(prov.ID)
	in.BillingBasis, in.UptimeBP, in.CreditCapBP, in.CreditSchedule = market.BillingSuccessfulWork, 9000, 2000, nil
	o2, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o2.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	start := t0.Add(48 * time.Hour)
	r := book(t, db, buyer.ID, t0, piece(o1, 2, start, 3), piece(o2, 1, start, 2))
	for _, q := range []string{
		`ALTER TABLE reservation_pieces DROP COLUMN billing_basis`,
		`ALTER TABLE reservation_pieces DROP COLUMN uptime_bp`,
		`ALTER TABLE reservation_pieces DROP COLUMN credit_cap_bp`,
		`ALTER TABLE reservation_pieces DROP COLUMN credit_schedule_json`,
		`DELETE FROM schema_migrations WHERE version = 8`,
	} {
		if _, err := db.writer.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.FindReservation(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []market.SLATerms{
		{BillingBasis: market.BillingWallClock, UptimeBP: 9950, CreditCapBP: 5000,
			CreditSchedule: []market.CreditTier{{BelowBP: 9950, CreditBP: 1000}, {BelowBP: 9900, CreditBP: 2500}}},
		{BillingBasis: market.BillingSuccessfulWork, UptimeBP: 9000, CreditCapBP: 2000},
	}
	if len(got.Pieces) != 2 || !reflect.DeepEqual(got.Pieces[0].Terms, want[0]) || !reflect.DeepEqual(got.Pieces[1].Terms, want[1]) {
		t.Fatalf("backfilled pieces = %+v, want terms %+v", got.Pieces, want)
	}
}
