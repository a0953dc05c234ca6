package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// testClock is a clock the billing tests move forward.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }

// countingLocal wraps the local processor: it counts the refunds and
// transfers that reached it and can fail the next transfer calls.
type countingLocal struct {
	*billing.Local
	mu            sync.Mutex
	refunds       map[string]market.Cents // by refund id
	transfers     map[string]market.Cents // by transfer id
	failTransfers int
}

func (p *countingLocal) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	r, err := p.Local.Refund(ctx, pi, amount, key)
	if err == nil {
		p.mu.Lock()
		p.refunds[r.ID] = r.Amount
		p.mu.Unlock()
	}
	return r, err
}

func (p *countingLocal) Transfer(ctx context.Context, acct string, amount market.Cents, group, key string) (billing.Transfer, error) {
	p.mu.Lock()
	if p.failTransfers > 0 {
		p.failTransfers--
		p.mu.Unlock()
		return billing.Transfer{}, &billing.Error{Op: "transfer", Retryable: true, Err: fmt.Errorf("simulated timeout")}
	}
	p.mu.Unlock()
	t, err := p.Local.Transfer(ctx, acct, amount, group, key)
	if err == nil {
		p.mu.Lock()
		p.transfers[t.ID] = t.Amount
		p.mu.Unlock()
	}
	return t, err
}

type billingApp struct {
	*testApp
	clock *testClock
	pay   *countingLocal
}

// newBillingApp is newTestApp with a movable clock, a 10% platform fee and
// a counting local processor.
func newBillingApp(t *testing.T) *billingApp {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "web.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := newTestClock(testNow)
	pay := &countingLocal{Local: billing.NewLocal(billing.LocalConfig{}), refunds: map[string]market.Cents{}, transfers: map[string]market.Cents{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, e, err := New(ctx, Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), Now: clock.now,
		Billing: pay, PlatformFeeBP: 1000}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &billingApp{testApp: &testApp{t: t, srv: srv, db: db, handler: h}, clock: clock, pay: pay}
}

// tick runs the background loop's lifecycle and billing steps at t.
func (a *billingApp) tick(at time.Time) {
	a.t.Helper()
	a.clock.set(at)
	ctx := context.Background()
	if _, err := a.db.AdvanceReservations(ctx, at); err != nil {
		a.t.Fatal(err)
	}
	a.handler.billingTick(ctx, at)
}

// bookAndPay reserves the first quote for trainingQuery and pays it on the
// simulated page; it returns the reservation.
func (a *billingApp) bookAndPay(buyer *client) market.Reservation {
	a.t.Helper()
	reqJSON, sig := firstQuote(a.t, buyer.get("/requests?"+trainingQuery().Encode()).body)
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "pieces": {sig}})
	if r.status != http.StatusSeeOther {
		a.t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}
	resPath := r.location
	id, _ := strconv.ParseInt(strings.TrimPrefix(resPath, "/reservations/"), 10, 64)
	page := buyer.get(resPath).body
	mustContain(a.t, page, `data-testid="pay"`, "payments are simulated")
	r = buyer.post(resPath, resPath+"/pay", url.Values{})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/pay/local/") {
		a.t.Fatalf("pay: %d → %q\n%s", r.status, r.location, r.body)
	}
	payPage := buyer.get(r.location)
	mustContain(a.t, payPage.body, "TEST MODE — simulated payment, no money moves", "Pay (simulated)")
	done := buyer.post(r.location, r.location, url.Values{"outcome": {"pay"}})
	if done.status != http.StatusSeeOther || done.location != resPath {
		a.t.Fatalf("simulated payment: %d → %q\n%s", done.status, done.location, done.body)
	}
	res, err := a.db.FindReservation(context.Background(), id)
	if err != nil {
		a.t.Fatal(err)
	}
	return res
}

func (a *billingApp) ledger(id int64) []market.LedgerEntry {
	a.t.Helper()
	es, err := a.db.ListLedger(context.Background(), id)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := market.CheckBalanced(es); err != nil {
		a.t.Fatal(err)
	}
	return es
}

func sumKind(es []market.LedgerEntry, kind string) market.Cents {
	var s market.Cents
	for _, e := range es {
		if e.Kind == kind {
			s += e.Amount
		}
	}
	return s
}

