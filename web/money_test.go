package web

import (
	"context"
	"encoding/json"
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

// The tests here follow money through the paths people use: a provider
// acknowledging a buyer's report, an admin retrying a failed settlement or
// a failed dispute refund, the background loop settling a reservation, and
// a buyer cancelling a paid reservation. Expected figures come from the
// offer's terms (ownOffer: 8 devices at $2.19 an hour, 10% platform fee),
// computed here with shareHalfAway and plain integer arithmetic.

// notified reports whether a user has a notification of kind whose message
// contains text.
func (a *billingApp) notified(userID int64, kind, text string) bool {
	a.t.Helper()
	ns, err := a.db.ListNotifications(context.Background(), userID, 100)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, n := range ns {
		if n.Kind == kind && strings.Contains(n.Notice.Text(), text) {
			return true
		}
	}
	return false
}

// processorTotals sums what reached the processor.
func (a *billingApp) processorTotals() (refunds, transfers market.Cents) {
	a.pay.mu.Lock()
	defer a.pay.mu.Unlock()
	for _, v := range a.pay.refunds {
		refunds += v
	}
	for _, v := range a.pay.transfers {
		transfers += v
	}
	return refunds, transfers
}

// proRata is amount × part / whole rounded half away from zero, for
// non-negative values: the tests' statement of a pro-rata refund.
func proRata(amount market.Cents, part, whole int64) market.Cents {
	return market.Cents((int64(amount)*part*2 + whole) / (whole * 2))
}

// ownOfferAmount is what ownOffer's 8 devices cost for 24 hours at its
// $2.19 per device-hour: the amount every reservation here pays.
const ownOfferAmount = market.Cents(219 * 8 * 24)

func TestProviderAcknowledgesBuyerIncident(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	if r.AmountCents != ownOfferAmount {
		t.Fatalf("amount %s, want %s from the offer's terms", r.AmountCents, ownOfferAmount)
	}
	p := r.Pieces[0]
	app.tick(p.Start.Add(time.Hour))

	// The buyer reports a degraded network on all 8 devices for one hour.
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	degraded := time.Hour
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"network_degradation"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(2*time.Hour + degraded).Format(formTimeLayout)},
		"devices_affected": {"8"}, "note": {"iperf shows 2 Gbit/s instead of 100"}}
	if res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("buyer incident: %d\n%s", res.status, res.body)
	}
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil || len(incs) != 1 || incs[0].Acknowledged {
		t.Fatalf("incidents %v %+v", err, incs)
	}
	ackPath := fmt.Sprintf("/provider/incidents/%d/acknowledge", incs[0].ID)
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	mustContain(t, prov.get(booking).body, `data-testid="acknowledge"`, `action="`+ackPath+`"`)

	// Another provider, the buyer, and the owner naming an incident that
	// does not exist are all refused, and nothing changes.
	stranger := app.client()
	stranger.signUp("stranger@example.com", true)
	if res := stranger.post("/provider/reservations", ackPath, url.Values{}); res.status != http.StatusNotFound {
		t.Errorf("another provider acknowledging: %d, want 404", res.status)
	}
	if res := buyer.post(resPath, ackPath, url.Values{}); res.status != http.StatusForbidden {
		t.Errorf("the buyer acknowledging: %d, want 403", res.status)
	}
	if res := prov.post(booking, fmt.Sprintf("/provider/incidents/%d/acknowledge", incs[0].ID+1000), url.Values{}); res.status != http.StatusNotFound {
		t.Errorf("acknowledging a missing incident: %d, want 404", res.status)
	}
	if incs, _ := app.db.ListIncidents(ctx, r.ID); incs[0].Acknowledged {
		t.Fatal("a refused acknowledgement acknowledged the incident")
	}
	mustContain(t, buyer.get(resPath).body, "Awaiting the provider&#39;s acknowledgement")

	// The provider acknowledges; the report now counts.
	res := prov.post(booking, ackPath, url.Values{})
	if res.status != http.StatusSeeOther || res.location != booking {
		t.Fatalf("acknowledge: %d → %q\n%s", res.status, res.location, res.body)
	}
	if incs, _ := app.db.ListIncidents(ctx, r.ID); !incs[0].Acknowledged {
		t.Fatal("the incident is not acknowledged")
	}
	mustContain(t, buyer.get(resPath).body, `data-testid="incident-status">Applies<`)
	mustNotContain(t, prov.get(booking).body, `data-testid="acknowledge"`)

	// Settlement at the end credits 50% of the degraded device-hours'
	// share of the amount, with nothing waiting on the provider.
	app.tick(p.End.Add(time.Minute))
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	refund := proRata(r.AmountCents, 8*int64(degraded/time.Second)*5000, reserved*10000)
	kept := r.AmountCents - refund
	fee := shareHalfAway(kept, 1000)
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil || s.State != store.SettlementDone || s.RefundCents != refund {
		t.Fatalf("settlement %v %+v, want done with refund %s", err, s, refund)
	}
	es := app.ledger(r.ID)
	if sumKind(es, market.EntryRefund) != refund || sumKind(es, market.EntryFee) != fee || sumKind(es, market.EntryTransfer) != kept-fee {
		t.Fatalf("ledger %+v, want refund %s fee %s transfer %s", es, refund, fee, kept-fee)
	}
	if refunds, transfers := app.processorTotals(); refunds != refund || transfers != kept-fee {
		t.Fatalf("processor refunds %s transfers %s, want %s and %s", refunds, transfers, refund, kept-fee)
	}
	if !app.notified(r.BuyerID, store.NotifyRefundSent, refund.String()) || !app.notified(prov.userID(), store.NotifyPayoutSent, (kept-fee).String()) {
		t.Error("the buyer was not told of the refund or the provider of the payout")
	}
	requireReconciled(t, app.testApp)
}

