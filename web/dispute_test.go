package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

func TestDisputeOpenAnswerDecideRefund(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)

	// The buyer opens a dispute from the reservation page.
	mustContain(t, buyer.get(resPath).body, `data-testid="open-dispute-link"`)
	bad := buyer.post(resPath+"/disputes/new", resPath+"/disputes", url.Values{"reason": {"not_as_listed"}, "statement": {" "}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("empty statement: %d", bad.status)
	}
	res := buyer.post(resPath+"/disputes/new", resPath+"/disputes", url.Values{"reason": {"not_as_listed"},
		"statement": {"We were given A100s, not H100s: nvidia-smi output attached."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("open dispute: %d\n%s", res.status, res.body)
	}
	disputePath := res.location
	id, _ := strconv.ParseInt(regexp.MustCompile(`\d+$`).FindString(disputePath), 10, 64)
	mustNotContain(t, buyer.get(resPath).body, `data-testid="open-dispute-link"`)

	// The provider is told and answers; a stranger cannot see the dispute.
	mustContain(t, prov.get("/notifications").body, `data-kind="dispute_opened"`)
	if res := prov.post(disputePath, disputePath+"/statements", url.Values{"statement": {"The host had H100s; the buyer's log is from another machine."}}); res.status != http.StatusSeeOther {
		t.Fatalf("answer: %d", res.status)
	}
	stranger := app.client()
	stranger.signUp("stranger@example.com", true)
	if res := stranger.get(disputePath); res.status != http.StatusNotFound {
		t.Errorf("stranger sees the dispute: %d", res.status)
	}
	if res := stranger.post("/account", disputePath+"/statements", url.Values{"statement": {"me too"}}); res.status != http.StatusNotFound {
		t.Errorf("stranger adds a statement: %d", res.status)
	}
	mustContain(t, buyer.get(disputePath).body, "another machine", `data-role="provider"`)

	// The admin sees the timeline; a credit waits for the settlement statement.
	admin := app.adminClient("root@example.com")
	adminPath := fmt.Sprintf("/admin/disputes/%d", id)
	mustContain(t, admin.get("/admin/disputes").body, "Hardware not as listed")
	page := admin.get(adminPath).body
	mustContain(t, page, `data-kind="booking"`, `data-kind="payment"`, `data-kind="dispute"`, `data-kind="statement"`, `data-kind="ledger"`)
	if res := admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {"10.00"}, "reason": {"x"}}); res.status != http.StatusConflict {
		t.Errorf("credit before settlement: %d, want 409", res.status)
	}

	app.tick(r.End().Add(time.Minute))
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.Transfers[0].State != store.TransferFrozen {
		t.Fatalf("payout during the dispute: %s, want frozen", s.Transfers[0].State)
	}
	payout := s.Transfers[0].Amount

	over := (r.AmountCents + 1).Decimal()
	if res := admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {over}, "reason": {"x"}}); res.status != http.StatusUnprocessableEntity {
		t.Errorf("credit above what was paid: %d, want 422", res.status)
	}
	if res := admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {"50.00"}}); res.status != http.StatusUnprocessableEntity {
		t.Errorf("decision without a reason: %d, want 422", res.status)
	}
	res = admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {"50.00"}, "reason": {"Partly substantiated: two of eight devices were A100s."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("grant: %d\n%s", res.status, res.body)
	}
	mustContain(t, admin.get(adminPath).body, "Credit of $50.00 granted and refunded")

	// Money: refunded once through the processor with the dispute's key; the
	// ledger balances; the provider's frozen payout shrank by the credit.
	var refunded market.Cents
	for _, a := range app.pay.refunds {
		refunded += a
	}
	if refunded != 5000 {
		t.Errorf("processor refunds = %d, want 5000", refunded)
	}
	es := app.ledger(r.ID)
	if err := market.CheckBalanced(es); err != nil {
		t.Error(err)
	}
	keys := map[string]market.Cents{}
	for _, e := range es {
		keys[e.IdempotencyKey] = e.Amount
	}
	if keys[market.DisputeKey(id, market.EntryRefund, 0)] != 5000 || keys[market.DisputeKey(id, market.EntryCredit, prov.userID())] != 5000 {
		t.Errorf("dispute ledger entries: %v", keys)
	}
	// The provider keeps what was paid less the credit, and the platform's
	// 10% is taken from that: the fee falls with the credit.
	kept := r.AmountCents - 5000
	fee := shareHalfAway(kept, 1000)
	if before := r.AmountCents - shareHalfAway(r.AmountCents, 1000); payout != before {
		t.Errorf("frozen payout before the credit %s, want %s", payout, before)
	}
	s, _ = app.db.FindSettlement(ctx, r.ID)
	if s.Transfers[0].Amount != kept-fee || s.Transfers[0].State != store.TransferHeld {
		t.Errorf("payout after the credit: %s %s, want %s and held for onboarding", s.Transfers[0].Amount, s.Transfers[0].State, kept-fee)
	}

	// Both parties see outcome and reason; the buyer sees the refund on the
	// statement and in the ledger.
	for _, c := range []*client{buyer, prov} {
		mustContain(t, c.get(disputePath).body, "a credit of $50.00", "two of eight devices were A100s")
		mustContain(t, c.get("/notifications").body, `data-kind="dispute_decided"`)
	}
	stmt := buyer.get(resPath + "/statement").body
	mustContain(t, stmt, `data-testid="statement-adjustment"`, "$50.00", "refunded", `data-testid="ledger-row" data-kind="refund"`)
	audit := admin.get("/admin/audit").body
	mustContain(t, audit, store.AuditDisputeDecide, "money.refund")
	if res := admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"reject"}, "reason": {"again"}}); res.status != http.StatusConflict {
		t.Errorf("deciding twice: %d, want 409", res.status)
	}

	// The provider finishes payout onboarding: the reduced payout is what
	// is transferred, recorded, notified and shown.
	if len(app.pay.transfers) != 0 {
		t.Fatalf("transfers before onboarding: %v", app.pay.transfers)
	}
	app.connectPayouts(prov)
	var transferred market.Cents
	for _, a := range app.pay.transfers {
		transferred += a
	}
	if len(app.pay.transfers) != 1 || transferred != kept-fee {
		t.Fatalf("processor transfers %v, want one of %s", app.pay.transfers, kept-fee)
	}
	es = app.ledger(r.ID)
	if sumKind(es, market.EntryTransfer) != kept-fee || sumKind(es, market.EntryFee)-sumKind(es, market.EntryFeeReversal) != fee {
		t.Errorf("ledger after the payout: %+v, want transfer %s and net fee %s", es, kept-fee, fee)
	}
	if err := market.CheckSettled(es, r.ID); err != nil {
		t.Error(err)
	}
	mustContain(t, prov.get("/notifications").body, `data-kind="payout_sent"`, "Payout of "+(kept-fee).String())
	pst := prov.get(fmt.Sprintf("/provider/bookings/%d/statement", r.ID)).body
	if got := testidText(pst, "statement-payout"); got != (kept - fee).String() {
		t.Errorf("provider's statement payout %q, want %s", got, kept-fee)
	}
	if got := testidText(pst, "statement-fee"); got != fee.String() {
		t.Errorf("provider's statement fee %q, want %s", got, fee)
	}
	mustContain(t, buyer.get("/notifications").body, `data-kind="refund_sent"`, "A refund of $50.00")
	if got := testidText(buyer.get(resPath+"/statement").body, "statement-refund"); got != "$50.00" {
		t.Errorf("buyer's statement refund %q, want $50.00", got)
	}
	requireReconciled(t, app.testApp)
}