// ownOffer lists, for a signed-up provider, a copy of the offer the
// listing helper makes.
func (a *billingApp) ownOffer(providerID int64) market.Offer {
	a.t.Helper()
	ctx := context.Background()
	o := a.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	// Only the provider's copy stays listed.
	if err := a.db.SetOfferState(ctx, o.ProviderID, o.ID, market.OfferPaused, testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.refreshOffer(ctx, o.ID)
	o.ID, o.ProviderID = 0, providerID
	stored, err := a.db.CreateOffer(ctx, o, testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, stored.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.refreshOffer(ctx, stored.ID)
	return stored
}

func TestPayConfirmsAndWritesCharge(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("payer@example.com", false)
	r := app.bookAndPay(buyer)
	if r.State != market.ReservationConfirmed {
		t.Fatalf("state %s after payment, want confirmed", r.State)
	}
	es := app.ledger(r.ID)
	if sumKind(es, market.EntryCharge) != r.AmountCents || len(es) != 1 || !strings.HasPrefix(es[0].StripeRef, "local_pi_") {
		t.Fatalf("charge entries %+v for %s", es, r.AmountCents)
	}
	page := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	mustContain(t, page, "Paid $420.48", "confirmed")
	mustNotContain(t, page, `data-testid="pay"`)

	// Another buyer can neither pay, see the payment page, nor the statement.
	other := app.client()
	other.signUp("other@example.com", false)
	if r := other.post("/reservations", fmt.Sprintf("/reservations/%d/pay", r.ID), url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("another buyer paying: %d, want 404", r.status)
	}
	if r := other.get(fmt.Sprintf("/reservations/%d/statement", r.ID)); r.status != http.StatusNotFound {
		t.Errorf("another buyer's statement: %d, want 404", r.status)
	}
	p, err := app.db.FindPayment(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := other.get("/pay/local/" + p.CheckoutID); r.status != http.StatusNotFound {
		t.Errorf("another buyer's payment page: %d, want 404", r.status)
	}
	// Paying again is refused: already paid.
	if r := buyer.post(fmt.Sprintf("/reservations/%d", r.ID), fmt.Sprintf("/reservations/%d/pay", r.ID), url.Values{}); r.status != http.StatusConflict {
		t.Errorf("paying twice: %d, want 409", r.status)
	}
}

// settledFlow books and pays, has the provider connect payouts and report
// a host failure, ends the booking and runs the background steps; it
// returns the reservation id and the provider's client.
func settledFlow(t *testing.T, app *billingApp, failTransfers int) (int64, *client, *client) {
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	r := app.bookAndPay(buyer)
	if r.Pieces[0].ProviderID != prov.userID() {
		t.Fatalf("booked provider %d, want %d", r.Pieces[0].ProviderID, prov.userID())
	}
	// Connect payouts through the simulated onboarding.
	c := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{})
	if c.status != http.StatusSeeOther || !strings.HasPrefix(c.location, "/connect/local/") {
		t.Fatalf("connect: %d → %q\n%s", c.status, c.location, c.body)
	}
	mustContain(t, prov.get(c.location).body, "TEST MODE")
	path := strings.SplitN(c.location, "?", 2)[0]
	if d := prov.post(c.location, path, url.Values{}); d.status != http.StatusSeeOther {
		t.Fatalf("onboard: %d", d.status)
	}
	if d := prov.get("/provider/payouts/return"); d.status != http.StatusSeeOther {
		t.Fatalf("return: %d", d.status)
	}
	mustContain(t, prov.get("/provider/reservations").body, "connected — payouts enabled")

	p := r.Pieces[0]
	app.tick(p.Start.Add(time.Hour))
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"host_failure"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(8 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"4"}, "note": {"Node 1 PSU failed; ticket 4411."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}
	app.pay.failTransfers = failTransfers
	app.tick(p.End.Add(time.Minute))
	return r.ID, buyer, prov
}

func TestHostFailureSettlesWithMarketRefund(t *testing.T) {
	app := newBillingApp(t)
	id, buyer, prov := settledFlow(t, app, 0)
	ctx := context.Background()
	s, err := app.db.FindSettlement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	// The refund is exactly market.Settle's for the same inputs.
	r, _ := app.db.FindReservation(ctx, id)
	incs, _ := app.db.ListIncidents(ctx, id)
	o, _ := app.db.FindOfferByID(ctx, r.Pieces[0].OfferID)
	r.State = market.ReservationCompleted
	want, err := market.Settle(market.SettlementInput{Reservation: r, Terms: map[int64]market.SLATerms{o.Offer.ID: market.TermsOf(o.Offer)},
		Incidents: []market.Incident{incs[0].Incident}, PlatformFeeBP: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if s.State != store.SettlementDone || s.RefundCents != want.Refund || want.Refund == 0 {
		t.Fatalf("settlement %s refund %s, want done and %s", s.State, s.RefundCents, want.Refund)
	}
	es := app.ledger(id)
	if err := market.CheckSettled(es, id); err != nil {
		t.Fatal(err)
	}
	if sumKind(es, market.EntryRefund) != want.Refund || sumKind(es, market.EntryTransfer) != want.Payout || sumKind(es, market.EntryFee) != want.Fee {
		t.Fatalf("ledger %+v, want refund %s payout %s fee %s", es, want.Refund, want.Payout, want.Fee)
	}
	if r, _ := app.db.FindReservation(ctx, id); r.State != market.ReservationSettled {
		t.Fatalf("reservation %s, want settled", r.State)
	}
	st := buyer.get(fmt.Sprintf("/reservations/%d/statement", id)).body
	mustContain(t, st, want.Refund.String(), "Host failure, 4 of 8 devices", "pro-rata refund", "Uptime")
	pst := prov.get(fmt.Sprintf("/provider/bookings/%d/statement", id)).body
	mustContain(t, pst, want.Payout.String(), "paid to your connected account")
	if len(app.pay.refunds) != 1 || len(app.pay.transfers) != 1 {
		t.Fatalf("%d refunds and %d transfers reached the processor", len(app.pay.refunds), len(app.pay.transfers))
	}
	// Reconciliation finds nothing to report.
	diffs, err := Reconcile(ctx, app.db, app.handler.pay, ReconcileOptions{})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("reconcile: %v %+v", err, diffs)
	}
}

func TestSettlementInterruptedThenResumed(t *testing.T) {
	clean := newBillingApp(t)
	cleanID, _, _ := settledFlow(t, clean, 0)

	app := newBillingApp(t)
	id, buyer, _ := settledFlow(t, app, 1)
	ctx := context.Background()
	s, err := app.db.FindSettlement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != store.SettlementPending || !s.RefundDone || s.Attempts != 1 || s.LastError == "" || s.Transfers[0].State != store.TransferPending {
		t.Fatalf("after the failed transfer: %+v", s)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/reservations/%d", id)).body, "Settlement pending: retrying")
	// Before the backoff nothing is retried; after it, the retrier finishes.
	app.tick(app.clock.now().Add(time.Second))
	if s, _ := app.db.FindSettlement(ctx, id); s.State != store.SettlementPending {
		t.Fatalf("retried before the backoff: %s", s.State)
	}
	app.tick(app.clock.now().Add(backoff(1)))
	s, err = app.db.FindSettlement(ctx, id)
	if err != nil || s.State != store.SettlementDone {
		t.Fatalf("after resuming: %v %+v", err, s)
	}
	got, want := app.ledger(id), clean.ledger(cleanID)
	if len(got) != len(want) {
		t.Fatalf("%d entries, uninterrupted run has %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Kind != w.Kind || g.Amount != w.Amount || g.Debit != w.Debit || g.Credit != w.Credit || g.IdempotencyKey != w.IdempotencyKey || g.StripeRef != w.StripeRef {
			t.Errorf("entry %d: %+v, uninterrupted %+v", i, g, w)
		}
	}
	if len(app.pay.refunds) != 1 || len(app.pay.transfers) != 1 {
		t.Fatalf("%d refunds and %d transfers, want one each", len(app.pay.refunds), len(app.pay.transfers))
	}
}

func TestBuyerIncidentUnacknowledgedBecomesDispute(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("b2@example.com", false)
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	app.tick(p.Start.Add(time.Hour))
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"network_degradation"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(3 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"8"}, "note": {""}}
	res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", form)
	if res.status != http.StatusUnprocessableEntity {
		t.Fatalf("incident without evidence: %d, want 422", res.status)
	}
	mustContain(t, res.body, `data-testid="error-note"`, `value="8"`)
	form.Set("note", "iperf shows 2 Gbit/s instead of 100")
	if res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("buyer incident: %d\n%s", res.status, res.body)
	}
	mustContain(t, buyer.get(resPath).body, "Awaiting the provider&#39;s acknowledgement")

	// Another provider cannot report on this reservation.
	stranger := app.client()
	stranger.signUp("stranger@example.com", true)
	if res := stranger.post("/provider/reservations", fmt.Sprintf("/provider/bookings/%d/incidents", r.ID), form); res.status != http.StatusNotFound {
		t.Errorf("foreign provider reporting: %d, want 404", res.status)
	}
	if res := stranger.get(fmt.Sprintf("/provider/bookings/%d", r.ID)); res.status != http.StatusNotFound {
		t.Errorf("foreign provider's booking page: %d, want 404", res.status)
	}

	// The booking ends; settlement waits for the acknowledgement.
	app.tick(p.End.Add(time.Minute))
	ctx := context.Background()
	if _, err := app.db.FindSettlement(ctx, r.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Fatalf("settled before the deadline: %v", err)
	}
	incs, _ := app.db.ListIncidents(ctx, r.ID)
	app.tick(incs[0].CreatedAt.Add(incidentAckDeadline + time.Minute))
	ds, err := app.db.ListReservationDisputes(ctx, r.ID)
	if err != nil || len(ds) != 1 || ds[0].Source != store.DisputeSourceIncident || ds[0].Status != store.DisputeOpen || ds[0].IncidentID != incs[0].ID {
		t.Fatalf("disputes %v %+v", err, ds)
	}
	// Settlement went ahead without the report, with the payout frozen.
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil || s.RefundCents != 0 || s.Transfers[0].State != store.TransferFrozen || s.State != store.SettlementWaiting {
		t.Fatalf("settlement %v %+v", err, s)
	}
	if len(s.Statement.Pending) != 1 {
		t.Fatalf("pending incidents %v", s.Statement.Pending)
	}
	app.ledger(r.ID)
}

// webhook posts a signed event to the real route.
func (a *billingApp) webhook(secret, id, typ string, obj map[string]any) response {
	a.t.Helper()
	payload, header := billing.SignTestEvent(secret, id, typ, obj, time.Now())
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL+"/webhooks/stripe", bytes.NewReader(payload))
	req.Header.Set("Stripe-Signature", header)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	return read(a.t, resp)
}

// heldReservation books without paying.
func (a *billingApp) heldReservation(buyer *client) market.Reservation {
	a.t.Helper()
	reqJSON, sig := firstQuote(a.t, buyer.get("/requests?"+trainingQuery().Encode()).body)
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "pieces": {sig}})
	id, _ := strconv.ParseInt(strings.TrimPrefix(r.location, "/reservations/"), 10, 64)
	res, err := a.db.FindReservation(context.Background(), id)
	if err != nil {
		a.t.Fatal(err)
	}
	return res
}