func TestAdminRetriesFailedSettlement(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	app.pay.permanent = true
	id, _, prov := settledFlow(t, app, 1)
	s, err := app.db.FindSettlement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != store.SettlementFailed || !s.RefundDone || s.Transfers[0].State != store.TransferPending || len(app.pay.transfers) != 0 {
		t.Fatalf("after a refused transfer: %+v, %d transfers", s, len(app.pay.transfers))
	}
	payout := s.Transfers[0].Amount

	// Reconciliation reports the money owed; the admin page offers Retry.
	diffs, err := app.handler.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil || len(diffs) != 1 || diffs[0].ReservationID != id || diffs[0].What != "settlement failed: money owed has not moved" {
		t.Fatalf("reconcile %v %+v, want the failed settlement alone", err, diffs)
	}
	admin := app.adminClient("root@example.com")
	retryPath := fmt.Sprintf("/admin/settlements/%d/retry", id)
	page := admin.get("/admin/reconciliation").body
	mustContain(t, page, `data-testid="reconciliation-difference"`, "settlement failed", `action="`+retryPath+`"`, "simulated refusal")
	mustNotContain(t, page, `data-testid="reconciliation-clean"`)

	// Nobody else may retry; a settlement that has not failed cannot be.
	if res := prov.post("/provider/reservations", retryPath, url.Values{}); res.status != http.StatusForbidden {
		t.Errorf("the provider retrying: %d, want 403", res.status)
	}
	if res := admin.post("/admin/reconciliation", fmt.Sprintf("/admin/settlements/%d/retry", id+1000), url.Values{}); res.status != http.StatusConflict {
		t.Errorf("retrying a missing settlement: %d, want 409", res.status)
	}
	if s, _ := app.db.FindSettlement(ctx, id); s.State != store.SettlementFailed || len(app.pay.transfers) != 0 {
		t.Fatalf("refused retries changed the settlement: %s, %d transfers", s.State, len(app.pay.transfers))
	}

	// The admin retries once the processor accepts transfers again.
	res := admin.post("/admin/reconciliation", retryPath, url.Values{})
	if res.status != http.StatusSeeOther || res.location != "/admin/reconciliation" {
		t.Fatalf("retry: %d → %q\n%s", res.status, res.location, res.body)
	}
	s, err = app.db.FindSettlement(ctx, id)
	if err != nil || s.State != store.SettlementDone || s.Transfers[0].State != store.TransferDone {
		t.Fatalf("after the retry: %v %+v", err, s)
	}
	if r, _ := app.db.FindReservation(ctx, id); r.State != market.ReservationSettled {
		t.Errorf("reservation %s after the retry, want settled", r.State)
	}
	_, transfers := app.processorTotals()
	if len(app.pay.transfers) != 1 || transfers != payout || sumKind(app.ledger(id), market.EntryTransfer) != payout {
		t.Fatalf("transfers %v, ledger %s, want one of %s", app.pay.transfers, sumKind(app.ledger(id), market.EntryTransfer), payout)
	}
	if !app.notified(prov.userID(), store.NotifyPayoutSent, payout.String()) {
		t.Error("the provider was not told of the payout")
	}
	page = admin.get("/admin/reconciliation").body
	mustContain(t, page, `data-testid="reconciliation-clean"`)
	mustNotContain(t, page, retryPath)
	// A second retry is refused and moves nothing.
	if res := admin.post("/admin/reconciliation", retryPath, url.Values{}); res.status != http.StatusConflict {
		t.Errorf("retrying a done settlement: %d, want 409", res.status)
	}
	if len(app.pay.transfers) != 1 {
		t.Errorf("%d transfers after a second retry", len(app.pay.transfers))
	}
	requireReconciled(t, app.testApp)
}

