package store

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// paidRental books devices of o for buyer from start for hours and records
// its payment (pi), as a webhook would.
func paidRental(t *testing.T, db *DB, buyerID int64, o market.Offer, devices int, start time.Time, hours int, pi string) market.Reservation {
	t.Helper()
	ctx := context.Background()
	r := book(t, db, buyerID, t0, piece(o, devices, start, hours))
	if err := db.RecordCheckout(ctx, buyerID, r.ID, "cs_"+pi, r.AmountCents, t0); err != nil {
		t.Fatal(err)
	}
	ev := PaymentEvent{EventID: "evt_" + pi, EventType: "payment_intent.succeeded", ReservationID: r.ID, PaymentIntentID: pi, Amount: r.AmountCents, Currency: "usd"}
	if out, err := db.RecordPayment(ctx, ev, t0); err != nil || out != PaymentConfirmed {
		t.Fatalf("RecordPayment: %v %v", out, err)
	}
	r, err := db.FindReservation(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestRejectReservation(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	other := createUser(t, db, "other@example.com", false)
	in := validOffer(prov.ID)
	in.RejectMinutes = 30
	o, err := db.CreateOffer(ctx, in, t0)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", t0); err != nil {
		t.Fatal(err)
	}
	if o, err = db.FindProviderOffer(ctx, prov.ID, o.ID); err != nil || o.RejectMinutes != 30 {
		t.Fatalf("offer's acceptance period %d, %v", o.RejectMinutes, err)
	}
	start := o.AvailableFrom.Add(24 * time.Hour)
	r := paidRental(t, db, buyer.ID, o, 4, start, 10, "pi_rej")
	if r.Pieces[0].RejectMinutes != 30 {
		t.Fatalf("piece froze %d minutes, want 30", r.Pieces[0].RejectMinutes)
	}
	// The contract is what was booked: a later edit of the offer does not change it.
	o.RejectMinutes = 5
	if _, _, err := db.UpdateOffer(ctx, prov.ID, o, t0); err != nil {
		t.Fatal(err)
	}
	if r, err = db.FindReservation(ctx, r.ID); err != nil || r.Pieces[0].RejectMinutes != 30 {
		t.Fatalf("after the edit the piece has %d minutes, %v", r.Pieces[0].RejectMinutes, err)
	}
	if _, err := db.AdvanceReservations(ctx, start.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	at := start.Add(12 * time.Minute)
	_, err = db.RejectReservation(ctx, other.ID, r.ID, "", 1000, at)
	wantCode(t, err, market.CodeNotFound)
	_, err = db.RejectReservation(ctx, buyer.ID, r.ID, "", 1000, start.Add(-time.Minute))
	wantMessage(t, err, market.CodeConflict, "has not started yet")
	_, err = db.RejectReservation(ctx, buyer.ID, r.ID, "", 1000, start.Add(30*time.Minute))
	wantMessage(t, err, market.CodeConflict, "Too late to reject")
	_, err = db.RejectReservation(ctx, buyer.ID, r.ID, strings.Repeat("x", market.MaxRejectReason+1), 1000, at)
	if market.FieldErrors(err)["reason"] == "" {
		t.Fatalf("a long reason: %v", err)
	}
	if got, _ := db.FindReservation(ctx, r.ID); got.State != market.ReservationActive {
		t.Fatalf("refusals changed the state to %s", got.State)
	}

	// The agent's acceptance test could not run: the rental failed its
	// contract, so the rejection refunds everything.
	failAcceptance(t, db, prov.ID, r, at.Add(-time.Minute))
	got, err := db.RejectReservation(ctx, buyer.ID, r.ID, "  Acceptance test 40% below the listing. ", 1000, at)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != market.ReservationCancelled || !got.RejectedAt.Equal(at) || got.RejectReason != "Acceptance test 40% below the listing." || got.CancelFeeCents != 0 {
		t.Fatalf("rejected %+v", got)
	}
	if again, err := db.FindReservation(ctx, r.ID); err != nil || !again.RejectedAt.Equal(at) || again.RejectReason != got.RejectReason {
		t.Fatalf("as stored %+v %v", again, err)
	}
	_, err = db.RejectReservation(ctx, buyer.ID, r.ID, "", 1000, at)
	wantMessage(t, err, market.CodeConflict, "cannot be rejected")
	// The devices are free again at once.
	if cs, err := db.ListOfferCommitments(ctx, o.ID, at); err != nil || len(cs) != 0 {
		t.Fatalf("commitments after the rejection %+v %v", cs, err)
	}

	// The settlement refunds all that was paid; the provider is paid nothing.
	s, err := db.FindSettlement(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.RefundCents != r.AmountCents || s.RefundDone || s.State != SettlementPending || !s.Statement.Rejected || s.Statement.Payout != 0 || s.Statement.Fee != 0 {
		t.Fatalf("settlement %+v", s)
	}
	if len(s.Transfers) != 1 || s.Transfers[0].Amount != 0 || s.Transfers[0].State != TransferDone {
		t.Fatalf("transfers %+v", s.Transfers)
	}
	if s, err = db.RecordSettlementRefund(ctx, r.ID, "re_rej", at); err != nil || s.State != SettlementDone {
		t.Fatalf("after the refund %+v %v", s, err)
	}
	es, err := db.ListAllLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := market.CheckSettled(es, r.ID); err != nil {
		t.Fatal(err)
	}
	var refunded market.Cents
	for _, e := range es {
		switch e.Kind {
		case market.EntryRefund:
			refunded += e.Amount
		case market.EntryTransfer, market.EntryFee:
			t.Errorf("a rejected rental moved %s %s", e.Kind, e.Amount)
		}
	}
	if refunded != r.AmountCents {
		t.Fatalf("refunded %s of %s", refunded, r.AmountCents)
	}

	// The provider is told, and the audit trail records who rejected it and why.
	ns, err := db.ListNotifications(ctx, prov.ID, 10)
	if err != nil || len(ns) == 0 || !strings.Contains(ns[0].Notice.Text(), "rejected booking") {
		t.Fatalf("provider's notifications %+v %v", ns, err)
	}
	tl, err := db.ReservationTimeline(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range tl {
		found = found || (e.Kind == "audit" && strings.Contains(e.Text, "Rental rejected by the buyer") && strings.Contains(e.Text, "40% below"))
	}
	if !found {
		t.Fatalf("no audit row in the timeline %+v", tl)
	}
}

func TestRejectReservationNeedsAPeriodOnEveryPiece(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	prov := createUser(t, db, "prov@example.com", true)
	buyer := createUser(t, db, "buyer@example.com", false)
	o := listedOffer(t, db, prov.ID, 8) // RejectMinutes 0: no acceptance period
	start := o.AvailableFrom.Add(24 * time.Hour)
	r := paidRental(t, db, buyer.ID, o, 2, start, 4, "pi_none")
	_, err := db.RejectReservation(ctx, buyer.ID, r.ID, "", 1000, start.Add(time.Minute))
	wantMessage(t, err, market.CodeConflict, "no acceptance period")

	// Unpaid: nothing to refund.
	h := book(t, db, buyer.ID, t0, piece(o, 2, start.Add(5*time.Hour), 2))
	_, err = db.RejectReservation(ctx, buyer.ID, h.ID, "", 1000, start.Add(5*time.Hour+time.Minute))
	wantMessage(t, err, market.CodeConflict, "not paid")
}

// failAcceptance has the agent of node 0 of r's first piece report, at at,
// an acceptance test that could not run.
func failAcceptance(t *testing.T, db *DB, providerID int64, r market.Reservation, at time.Time) {
	t.Helper()
	ctx := context.Background()
	p := r.Pieces[0]
	tok, _, err := db.CreateHostToken(ctx, providerID, p.OfferID, 0, at)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.RecordAcceptance(ctx, tok.ID, p.ID, market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, Error: "GPU 3 missing"}, at); err != nil {
		t.Fatal(err)
	}
}
