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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
	"github.com/gpumarket/gpumarket/workflow"
)

// testClock is a clock the billing tests move forward.
type testClock struct{ ns atomic.Int64 }

func (c *testClock) now() time.Time       { return time.Unix(0, c.ns.Load()).UTC() }
func (c *testClock) set(t time.Time)      { c.ns.Store(t.UnixNano()) }
func newTestClock(t time.Time) *testClock { c := &testClock{}; c.set(t); return c }

// countingLocal wraps the local processor: it counts the refunds and
// transfers that reached it and can fail the next refund or transfer calls,
// as a timeout the retrier tries again (retryable) or as a refusal it gives
// up on (permanent).
type countingLocal struct {
	*billing.Local
	mu            sync.Mutex
	refunds       map[string]market.Cents // by refund id
	transfers     map[string]market.Cents // by transfer id
	failRefunds   int
	failTransfers int
	permanent     bool
}

// failure is the error of a failed call: retryable unless permanent.
func (p *countingLocal) failure(op string) error {
	if p.permanent {
		return &billing.Error{Op: op, Retryable: false, Err: fmt.Errorf("simulated refusal")}
	}
	return &billing.Error{Op: op, Retryable: true, Err: fmt.Errorf("simulated timeout")}
}

func (p *countingLocal) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	p.mu.Lock()
	if p.failRefunds > 0 {
		p.failRefunds--
		p.mu.Unlock()
		return billing.Refund{}, p.failure("refund")
	}
	p.mu.Unlock()
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
		return billing.Transfer{}, p.failure("transfer")
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
	return newBillingAppWith(t, nil)
}

// newBillingAppWith is newBillingApp with the configuration changed by edit
// and the processor seen through wrap, if given.
func newBillingAppWith(t *testing.T, edit func(*Config), wrap ...func(*countingLocal) billing.Processor) *billingApp {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "web.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	clock := newTestClock(testNow)
	pay := &countingLocal{Local: billing.NewLocal(billing.LocalConfig{Store: db}), refunds: map[string]market.Cents{}, transfers: map[string]market.Cents{}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), Now: clock.now, PasswordCost: bcrypt.MinCost}
	if edit != nil {
		edit(&cfg)
	}
	var processor billing.Processor = pay
	for _, w := range wrap {
		processor = w(pay)
	}
	if cfg.Workflow == nil {
		cfg.Workflow, err = workflow.New(ctx, workflow.Config{Billing: processor, PlatformFeeBP: 1000, Now: cfg.Now, BaseURL: cfg.BaseURL,
			SessionKey: cfg.SessionKey, PasswordCost: cfg.PasswordCost,
			Metrics: cfg.Metrics, QuoteBudget: cfg.QuoteBudget, BroadSlots: cfg.BroadSlots}, db, log)
		if err != nil {
			t.Fatal(err)
		}
	}
	h, e, err := New(ctx, cfg, db, log)
	if err != nil {
		t.Fatal(err)
	}
	joinFeed(t, db, h)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &billingApp{testApp: &testApp{t: t, srv: srv, db: db, handler: h}, clock: clock, pay: pay}
}

// tick moves the clock to at and runs one round of the background loop's
// work there (hold expiry, lifecycle, settlement and its retrier, refunds).
func (a *billingApp) tick(at time.Time) {
	a.t.Helper()
	a.clock.set(at)
	a.handler.wf.Tick(context.Background(), at)
}

// requireReconciled runs the same check as `gpumarket reconcile` and fails
// the test on any difference, printing each.
func requireReconciled(t *testing.T, app *testApp) {
	t.Helper()
	diffs, err := app.handler.wf.Reconcile(context.Background(), workflow.ReconcileOptions{})
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, d := range diffs {
		t.Errorf("reconcile: reservation %d: %s (ledger %q, processor %q)", d.ReservationID, d.What, d.Ledger, d.Processor)
	}
}

// bookAndPay reserves the first quote for trainingQuery and pays it on the
// simulated page; it returns the reservation.
func (a *billingApp) bookAndPay(buyer *client) market.Reservation {
	a.t.Helper()
	return a.bookAndPayQuery(buyer, trainingQuery())
}