func TestAdminRetriesDisputeRefund(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	res := buyer.post(resPath+"/disputes/new", resPath+"/disputes", url.Values{"reason": {"not_as_listed"},
		"statement": {"Two of the eight devices were A100s."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("open dispute: %d\n%s", res.status, res.body)
	}
	disputeID, _ := strconv.ParseInt(regexp.MustCompile(`\d+$`).FindString(res.location), 10, 64)
	app.tick(r.End().Add(time.Minute))
	if s, _ := app.db.FindSettlement(ctx, r.ID); s.Transfers[0].State != store.TransferFrozen {
		t.Fatalf("payout during the dispute: %s, want frozen", s.Transfers[0].State)
	}

	// The admin grants $30.00; the processor refuses the refund this once.
	const credit = market.Cents(3000)
	app.pay.failRefunds = 1
	admin := app.adminClient("root@example.com")
	adminPath := fmt.Sprintf("/admin/disputes/%d", disputeID)
	refundPath := adminPath + "/refund"
	res = admin.post(adminPath, adminPath+"/decide", url.Values{"decision": {"grant"}, "credit": {credit.Decimal()}, "reason": {"Two devices were not as listed."}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("grant: %d\n%s", res.status, res.body)
	}
	page := admin.get(adminPath).body
	mustContain(t, page, "the refund did not go through yet", `data-testid="retry-refund"`, `action="`+refundPath+`"`, "The refund of $30.00 is being made.")
	d, err := app.db.FindDispute(ctx, disputeID)
	if err != nil || d.Status != store.DisputeGranted || d.RefundState != store.DisputeRefundPending || d.CreditCents != credit {
		t.Fatalf("dispute %v %+v, want granted with its refund pending", err, d)
	}
	if refunds, _ := app.processorTotals(); refunds != 0 || sumKind(app.ledger(r.ID), market.EntryRefund) != 0 {
		t.Fatalf("refunded %s before the retry", refunds)
	}
	// Reconciliation reports the credit owed (and the buyer's account the
	// credit left open), on this reservation only.
	diffs, err := app.handler.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, found := fmt.Sprintf("dispute %d credit granted but not refunded yet", disputeID), false
	for _, d := range diffs {
		found = found || (d.What == want && d.Ledger == credit.String())
		if d.ReservationID != r.ID {
			t.Errorf("difference on reservation %d: %+v", d.ReservationID, d)
		}
	}
	if !found {
		t.Fatalf("reconcile %+v, want %q among them", diffs, want)
	}

	// The decision released the payout, less the credit and with the fee
	// on what the provider keeps.
	kept := r.AmountCents - credit
	fee := shareHalfAway(kept, 1000)
	if _, transfers := app.processorTotals(); transfers != kept-fee {
		t.Errorf("transferred %s, want %s", transfers, kept-fee)
	}

	// Only an admin may retry.
	if res := buyer.post(resPath, refundPath, url.Values{}); res.status != http.StatusForbidden {
		t.Errorf("the buyer retrying the refund: %d, want 403", res.status)
	}
	if d, _ := app.db.FindDispute(ctx, disputeID); d.RefundState != store.DisputeRefundPending || len(app.pay.refunds) != 0 {
		t.Fatalf("a refused retry changed the refund: %s, %d refunds", d.RefundState, len(app.pay.refunds))
	}

	// The admin retries from the page: refunded once, recorded, notified.
	res = admin.post(adminPath, refundPath, url.Values{})
	if res.status != http.StatusSeeOther || res.location != adminPath {
		t.Fatalf("retry refund: %d → %q\n%s", res.status, res.location, res.body)
	}
	page = admin.get(adminPath).body
	mustContain(t, page, "Refund made.", "Refunded $30.00 to the buyer")
	mustNotContain(t, page, `data-testid="retry-refund"`)
	refunds, _ := app.processorTotals()
	es := app.ledger(r.ID)
	if len(app.pay.refunds) != 1 || refunds != credit || sumKind(es, market.EntryRefund) != credit {
		t.Fatalf("refunds %v, ledger %+v, want one of %s", app.pay.refunds, es, credit)
	}
	keys := map[string]market.Cents{}
	for _, e := range es {
		keys[e.IdempotencyKey] = e.Amount
	}
	if keys[market.DisputeKey(disputeID, market.EntryRefund, 0)] != credit {
		t.Errorf("no refund entry under the dispute's key: %v", keys)
	}
	if !app.notified(r.BuyerID, store.NotifyRefundSent, credit.String()) {
		t.Error("the buyer was not told of the refund")
	}
	if sumKind(es, market.EntryTransfer) != kept-fee || sumKind(es, market.EntryFee)-sumKind(es, market.EntryFeeReversal) != fee {
		t.Errorf("ledger %+v, want transfer %s and net fee %s", es, kept-fee, fee)
	}
	if err := market.CheckSettled(es, r.ID); err != nil {
		t.Error(err)
	}
	// Nothing is left to refund: a second retry is refused.
	if res := admin.post(adminPath, refundPath, url.Values{}); res.status != http.StatusConflict {
		t.Errorf("retrying a made refund: %d, want 409", res.status)
	}
	if len(app.pay.refunds) != 1 {
		t.Errorf("%d refunds after a second retry", len(app.pay.refunds))
	}
	requireReconciled(t, app.testApp)
}

// The background loop's Tick alone takes a paid reservation from
// confirmed through active and completed to settled: the refund for a
// power curtailment first, then (after a timeout and the retrier's
// backoff) the provider's transfer.
func TestBackgroundLoopSettlesPaidReservation(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	if r.State != market.ReservationConfirmed || r.AmountCents != ownOfferAmount {
		t.Fatalf("booked %s for %s, want confirmed for %s", r.State, r.AmountCents, ownOfferAmount)
	}
	p := r.Pieces[0]
	state := func() market.ReservationState {
		t.Helper()
		got, err := app.db.FindReservation(ctx, r.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.State
	}

	app.tick(p.Start.Add(-time.Minute))
	if st := state(); st != market.ReservationConfirmed {
		t.Fatalf("before the start: %s, want confirmed", st)
	}
	app.tick(p.Start.Add(time.Hour))
	if st := state(); st != market.ReservationActive {
		t.Fatalf("after the start: %s, want active", st)
	}
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	curtailed, devices := 3*time.Hour, 2
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"power_curtailment"},
		"start": {p.Start.Add(4 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(4*time.Hour + curtailed).Format(formTimeLayout)},
		"devices_affected": {strconv.Itoa(devices)}, "note": {"Site curtailed power to two devices."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}

	// The end: completed, refund made; the transfer times out.
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	refund := proRata(r.AmountCents, int64(devices)*int64(curtailed/time.Second), reserved)
	kept := r.AmountCents - refund
	fee := shareHalfAway(kept, 1000)
	app.pay.failTransfers = 1
	app.tick(p.End.Add(time.Minute))
	if st := state(); st != market.ReservationCompleted {
		t.Fatalf("after the end with the transfer pending: %s, want completed", st)
	}
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil || s.State != store.SettlementPending || !s.RefundDone || s.RefundCents != refund || s.Transfers[0].State != store.TransferPending {
		t.Fatalf("settlement %v %+v, want pending with the refund of %s made", err, s, refund)
	}
	if refunds, transfers := app.processorTotals(); refunds != refund || transfers != 0 {
		t.Fatalf("processor refunds %s transfers %s, want %s and none", refunds, transfers, refund)
	}
	// The retrier finishes at its next attempt.
	app.tick(s.NextAttemptAt)
	if st := state(); st != market.ReservationSettled {
		t.Fatalf("after the retry: %s, want settled", st)
	}
	refunds, transfers := app.processorTotals()
	if len(app.pay.refunds) != 1 || len(app.pay.transfers) != 1 || refunds != refund || transfers != kept-fee {
		t.Fatalf("processor %v %v, want one refund of %s and one transfer of %s", app.pay.refunds, app.pay.transfers, refund, kept-fee)
	}
	es := app.ledger(r.ID)
	if sumKind(es, market.EntryRefund) != refund || sumKind(es, market.EntryFee) != fee || sumKind(es, market.EntryTransfer) != kept-fee {
		t.Fatalf("ledger %+v, want refund %s fee %s transfer %s", es, refund, fee, kept-fee)
	}
	if err := market.CheckSettled(es, r.ID); err != nil {
		t.Fatal(err)
	}
	if !app.notified(r.BuyerID, store.NotifyRefundSent, refund.String()) || !app.notified(prov.userID(), store.NotifyPayoutSent, (kept-fee).String()) {
		t.Error("the buyer was not told of the refund or the provider of the payout")
	}
	// Further rounds change nothing.
	app.tick(s.NextAttemptAt.Add(time.Hour))
	if len(app.pay.refunds) != 1 || len(app.pay.transfers) != 1 || len(app.ledger(r.ID)) != len(es) {
		t.Fatalf("a later round moved money again")
	}
	requireReconciled(t, app.testApp)
}

// A paid reservation cancelled through the browser or the API, outside the
// offer's last FreeCancelHours (free) or inside them (CancelFeeBP of the
// amount), is refunded the amount less the fee at once; the provider is
// paid the fee less the platform's share of it; both are told. 21.51% of
// $420.48 is $90.445248, a fee of $90.45 (rounded up), whose 10% is $9.045,
// a platform fee of $9.05 only when halves round away from zero.
func TestCancelPaidReservation(t *testing.T) {
	const freeHours, feeBP = 24, 2151
	for _, tc := range []struct {
		name   string
		api    bool
		before time.Duration // cancelled this long before the start
	}{
		{"browser, free period", false, (freeHours + 1) * time.Hour},
		{"browser, with fee", false, (freeHours - 1) * time.Hour},
		{"api, free period", true, (freeHours + 1) * time.Hour},
		{"api, with fee", true, (freeHours - 1) * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newBillingApp(t)
			ctx := context.Background()
			prov := app.client()
			prov.signUp("host@example.com", true)
			app.ownOfferTerms(prov.userID(), func(o *market.Offer) { o.FreeCancelHours, o.CancelFeeBP = freeHours, feeBP })
			app.connectPayouts(prov)
			buyer := app.client()
			buyer.signUp("buyer@example.com", false)
			q := trainingQuery()
			q.Set("constraints.earliest_start", "2026-12-03T10:00")
			q.Set("constraints.deadline", "2026-12-10T10:00")
			r := app.bookAndPayQuery(buyer, q)
			if r.State != market.ReservationConfirmed || r.AmountCents != ownOfferAmount {
				t.Fatalf("booked %s for %s, want confirmed for %s", r.State, r.AmountCents, ownOfferAmount)
			}
			start := r.Start()
			if !start.Add(-tc.before).After(testNow) {
				t.Fatalf("start %s is too soon to cancel %s before it", start, tc.before)
			}
			var fee market.Cents
			if tc.before < freeHours*time.Hour {
				fee = shareHalfAway(r.AmountCents, feeBP)
			}
			refund, platform := r.AmountCents-fee, shareHalfAway(fee, 1000)
			if fee != 0 && (fee != 9045 || platform != 905) {
				t.Fatalf("the test's arithmetic: fee %s platform fee %s, want $90.45 and $9.05", fee, platform)
			}
			payout := fee - platform
			app.clock.set(start.Add(-tc.before))

			resPath := fmt.Sprintf("/reservations/%d", r.ID)
			var token string
			if tc.api {
				token = buyer.createToken("ci", "write")
				res := app.apiCall(http.MethodPost, "/api/v1/reservations/"+itoa(r.ID)+"/cancel", token, "")
				var got apiReservation
				if res.status != http.StatusOK || json.Unmarshal([]byte(res.body), &got) != nil {
					t.Fatalf("API cancel: %d %s", res.status, res.body)
				}
				if got.State != string(market.ReservationCancelled) || got.CancelFeeCents != fee {
					t.Fatalf("API cancel answered %+v, want cancelled with fee %s", got, fee)
				}
			} else {
				res := buyer.post(resPath, resPath+"/cancel", url.Values{})
				if res.status != http.StatusSeeOther || res.location != resPath {
					t.Fatalf("cancel: %d → %q\n%s", res.status, res.location, res.body)
				}
				page := buyer.get(resPath).body
				if fee > 0 {
					mustContain(t, page, "A "+fee.String()+" cancellation fee applies", "; "+refund.String()+" is refunded to you.")
				} else {
					mustContain(t, page, "Reservation cancelled; the capacity is released and "+refund.String()+" is refunded to you.")
				}
			}

			got, err := app.db.FindReservation(ctx, r.ID)
			if err != nil || got.State != market.ReservationCancelled || got.CancelFeeCents != fee {
				t.Fatalf("reservation %v %s fee %s, want cancelled with fee %s", err, got.State, got.CancelFeeCents, fee)
			}
			s, err := app.db.FindSettlement(ctx, r.ID)
			if err != nil || s.State != store.SettlementDone || !s.RefundDone || s.RefundCents != refund {
				t.Fatalf("settlement %v %+v, want done with refund %s", err, s, refund)
			}
			refunds, transfers := app.processorTotals()
			wantTransfers := 0
			if payout > 0 {
				wantTransfers = 1
			}
			if len(app.pay.refunds) != 1 || refunds != refund || len(app.pay.transfers) != wantTransfers || transfers != payout {
				t.Fatalf("processor refunds %v transfers %v, want one refund of %s and transfers of %s", app.pay.refunds, app.pay.transfers, refund, payout)
			}
			es := app.ledger(r.ID)
			if sumKind(es, market.EntryRefund) != refund || sumKind(es, market.EntryTransfer) != payout ||
				sumKind(es, market.EntryFee)-sumKind(es, market.EntryFeeReversal) != platform {
				t.Fatalf("ledger %+v, want refund %s transfer %s platform fee %s", es, refund, payout, platform)
			}
			if err := market.CheckSettled(es, r.ID); err != nil {
				t.Fatal(err)
			}

			// Both parties are told.
			if !app.notified(r.BuyerID, store.NotifyRefundSent, "A refund of "+refund.String()) {
				t.Errorf("the buyer was not told of the refund of %s", refund)
			}
			if fee > 0 {
				if !app.notified(prov.userID(), store.NotifyBookingCancelled, fmt.Sprintf("You keep %s of cancellation fees: %s after the platform fee", fee, payout)) {
					t.Errorf("the provider was not told of the fee %s and payout %s", fee, payout)
				}
				if !app.notified(prov.userID(), store.NotifyPayoutSent, "Payout of "+payout.String()) {
					t.Errorf("the provider was not told of the payout of %s", payout)
				}
			} else if !app.notified(prov.userID(), store.NotifyBookingCancelled, "free of charge") {
				t.Error("the provider was not told of the free cancellation")
			}

			// Cancelling again is refused and moves nothing.
			if tc.api {
				if res := app.apiCall(http.MethodPost, "/api/v1/reservations/"+itoa(r.ID)+"/cancel", token, ""); res.status != http.StatusConflict {
					t.Errorf("API cancel again: %d, want 409", res.status)
				}
			} else if res := buyer.post(resPath, resPath+"/cancel", url.Values{}); res.status != http.StatusConflict {
				t.Errorf("cancel again: %d, want 409", res.status)
			}
			if len(app.pay.refunds) != 1 || len(app.pay.transfers) != wantTransfers || len(app.ledger(r.ID)) != len(es) {
				t.Error("a second cancellation moved money")
			}
			requireReconciled(t, app.testApp)
		})
	}
}