// Every movement of money lands in the audit trail in the same transaction
// as its ledger row, and the provider hears of the booking and the payout.
func TestMoneyMovementsAreAudited(t *testing.T) {
	app := newBillingApp(t)
	_, buyer, prov := settledFlow(t, app, 0)
	entries, _, err := app.db.ListAudit(context.Background(), store.AuditFilter{Action: store.AuditMoneyPrefix})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Action] = true
	}
	for _, want := range []string{"money.charge", "money.credit", "money.refund", "money.fee", "money.transfer"} {
		if !got[want] {
			t.Errorf("no %s in the audit trail (have %v)", want, got)
		}
	}
	notes := prov.get("/notifications").body
	mustContain(t, notes, `data-kind="booking_made"`, `data-kind="payout_sent"`)
	// The provider reported the incident; the buyer is told.
	mustContain(t, buyer.get("/notifications").body, `data-kind="incident_reported"`)
	requireReconciled(t, app.testApp)
}

// The admin's form states the dispute's real maximum: what was paid less
// every refund on the payment, the seller's resale credit included. The
// seller's reservation is sold whole before it starts for its amount less
// 1,001¢; the platform keeps 10% of the price and refunds the rest to the
// seller, so at most amount − (price − fee) can still be credited.
func TestAdminDisputeFormMaximumCountsTheResaleCredit(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	seller := app.client()
	seller.signUp("seller@example.com", false)
	r := app.bookAndPay(seller)
	other := app.client()
	other.signUp("other@example.com", false)
	app.saveTestCard(other.userID(), "4242 4242 4242 4242")
	price := r.AmountCents - 1001
	l, err := app.handler.wf.ListRemainingTime(ctx, seller.userID(), r.ID, r.Start(), price)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := app.handler.wf.BuyResale(ctx, other.userID(), l.ID); err != nil {
		t.Fatal(err)
	}
	d, err := app.db.OpenDispute(ctx, seller.userID(), r.ID, market.DisputeCharge, "I was charged for time I sold.", app.clock.now())
	if err != nil {
		t.Fatal(err)
	}
	app.tick(r.End().Add(time.Minute))
	credit := price - shareHalfAway(price, 1000)
	limit := r.AmountCents - credit
	admin := app.adminClient("root@example.com")
	adminPath := fmt.Sprintf("/admin/disputes/%d", d.ID)
	mustContain(t, admin.get(adminPath).body, "At most "+limit.String()+" (")
	over := (limit + 1).Decimal()
	if res := admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {over}, "reason": {"x"}}); res.status != http.StatusUnprocessableEntity {
		t.Errorf("credit 1¢ above the maximum: %d, want 422", res.status)
	}
	requireReconciled(t, app.testApp)
}
