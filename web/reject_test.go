package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// rejectApp lists a provider's offer with a 30-minute acceptance period and
// returns a signed-up buyer with a paid booking of it.
func rejectApp(t *testing.T) (*billingApp, *client, market.Reservation) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOfferTerms(prov.userID(), func(o *market.Offer) { o.RejectMinutes = 30 })
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	if r.Pieces[0].RejectMinutes != 30 {
		t.Fatalf("the piece froze %d minutes", r.Pieces[0].RejectMinutes)
	}
	return app, buyer, r
}

// TestRejectRentalInAcceptancePeriod: before the start the page says when
// rejection opens; in the first 30 minutes the buyer confirms on a page (no
// JavaScript); with no failed acceptance test or measured outage the
// provider is paid the minutes used (at least 10) and the rest is refunded
// through the processor; the books reconcile.
func TestRejectRentalInAcceptancePeriod(t *testing.T) {
	app, buyer, r := rejectApp(t)
	path := fmt.Sprintf("/reservations/%d", r.ID)
	start := r.Start()

	page := buyer.get(path).body
	mustContain(t, page, `data-testid="reject-panel"`, "Once it starts at "+formatTime(start), "until "+formatTime(start.Add(30*time.Minute)),
		"You may reject the rental within the first 30 minutes of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least 10).")
	mustNotContain(t, page, `data-testid="reject-reservation"`)
	if got := buyer.get(path + "/reject"); got.status != http.StatusConflict || !strings.Contains(got.body, "has not started yet") {
		t.Fatalf("confirmation before the start: %d", got.status)
	}

	app.tick(start.Add(5 * time.Minute))
	page = buyer.get(path).body
	mustContain(t, page, `data-testid="reject-reservation"`, "until <strong>"+formatTime(start.Add(30*time.Minute))+"</strong>",
		"No failed acceptance test or measured outage")
	// No failed acceptance test, no measured outage: the buyer pays for the
	// 10-minute minimum of the 24-hour piece, rounded half up.
	charge := market.Cents((int64(r.AmountCents)*10*2 + 24*60) / (2 * 24 * 60))
	refund := r.AmountCents - charge
	confirm := buyer.get(path + "/reject")
	if confirm.status != http.StatusOK {
		t.Fatalf("confirmation: %d", confirm.status)
	}
	if got := testidValue(t, confirm.body, "reject-refund"); got != refund.String() {
		t.Fatalf("the confirmation refunds %q, want %s", got, refund)
	}

	// Without the session's CSRF token: refused, nothing changes.
	if got := buyer.postRaw(path+"/reject", url.Values{"reason": {"x"}}); got.status != http.StatusForbidden {
		t.Fatalf("without CSRF: %d", got.status)
	}
	// Another buyer cannot even see it.
	other := app.client()
	other.signUp("other@example.com", false)
	if got := other.post("/reservations", path+"/reject", url.Values{}); got.status != http.StatusNotFound {
		t.Fatalf("another buyer's rejection: %d", got.status)
	}
	// A bad reason: the page again, 422, the input kept, the message by the field.
	long := strings.Repeat("x", market.MaxRejectReason+1)
	bad := buyer.post(path+"/reject", path+"/reject", url.Values{"reason": {long}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("a long reason: %d", bad.status)
	}
	mustContain(t, bad.body, `data-testid="error-reason"`, "Keep the reason under 1000 characters.", long)
	if got, _ := app.db.FindReservation(context.Background(), r.ID); got.State != market.ReservationActive {
		t.Fatalf("state after refusals: %s", got.State)
	}

	done := buyer.post(path+"/reject", path+"/reject", url.Values{"reason": {"Acceptance test 40% short"}})
	if done.status != http.StatusSeeOther || done.location != path {
		t.Fatalf("reject: %d → %q\n%s", done.status, done.location, done.body)
	}
	page = buyer.get(path).body
	mustContain(t, page, "Rental rejected. "+refund.String()+" of the "+r.AmountCents.String()+" you paid is refunded to you",
		`data-testid="reject-closed"`, "You rejected this rental on "+formatTime(start.Add(5*time.Minute)))
	mustNotContain(t, page, `data-testid="reject-reservation"`)
	// Its badge says rejected, on its page and in the buyer's list.
	if got := testidValue(t, page, "reservation-state"); got != "rejected" {
		t.Fatalf("the rejected rental's badge %q, want rejected", got)
	}
	if got := testidValue(t, buyer.get("/reservations").body, "reservation-state"); got != "rejected" {
		t.Fatalf("the list's badge %q, want rejected", got)
	}
	es := app.ledger(r.ID)
	if sumKind(es, market.EntryRefund) != refund || sumKind(es, market.EntryTransfer)+sumKind(es, market.EntryFee) != charge {
		t.Fatalf("ledger after the rejection %+v", es)
	}
	if len(app.pay.refunds) != 1 {
		t.Fatalf("processor refunds %+v", app.pay.refunds)
	}
	for _, amount := range app.pay.refunds {
		if amount != refund {
			t.Fatalf("processor refunded %s, want %s", amount, refund)
		}
	}
	// The statement says what happened.
	st := buyer.get(path + "/statement").body
	mustContain(t, st, "You rejected this rental", "within its acceptance period", "the minutes used (at least 10) are paid")
	app.tick(r.End().Add(time.Hour))
	requireReconciled(t, app.testApp)
}

// TestRejectTooLate: at the end of the acceptance period the page and the
// form say so (409); nothing is refunded.
func TestRejectTooLate(t *testing.T) {
	app, buyer, r := rejectApp(t)
	path := fmt.Sprintf("/reservations/%d", r.ID)
	app.tick(r.Start().Add(10 * time.Minute))
	csrfFrom := path + "/reject"
	token := buyer.csrf(csrfFrom)
	app.tick(r.Start().Add(30 * time.Minute))
	got := buyer.postRaw(path+"/reject", url.Values{"_csrf": {token}})
	if got.status != http.StatusConflict {
		t.Fatalf("too late: %d", got.status)
	}
	mustContain(t, got.body, `data-testid="reject-message"`, "Too late to reject: the acceptance period ended at "+formatTime(r.Start().Add(30*time.Minute)))
	mustNotContain(t, got.body, `data-testid="confirm-reject"`)
	page := buyer.get(path).body
	mustContain(t, page, `data-testid="reject-closed"`, "Too late to reject")
	if res, _ := app.db.FindReservation(context.Background(), r.ID); res.State != market.ReservationActive {
		t.Fatalf("state %s", res.State)
	}
	if len(app.pay.refunds) != 0 {
		t.Fatalf("refunds %+v", app.pay.refunds)
	}
	requireReconciled(t, app.testApp)
}

// TestAPIRejectReservation: the API rejects like the page, for the token's
// owner only, and says when too late.
func TestAPIRejectReservation(t *testing.T) {
	app, buyer, r := rejectApp(t)
	token := buyer.createToken("ci", "write")
	path := fmt.Sprintf("/api/v1/reservations/%d", r.ID)
	got := app.apiCall(http.MethodGet, path, token, "")
	var res struct {
		State       string     `json:"state"`
		RejectUntil *time.Time `json:"reject_until"`
		RejectedAt  *time.Time `json:"rejected_at"`
	}
	if err := json.Unmarshal([]byte(got.body), &res); err != nil || res.RejectUntil == nil || !res.RejectUntil.Equal(r.Start().Add(30*time.Minute)) {
		t.Fatalf("reservation %s: %v", got.body, err)
	}
	other := app.client()
	other.signUp("other@example.com", false)
	otherToken := other.createToken("ci", "write")
	app.clock.set(r.Start().Add(time.Minute))
	if got := app.apiCall(http.MethodPost, path+"/reject", otherToken, ""); got.status != http.StatusNotFound {
		t.Fatalf("another's token: %d %s", got.status, got.body)
	}
	if got := app.apiCall(http.MethodPost, path+"/reject", token, `{"reason": 5}`); got.status != http.StatusUnprocessableEntity && got.status != http.StatusBadRequest {
		t.Fatalf("a bad body: %d %s", got.status, got.body)
	}
	got = app.apiCall(http.MethodPost, path+"/reject", token, `{"reason":"GPU 3 missing"}`)
	if got.status != http.StatusOK {
		t.Fatalf("reject: %d %s", got.status, got.body)
	}
	res.RejectedAt = nil
	if err := json.Unmarshal([]byte(got.body), &res); err != nil || res.State != "cancelled" || res.RejectedAt == nil || !res.RejectedAt.Equal(r.Start().Add(time.Minute)) {
		t.Fatalf("rejected: %s %v", got.body, err)
	}
	again := app.apiCall(http.MethodPost, path+"/reject", token, "")
	if again.status != http.StatusConflict || !strings.Contains(again.body, "cannot be rejected") {
		t.Fatalf("again: %d %s", again.status, again.body)
	}
	s, err := app.db.FindSettlement(context.Background(), r.ID)
	// One minute in, unfounded: the 10-minute minimum of the 24 hours is paid.
	charge := market.Cents((int64(r.AmountCents)*10*2 + 24*60) / (2 * 24 * 60))
	if err != nil || !s.RefundDone || s.State != store.SettlementDone || s.RefundCents != r.AmountCents-charge {
		t.Fatalf("settlement %+v %v", s, err)
	}
	requireReconciled(t, app.testApp)
}

// TestUnfoundedRejectionsAreLimited: a buyer who keeps booking, paying and
// rejecting with no failed acceptance test or measured outage pays the
// minutes used each time, and after market.RejectLimit such rejections in
// 7 days the next is refused (409, with why); the admins see the counts
// per buyer and per provider; the books reconcile.
func TestUnfoundedRejectionsAreLimited(t *testing.T) {
	app, buyer, first := rejectApp(t)
	r := first
	for i := 0; i <= market.RejectLimit; i++ {
		if i > 0 {
			q := trainingQuery()
			q.Set("constraints.earliest_start", app.clock.now().Add(time.Hour).Format("2006-01-02T15:04"))
			r = app.bookAndPayQuery(buyer, q)
		}
		app.tick(r.Start().Add(5 * time.Minute))
		path := fmt.Sprintf("/reservations/%d", r.ID)
		got := buyer.post(path+"/reject", path+"/reject", url.Values{"reason": {"changed my mind"}})
		if i < market.RejectLimit {
			if got.status != http.StatusSeeOther {
				t.Fatalf("rejection %d: %d\n%.2000s", i+1, got.status, got.body)
			}
			charge := market.Cents((int64(r.AmountCents)*10*2 + 24*60) / (2 * 24 * 60))
			if refund := sumKind(app.ledger(r.ID), market.EntryRefund); refund != r.AmountCents-charge {
				t.Fatalf("rejection %d refunded %s, want %s", i+1, refund, r.AmountCents-charge)
			}
			continue
		}
		if got.status != http.StatusConflict {
			t.Fatalf("rejection %d: %d, want 409", i+1, got.status)
		}
		mustContain(t, got.body, `data-testid="reject-message"`, "You have rejected 3 rentals in the last 7 days without a failed acceptance test or a measured outage, the most allowed.")
		if res, _ := app.db.FindReservation(context.Background(), r.ID); res.State != market.ReservationActive {
			t.Fatalf("the refused rejection changed the rental: %s", res.State)
		}
	}
	admin := app.adminClient("root@example.com")
	page := admin.get("/admin/providers").body
	mustContain(t, page, `data-testid="provider-rejections">3 (3 unfounded)`, `data-testid="buyer-rejections-count">3 (3 unfounded)`,
		"further unfounded rejections refused")
	app.tick(r.End().Add(time.Hour))
	requireReconciled(t, app.testApp)
}