func paymentIntent(r market.Reservation, pi string) map[string]any {
	return map[string]any{"id": pi, "object": "payment_intent", "amount": int64(r.AmountCents), "status": "succeeded",
		"metadata": map[string]string{"reservation_id": strconv.FormatInt(r.ID, 10)}, "transfer_group": market.TransferGroup(r.ID)}
}

func TestWebhook(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 4, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("hook@example.com", false)
	ctx := context.Background()
	const secret = "local_whsec"

	r := app.heldReservation(buyer)
	// A bad signature is refused and changes nothing.
	if res := app.webhook("wrong_secret", "evt_bad", "payment_intent.succeeded", paymentIntent(r, "pi_1")); res.status != http.StatusBadRequest {
		t.Fatalf("bad signature: %d", res.status)
	}
	req, _ := http.NewRequest(http.MethodPost, app.srv.URL+"/webhooks/stripe", strings.NewReader(`{"id":"evt_x"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("missing signature: %v %v", err, resp.StatusCode)
	}
	if got, _ := app.db.FindReservation(ctx, r.ID); got.State != market.ReservationHeld || len(app.ledger(r.ID)) != 0 {
		t.Fatalf("a refused webhook changed the reservation: %s", got.State)
	}

	// Out of order: the failure of an earlier attempt after the success
	// changes nothing; a replay of the success changes nothing either.
	if res := app.webhook(secret, "evt_ok", "payment_intent.succeeded", paymentIntent(r, "pi_1")); res.status != http.StatusOK {
		t.Fatalf("valid: %d %s", res.status, res.body)
	}
	failed := paymentIntent(r, "pi_1")
	failed["status"] = "requires_payment_method"
	if res := app.webhook(secret, "evt_fail", "payment_intent.payment_failed", failed); res.status != http.StatusOK {
		t.Fatalf("failure: %d", res.status)
	}
	if res := app.webhook(secret, "evt_ok", "payment_intent.succeeded", paymentIntent(r, "pi_1")); res.status != http.StatusOK {
		t.Fatalf("replay: %d", res.status)
	}
	got, _ := app.db.FindReservation(ctx, r.ID)
	p, _ := app.db.FindPayment(ctx, r.ID)
	if got.State != market.ReservationConfirmed || p.Status != store.PaymentPaid || sumKind(app.ledger(r.ID), market.EntryCharge) != r.AmountCents {
		t.Fatalf("after success, failure and replay: %s %s %s", got.State, p.Status, sumKind(app.ledger(r.ID), market.EntryCharge))
	}

	// A payment arriving after the hold expired is refunded in full.
	late := app.heldReservation(buyer)
	app.tick(late.HoldExpiresAt.Add(time.Minute))
	if res := app.webhook(secret, "evt_late", "payment_intent.succeeded", paymentIntent(late, "pi_late")); res.status != http.StatusOK {
		t.Fatalf("late: %d", res.status)
	}
	p, _ = app.db.FindPayment(ctx, late.ID)
	es := app.ledger(late.ID)
	if p.Status != store.PaymentRefunded || sumKind(es, market.EntryRefund) != late.AmountCents {
		t.Fatalf("late payment: %s, ledger %+v", p.Status, es)
	}
	if err := market.CheckSettled(es, late.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := app.db.FindReservation(ctx, late.ID); got.State == market.ReservationConfirmed {
		t.Fatalf("late payment revived the reservation: %s", got.State)
	}

	// A chargeback opens a dispute once, however often it is delivered.
	dispute := map[string]any{"id": "dp_1", "object": "dispute", "amount": int64(r.AmountCents), "payment_intent": "pi_1", "charge": "ch_1"}
	for _, id := range []string{"evt_dp", "evt_dp", "evt_dp_again"} {
		if res := app.webhook(secret, id, "charge.dispute.created", dispute); res.status != http.StatusOK {
			t.Fatalf("dispute: %d", res.status)
		}
	}
	if ds, _ := app.db.ListReservationDisputes(ctx, r.ID); len(ds) != 1 || ds[0].Source != store.DisputeSourceStripe {
		t.Fatalf("disputes %+v", ds)
	}

	// An older account event delivered after a newer one does not undo it.
	prov := app.client()
	prov.signUp("acct@example.com", true)
	if res := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{}); res.status != http.StatusSeeOther {
		t.Fatalf("connect: %d", res.status)
	}
	acct, err := app.db.FindPayoutAccount(ctx, prov.userID())
	if err != nil {
		t.Fatal(err)
	}
	if err := app.handler.applyEvent(ctx, app.handler.log, billing.Event{ID: "evt_acct_new", Type: billing.EventAccountUpdated, StripeType: "account.updated",
		Created: time.Now(), AccountID: acct.AccountID, DetailsSubmitted: true, PayoutsEnabled: true}); err != nil {
		t.Fatal(err)
	}
	if err := app.handler.applyEvent(ctx, app.handler.log, billing.Event{ID: "evt_acct_old", Type: billing.EventAccountUpdated, StripeType: "account.updated",
		Created: time.Now().Add(-time.Hour), AccountID: acct.AccountID}); err != nil {
		t.Fatal(err)
	}
	if acct, _ := app.db.FindPayoutAccount(ctx, prov.userID()); !acct.Onboarded() {
		t.Fatal("an older account event undid onboarding")
	}
}
