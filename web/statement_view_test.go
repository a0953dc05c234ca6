package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/workflow"
)

// svHalfAway is num/den of amount in cents, rounded half away from zero:
// the test's own statement of the marketplace's rounding rule.
func svHalfAway(amount market.Cents, num, den int64) market.Cents {
	n := int64(amount) * num
	return market.Cents((2*n + den) / (2 * den))
}

// svFigure is the text of the element with the test id, tags removed.
func svFigure(page, testID string) string {
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(testID) + `"[^>]*>(.*?)</(td|p|span)>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], ""))
}

func svWant(t *testing.T, who, page string, want map[string]string) {
	t.Helper()
	for id, w := range want {
		if got := svFigure(page, id); got != w {
			t.Errorf("%s statement %s = %q, want %q", who, id, got, w)
		}
	}
}

// svConnect has a provider finish the simulated payout onboarding.
func svConnect(t *testing.T, prov *client) {
	t.Helper()
	c := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{})
	if c.status != http.StatusSeeOther || !strings.HasPrefix(c.location, "/connect/local/") {
		t.Fatalf("connect: %d → %q\n%s", c.status, c.location, c.body)
	}
	path := strings.SplitN(c.location, "?", 2)[0]
	if d := prov.post(c.location, path, url.Values{}); d.status != http.StatusSeeOther {
		t.Fatalf("onboard: %d", d.status)
	}
	if d := prov.get("/provider/payouts/return"); d.status != http.StatusSeeOther {
		t.Fatalf("return: %d", d.status)
	}
}

func svReconciled(t *testing.T, app *billingApp) {
	t.Helper()
	diffs, err := app.handler.wf.Reconcile(context.Background(), workflow.ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range diffs {
		t.Errorf("reconcile: reservation %d: %s (ledger %q, processor %q)", d.ReservationID, d.What, d.Ledger, d.Processor)
	}
}

// svDispute has the buyer open a dispute on reservation id and an admin
// grant credit on it.
func svDispute(t *testing.T, app *billingApp, buyer *client, id int64, credit market.Cents) {
	t.Helper()
	resPath := fmt.Sprintf("/reservations/%d", id)
	res := buyer.post(resPath+"/disputes/new", resPath+"/disputes", url.Values{"reason": {"charge"},
		"statement": {"The network was degraded for longer than the provider reported."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("open dispute: %d\n%s", res.status, res.body)
	}
	disputeID := regexp.MustCompile(`\d+$`).FindString(res.location)
	admin := app.adminClient("root@example.com")
	adminPath := "/admin/disputes/" + disputeID
	res = admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {credit.Decimal()}, "reason": {"Partly substantiated."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("grant: %d\n%s", res.status, res.body)
	}
}

// svBooking books and pays the provider's offer and has the provider
// report a network degradation of 2 devices for 6 hours at 50%: an SLA
// credit of amount × (2 × 6 h) / (devices × duration) × 50%.
func svBooking(t *testing.T, app *billingApp) (market.Reservation, *client, *client, market.Cents) {
	t.Helper()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	if len(r.Pieces) != 1 || r.Pieces[0].ProviderID != prov.userID() {
		t.Fatalf("booked %+v, want one piece of provider %d", r.Pieces, prov.userID())
	}
	p := r.Pieces[0]
	app.tick(p.Start.Add(time.Hour))
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"network_degradation"}, "degradation": {"50"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(8 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"2"}, "note": {"Uplink flapping; ticket 77."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	sla := svHalfAway(r.AmountCents, 2*6*3600*5000, reserved*10000)
	return r, buyer, prov, sla
}

// A dispute credit on a held payout: both statements list it and add up to
// what was paid, and after onboarding the provider's statement shows the
// reduced payout that was actually transferred.
func TestStatementsAfterDisputeCreditOnHeldPayout(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	r, buyer, prov, sla := svBooking(t, app)
	app.tick(r.End().Add(time.Minute))
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil || s.State != store.SettlementWaiting || s.Transfers[0].State != store.TransferHeld {
		t.Fatalf("settlement before onboarding: %v %+v", err, s)
	}

	const credit = market.Cents(689)
	svDispute(t, app, buyer, r.ID, credit)

	// The figures, from the amount paid and the terms: 10% fee, half away
	// from zero, on what the provider keeps after the credit.
	paid := r.AmountCents
	kept := paid - sla
	feeBefore := svHalfAway(kept, 1000, 10000)
	feeAfter := svHalfAway(kept-credit, 1000, 10000)
	payout := kept - credit - feeAfter
	if paid != sla+credit+feeAfter+payout {
		t.Fatalf("the test's own figures do not add up")
	}

	buyerPage := buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body
	provPage := prov.get(fmt.Sprintf("/provider/bookings/%d/statement", r.ID)).body
	held := map[string]string{
		"statement-paid": paid.String(), "statement-sla-refund": sla.String(), "statement-dispute-credits": credit.String(),
		"statement-refund": (sla + credit).String(), "statement-fee": feeAfter.String(), "statement-payout": payout.String(),
		"adjustment-amount": credit.String(),
	}
	svWant(t, "buyer's", buyerPage, held)
	svWant(t, "buyer's", buyerPage, map[string]string{"adjustment-state": "refunded",
		"statement-check": fmt.Sprintf("%s refunded + %s platform fee + %s payout = %s paid.", sla+credit, feeAfter, payout, paid)})
	mustNotContain(t, buyerPage, `data-testid="statement-loss"`)
	svWant(t, "provider's", provPage, held)
	svWant(t, "provider's", provPage, map[string]string{
		"statement-dispute-taken": credit.String(), "adjustment-taken": credit.String(),
		"adjustment-fee-back": (feeBefore - feeAfter).String(), "adjustment-loss": "$0.00",
		"payout-state":    fmt.Sprintf("Payout of %s held until you connect payouts.", payout),
		"statement-check": fmt.Sprintf("%s paid = %s refunded + %s dispute credits taken + %s platform fee + %s payout.", paid, sla, credit, feeAfter, payout),
	})

	// Onboarding releases the payout: the transfer is the reduced amount,
	// and the provider's statement and ledger show it.
	svConnect(t, prov)
	app.tick(app.clock.now().Add(time.Minute))
	var transferred market.Cents
	for _, a := range app.pay.transfers {
		transferred += a
	}
	if len(app.pay.transfers) != 1 || transferred != payout {
		t.Fatalf("transfers %v, want one of %s", app.pay.transfers, payout)
	}
	provPage = prov.get(fmt.Sprintf("/provider/bookings/%d/statement", r.ID)).body
	svWant(t, "provider's", provPage, map[string]string{
		"statement-payout": payout.String(), "settlement-state": "settled",
		"payout-state": fmt.Sprintf("Payout of %s paid to your connected account.", payout),
	})
	mustContain(t, provPage, `data-kind="transfer"`, `data-testid="ledger-amount">`+payout.String()+`<`)
	buyerPage = buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body
	svWant(t, "buyer's", buyerPage, map[string]string{"statement-payout": payout.String(), "statement-refund": (sla + credit).String()})
	if es := app.ledger(r.ID); sumKind(es, market.EntryTransfer) != payout {
		t.Errorf("ledger transfers %s, want %s", sumKind(es, market.EntryTransfer), payout)
	}
	svReconciled(t, app)
}

// A credit after the payout was sent is borne by the marketplace: the
// provider's payout stays as transferred and both statements say so.
func TestStatementsAfterDisputeCreditOnPaidPayout(t *testing.T) {
	app := newBillingApp(t)
	r, buyer, prov, sla := svBooking(t, app)
	svConnect(t, prov)
	app.tick(r.End().Add(time.Minute))
	const credit = market.Cents(1234)
	svDispute(t, app, buyer, r.ID, credit)

	paid := r.AmountCents
	kept := paid - sla
	fee := svHalfAway(kept, 1000, 10000)
	payout := kept - fee
	if len(app.pay.transfers) != 1 {
		t.Fatalf("transfers %v, want one", app.pay.transfers)
	}
	for _, a := range app.pay.transfers {
		if a != payout {
			t.Fatalf("transferred %s, want %s", a, payout)
		}
	}
	buyerPage := buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body
	svWant(t, "buyer's", buyerPage, map[string]string{
		"statement-paid": paid.String(), "statement-refund": (sla + credit).String(), "statement-fee": fee.String(),
		"statement-payout": payout.String(), "statement-loss": credit.String(),
		"statement-check": fmt.Sprintf("%s refunded + %s platform fee + %s payout − %s borne by the marketplace = %s paid.", sla+credit, fee, payout, credit, paid),
	})
	provPage := prov.get(fmt.Sprintf("/provider/bookings/%d/statement", r.ID)).body
	svWant(t, "provider's", provPage, map[string]string{
		"statement-payout": payout.String(), "statement-fee": fee.String(), "statement-dispute-taken": "$0.00",
		"adjustment-amount": credit.String(), "adjustment-taken": "$0.00", "adjustment-fee-back": "$0.00", "adjustment-loss": credit.String(),
	})
	svReconciled(t, app)
}

// A settlement held up by a buyer's report says what it waits for, and
// until when, to the buyer, the provider and the admins.
func TestSettlementWaitingForAcknowledgementSaysSo(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	reported := p.Start.Add(3 * time.Hour)
	app.tick(reported)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"host_failure"},
		"start": {p.Start.Add(time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"1"}, "note": {"One device gone."}}
	if res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("buyer incident: %d\n%s", res.status, res.body)
	}
	app.tick(r.End().Add(time.Minute))
	if _, err := app.db.FindSettlement(context.Background(), r.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("settlement started with a report awaiting the provider: %v", err)
	}
	want := "Waiting for the provider&#39;s acknowledgement until " + formatTime(reported.Add(workflow.IncidentAckDeadline)) + "."
	mustContain(t, buyer.get(resPath).body, `data-testid="settlement-note"`, want)
	mustContain(t, buyer.get(resPath+"/statement").body, `data-testid="settlement-note"`, want)
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	mustContain(t, prov.get(booking).body, want, "Acknowledge the buyer")
	mustContain(t, prov.get(booking+"/statement").body, want)
	mustContain(t, prov.get("/provider/reservations").body, want)
	admin := app.adminClient("root@example.com")
	page := admin.get("/admin/reconciliation").body
	mustContain(t, page, want, fmt.Sprintf(`href="/admin/reservations/%d"`, r.ID))
	mustContain(t, admin.get("/admin/offers").body, `href="/admin/reconciliation"`)
}
