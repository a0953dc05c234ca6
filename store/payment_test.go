package store

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestLedgerBalancesThroughEveryStep pays, settles with a provider-reported
// host failure, refunds and transfers, and checks after every step that
// every reservation's entries balance; a replayed payment event and a
// repeated record change nothing; the settled reservation leaves nothing owed.
func TestLedgerBalancesThroughEveryStep(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	prov := createUser(t, db, "p@example.com", true)
	buyer := createUser(t, db, "b@example.com", false)
	o := listedOffer(t, db, prov.ID, 8)
	start := o.AvailableFrom.Add(24 * time.Hour)
	r := book(t, db, buyer.ID, t0, piece(o, 8, start, 10))
	checkLedger := func(step string) []market.LedgerEntry {
		t.Helper()
		es, err := db.ListAllLedger(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := market.CheckBalanced(es); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		return es
	}

	if err := db.RecordCheckout(ctx, buyer.ID, r.ID, "cs_1", r.AmountCents, t0); err != nil {
		t.Fatal(err)
	}
	ev := PaymentEvent{EventID: "evt_1", EventType: "payment_intent.succeeded", ReservationID: r.ID, PaymentIntentID: "pi_1", Amount: r.AmountCents, Currency: "usd"}
	if out, err := db.RecordPayment(ctx, ev, t0); err != nil || out != PaymentConfirmed {
		t.Fatalf("RecordPayment: %v %v", out, err)
	}
	if out, err := db.RecordPayment(ctx, ev, t0); err != nil || out != PaymentDuplicate {
		t.Fatalf("replay: %v %v", out, err)
	}
	ev.EventID, ev.EventType, ev.CheckoutID = "evt_2", "checkout.session.completed", "cs_1"
	if out, err := db.RecordPayment(ctx, ev, t0); err != nil || out != PaymentRecorded {
		t.Fatalf("second notice: %v %v", out, err)
	}
	if es := checkLedger("charge"); len(es) != 1 || es[0].Amount != r.AmountCents || es[0].StripeRef != "pi_1" {
		t.Fatalf("charge entries %+v", es)
	}
	if _, err := db.CreatePayoutAccount(ctx, prov.ID, "acct_1", t0); err != nil {
		t.Fatal(err)
	}
	if _, err := db.UpdatePayoutAccount(ctx, AccountUpdate{AccountID: "acct_1", DetailsSubmitted: true, PayoutsEnabled: true, At: t0}, t0); err != nil {
		t.Fatal(err)
	}

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
	r.State = market.ReservationCompleted
	r.Pieces[0].ID = s.Statement.Pieces[0].PieceID
	inc.PieceID, inc.Acknowledged = r.Pieces[0].ID, true
	want, err := market.Settle(market.SettlementInput{Reservation: r, Terms: map[int64]market.SLATerms{o.ID: market.TermsOf(o)},
		Incidents: []market.Incident{inc.Incident}, PlatformFeeBP: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if s.RefundCents != want.Refund || s.RefundCents <= r.AmountCents/10 || s.Transfers[0].Amount != want.Payout {
		t.Fatalf("refund %s payout %s, want %s and %s", s.RefundCents, s.Transfers[0].Amount, want.Refund, want.Payout)
	}
	if len(s.Transfers) != 1 || s.Transfers[0].State != TransferPending || s.Transfers[0].AccountID != "acct_1" {
		t.Fatalf("transfers %+v", s.Transfers)
	}
	checkLedger("settlement started")
	if _, err := db.RecordSettlementRefund(ctx, r.ID, "re_1", end); err != nil {
		t.Fatal(err)
	}
	checkLedger("refund")
	for range 2 {
		if s, err = db.RecordSettlementTransfer(ctx, r.ID, prov.ID, "tr_1", end); err != nil {
			t.Fatal(err)
		}
	}
	es := checkLedger("transfer")
	if s.State != SettlementDone {
		t.Fatalf("state %s", s.State)
	}
	if err := market.CheckSettled(es, r.ID); err != nil {
		t.Fatal(err)
	}
	got, err := db.FindReservation(ctx, r.ID)
	if err != nil || got.State != market.ReservationSettled {
		t.Fatalf("reservation %v %v", got.State, err)
	}
	if len(es) != 5 { // charge, credit, fee, refund, transfer
		t.Fatalf("%d entries, want 5: %+v", len(es), es)
	}
}