// bookAndPayQuery reserves the first quote for q and pays it on the
// simulated page; it returns the reservation.
func (a *billingApp) bookAndPayQuery(buyer *client, q url.Values) market.Reservation {
	a.t.Helper()
	reqJSON, sig := firstQuote(a.t, buyer.get("/requests?"+q.Encode()).body)
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})
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
	return a.ownOfferTerms(providerID, nil)
}

// ownOfferTerms is ownOffer with the copy's terms changed by edit (nil
// changes nothing) before it is listed.
func (a *billingApp) ownOfferTerms(providerID int64, edit func(*market.Offer)) market.Offer {
	a.t.Helper()
	ctx := context.Background()
	o := a.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	// Only the provider's copy stays listed.
	if err := a.db.SetOfferState(ctx, o.ProviderID, o.ID, market.OfferPaused, testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.wf.RefreshOffer(ctx, o.ID)
	o.ID, o.ProviderID = 0, providerID
	if edit != nil {
		edit(&o)
		if err := market.ValidateOffer(&o, testNow); err != nil {
			a.t.Fatal(err)
		}
	}
	stored, err := a.db.CreateOffer(ctx, o, testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, stored.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.wf.RefreshOffer(ctx, stored.ID)
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
	requireReconciled(t, app.testApp)
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
	app.connectPayouts(prov)

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

// connectPayouts has a signed-in provider connect payouts through the
// simulated onboarding.
func (a *billingApp) connectPayouts(prov *client) {
	a.t.Helper()
	c := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{})
	if c.status != http.StatusSeeOther || !strings.HasPrefix(c.location, "/connect/local/") {
		a.t.Fatalf("connect: %d → %q\n%s", c.status, c.location, c.body)
	}
	mustContain(a.t, prov.get(c.location).body, "TEST MODE")
	path := strings.SplitN(c.location, "?", 2)[0]
	if d := prov.post(c.location, path, url.Values{}); d.status != http.StatusSeeOther {
		a.t.Fatalf("onboard: %d", d.status)
	}
	if d := prov.get("/provider/payouts/return"); d.status != http.StatusSeeOther {
		a.t.Fatalf("return: %d", d.status)
	}
	mustContain(a.t, prov.get("/provider/reservations").body, "connected — payouts enabled")
}

// shareHalfAway is bp basis points of a non-negative amount, rounded to the
// cent half away from zero: the tests' own statement of the rounding rule,
// independent of market's.
func shareHalfAway(amount market.Cents, bp int) market.Cents {
	return market.Cents((int64(amount)*int64(bp) + 5000) / 10000)
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
	requireReconciled(t, app.testApp)
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
	if !s.NextAttemptAt.After(app.clock.now().Add(time.Second)) {
		t.Fatalf("next attempt at %s, no backoff after %s", s.NextAttemptAt, app.clock.now())
	}
	app.tick(app.clock.now().Add(time.Second))
	if s, _ := app.db.FindSettlement(ctx, id); s.State != store.SettlementPending || s.Attempts != 1 || len(app.pay.transfers) != 0 {
		t.Fatalf("retried before the backoff: %s, %d attempts, %d transfers", s.State, s.Attempts, len(app.pay.transfers))
	}
	app.tick(s.NextAttemptAt)
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
	requireReconciled(t, clean.testApp)
	requireReconciled(t, app.testApp)
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
	app.tick(incs[0].CreatedAt.Add(workflow.IncidentAckDeadline + time.Minute))
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
	requireReconciled(t, app.testApp)
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
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})
	if r.status != http.StatusSeeOther {
		a.t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}
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

// startCheckout has the buyer press Pay on a held reservation and returns
// the simulated checkout's id, without paying it.
func (a *billingApp) startCheckout(buyer *client, r market.Reservation) string {
	a.t.Helper()
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	res := buyer.post(resPath, resPath+"/pay", url.Values{})
	if res.status != http.StatusSeeOther || !strings.HasPrefix(res.location, "/pay/local/") {
		a.t.Fatalf("pay: %d → %q\n%s", res.status, res.location, res.body)
	}
	return strings.TrimPrefix(res.location, "/pay/local/")
}

// paidEvents completes a simulated checkout as the buyer would and returns
// the events the processor sends for it, checkout completed and payment
// succeeded, without applying them.
func (a *billingApp) paidEvents(checkoutID string) (completed, succeeded billing.Event) {
	a.t.Helper()
	evs, err := a.pay.CompleteCheckout(checkoutID, true, a.clock.now())
	if err != nil {
		a.t.Fatal(err)
	}
	for _, ev := range evs {
		switch ev.Type {
		case billing.EventCheckoutCompleted:
			completed = ev
		case billing.EventPaymentSucceeded:
			succeeded = ev
		}
	}
	if completed.ID == "" || succeeded.ID == "" || succeeded.PaymentIntentID == "" {
		a.t.Fatalf("checkout %s gave events %+v", checkoutID, evs)
	}
	return completed, succeeded
}

// apply applies one processor event in-process, as the local processor's
// pages do.
func (a *billingApp) apply(ev billing.Event) {
	a.t.Helper()
	if err := a.handler.wf.ApplyEvent(context.Background(), a.handler.log, ev); err != nil {
		a.t.Fatalf("apply %s %s: %v", ev.StripeType, ev.ID, err)
	}
}

var tagRe = regexp.MustCompile(`<[^>]*>`)

// testidText is the text (tags removed, trimmed) of the first element
// marked data-testid="id" on a page, "" when there is none.
func testidText(body, id string) string {
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>([\s\S]*?)</(td|p|span|strong|div|li)>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(tagRe.ReplaceAllString(m[1], ""))
}

func countKind(es []market.LedgerEntry, kind string) int {
	n := 0
	for _, e := range es {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// In local mode the public webhook believes nobody: events signed with the
// old built-in secret, any other secret or none are refused with 400 and
// change nothing (no payment, no dispute, no onboarding).
func TestWebhookRefusedInLocalMode(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 4, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("hook@example.com", false)
	ctx := context.Background()
	r := app.heldReservation(buyer)
	prov := app.client()
	prov.signUp("acct@example.com", true)
	if res := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{}); res.status != http.StatusSeeOther {
		t.Fatalf("connect: %d", res.status)
	}
	acct, err := app.db.FindPayoutAccount(ctx, prov.userID())
	if err != nil {
		t.Fatal(err)
	}

	forged := []struct {
		typ string
		obj map[string]any
	}{
		{"payment_intent.succeeded", paymentIntent(r, "pi_forged")},
		{"checkout.session.completed", map[string]any{"id": "cs_forged", "object": "checkout.session", "payment_intent": "pi_forged",
			"payment_status": "paid", "amount_total": int64(r.AmountCents), "currency": "usd", "client_reference_id": strconv.FormatInt(r.ID, 10)}},
		{"charge.dispute.created", map[string]any{"id": "dp_forged", "object": "dispute", "amount": int64(r.AmountCents), "currency": "usd",
			"payment_intent": "pi_forged", "charge": "ch_forged"}},
		{"account.updated", map[string]any{"id": acct.AccountID, "object": "account", "details_submitted": true,
			"charges_enabled": true, "payouts_enabled": true}},
	}
	for _, secret := range []string{"local_whsec", "whsec_test", ""} {
		for i, f := range forged {
			res := app.webhook(secret, fmt.Sprintf("evt_forged_%d", i), f.typ, f.obj)
			if res.status != http.StatusBadRequest {
				t.Errorf("%s signed with %q: %d, want 400", f.typ, secret, res.status)
			}
			mustContain(t, res.body, "accepts no webhook events")
		}
	}
	req, _ := http.NewRequest(http.MethodPost, app.srv.URL+"/webhooks/stripe", strings.NewReader(`{"id":"evt_x"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res := read(t, resp); res.status != http.StatusBadRequest {
		t.Errorf("missing signature: %d, want 400", res.status)
	}

	if got, err := app.db.FindReservation(ctx, r.ID); err != nil || got.State != market.ReservationHeld {
		t.Errorf("reservation after forged events: %v %s, want held", err, got.State)
	}
	if es := app.ledger(r.ID); len(es) != 0 {
		t.Errorf("ledger entries after forged events: %+v", es)
	}
	if _, err := app.db.FindPayment(ctx, r.ID); market.ErrorCode(err) != market.CodeNotFound {
		t.Errorf("a payment was recorded from a forged event: %v", err)
	}
	if ds, err := app.db.ListReservationDisputes(ctx, r.ID); err != nil || len(ds) != 0 {
		t.Errorf("disputes after forged events: %v %+v", err, ds)
	}
	if a, err := app.db.FindPayoutAccount(ctx, prov.userID()); err != nil || a.Onboarded() {
		t.Errorf("forged account event onboarded the provider: %v %+v", err, a)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body, `data-testid="pay"`, "Not paid.")
	requireReconciled(t, app.testApp)
}

// The processor's events, applied in-process: out of order and replayed
// they confirm a payment once; a payment after the hold is refunded in
// full; a chargeback opens one dispute and one chargeback entry however
// often it arrives; an older account event does not undo a newer one.
func TestProcessorEventsAppliedOnceInAnyOrder(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 4, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("hook@example.com", false)
	ctx := context.Background()

	r := app.heldReservation(buyer)
	completed, succeeded := app.paidEvents(app.startCheckout(buyer, r))
	if succeeded.AmountCents != r.AmountCents || succeeded.Currency != "usd" {
		t.Fatalf("payment event %s %s, want %s usd", succeeded.AmountCents, succeeded.Currency, r.AmountCents)
	}
	// The success first; then the failure of an earlier attempt; then the
	// checkout's completion; then the success again.
	app.apply(succeeded)
	app.apply(billing.Event{ID: "evt_fail_earlier", Type: billing.EventPaymentFailed, StripeType: "payment_intent.payment_failed",
		Created: succeeded.Created.Add(-time.Minute), ReservationID: r.ID, PaymentIntentID: succeeded.PaymentIntentID,
		AmountCents: r.AmountCents, Currency: "usd", FailureMessage: "Your card was declined."})
	app.apply(completed)
	app.apply(succeeded)
	got, _ := app.db.FindReservation(ctx, r.ID)
	p, err := app.db.FindPayment(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	es := app.ledger(r.ID)
	if got.State != market.ReservationConfirmed || p.Status != store.PaymentPaid || p.PaymentIntentID != succeeded.PaymentIntentID ||
		countKind(es, market.EntryCharge) != 1 || sumKind(es, market.EntryCharge) != r.AmountCents {
		t.Fatalf("after success, failure, completion and replay: %s %s %q, ledger %+v", got.State, p.Status, p.PaymentIntentID, es)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body, "Paid "+r.AmountCents.String())

	// A payment whose events arrive after the hold expired is refunded in
	// full: the buyer pays a minute before the hold ends, the processor's
	// events come after it.
	late := app.heldReservation(buyer)
	lateCheckout := app.startCheckout(buyer, late)
	app.clock.set(late.HoldExpiresAt.Add(-time.Minute))
	lateCompleted, lateSucceeded := app.paidEvents(lateCheckout)
	app.tick(late.HoldExpiresAt.Add(time.Minute))
	if got, _ := app.db.FindReservation(ctx, late.ID); got.State != market.ReservationExpired {
		t.Fatalf("late reservation %s after its hold, want expired", got.State)
	}
	app.apply(lateCompleted)
	app.apply(lateSucceeded)
	app.apply(lateSucceeded)
	p, _ = app.db.FindPayment(ctx, late.ID)
	es = app.ledger(late.ID)
	if p.Status != store.PaymentRefunded || countKind(es, market.EntryRefund) != 1 || sumKind(es, market.EntryRefund) != late.AmountCents {
		t.Fatalf("late payment: %s, ledger %+v", p.Status, es)
	}
	if err := market.CheckSettled(es, late.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := app.db.FindReservation(ctx, late.ID); got.State != market.ReservationExpired {
		t.Fatalf("late payment revived the reservation: %s", got.State)
	}
	var refunded market.Cents
	for _, a := range app.pay.refunds {
		refunded += a
	}
	if len(app.pay.refunds) != 1 || refunded != late.AmountCents {
		t.Fatalf("processor refunds %v, want one of %s", app.pay.refunds, late.AmountCents)
	}
	mustContain(t, buyer.get("/notifications").body, `data-kind="refund_sent"`, late.AmountCents.String())

	// A chargeback opens a dispute once, however often it is delivered; the
	// event names the payment, not the reservation.
	chargeback := billing.Event{ID: "evt_dp", Type: billing.EventDisputeCreated, StripeType: "charge.dispute.created", Created: app.clock.now(),
		PaymentIntentID: succeeded.PaymentIntentID, ChargeID: succeeded.ChargeID, DisputeID: "dp_1", AmountCents: r.AmountCents, Currency: "usd"}
	app.apply(chargeback)
	app.apply(chargeback)
	chargeback.ID = "evt_dp_again"
	app.apply(chargeback)
	ds, err := app.db.ListReservationDisputes(ctx, r.ID)
	if err != nil || len(ds) != 1 || ds[0].Source != store.DisputeSourceStripe || ds[0].StripeDisputeID != "dp_1" || ds[0].AmountCents != r.AmountCents {
		t.Fatalf("disputes %v %+v", err, ds)
	}
	es = app.ledger(r.ID)
	if countKind(es, market.EntryChargeback) != 1 || sumKind(es, market.EntryChargeback) != r.AmountCents {
		t.Fatalf("chargeback entries: %+v", es)
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
	app.apply(billing.Event{ID: "evt_acct_new", Type: billing.EventAccountUpdated, StripeType: "account.updated",
		Created: app.clock.now(), AccountID: acct.AccountID, DetailsSubmitted: true, ChargesEnabled: true, PayoutsEnabled: true})
	app.apply(billing.Event{ID: "evt_acct_old", Type: billing.EventAccountUpdated, StripeType: "account.updated",
		Created: app.clock.now().Add(-time.Hour), AccountID: acct.AccountID})
	if acct, _ := app.db.FindPayoutAccount(ctx, prov.userID()); !acct.Onboarded() {
		t.Fatal("an older account event undid onboarding")
	}
	requireReconciled(t, app.testApp)
}

// charge.refunded reports the processor's refund total for a payment;
// reconciliation compares it with the ledger's refunds. Replays and older
// totals change nothing; a total the ledger does not show is a difference.
func TestChargeRefundedEvent(t *testing.T) {
	app := newBillingApp(t)
	id, _, _ := settledFlow(t, app, 0)
	ctx := context.Background()
	p, err := app.db.FindPayment(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	refunded := sumKind(app.ledger(id), market.EntryRefund)
	if refunded == 0 || p.RefundedCents != 0 {
		t.Fatalf("before the event: ledger refunds %s, payment's refunded total %s", refunded, p.RefundedCents)
	}
	ev := billing.Event{ID: "evt_refunded", Type: billing.EventChargeRefunded, StripeType: "charge.refunded", Created: app.clock.now(),
		ReservationID: id, PaymentIntentID: p.PaymentIntentID, ChargeID: p.ChargeID, AmountCents: refunded, Currency: "usd"}
	app.apply(ev)
	app.apply(ev)
	older := ev
	older.ID, older.AmountCents, older.Created = "evt_refunded_older", refunded-100, ev.Created.Add(-time.Minute)
	app.apply(older)
	if p, _ := app.db.FindPayment(ctx, id); p.RefundedCents != refunded {
		t.Fatalf("refunded total %s after the event, a replay and an older total; want %s", p.RefundedCents, refunded)
	}
	requireReconciled(t, app.testApp)

	// A refund made outside the marketplace shows as a difference.
	outside := ev
	outside.ID, outside.AmountCents = "evt_refunded_outside", refunded+100
	app.apply(outside)
	diffs, err := app.handler.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(diffs) != 1 || diffs[0].ReservationID != id || diffs[0].What != "processor reports a different refund total" ||
		diffs[0].Ledger != refunded.String() || diffs[0].Processor != (refunded+100).String() {
		t.Fatalf("differences %+v, want the refund total alone", diffs)
	}
}
