package web

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/billing/stripemock"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/store/pgtest"
	"github.com/gpumarket/gpumarket/workflow"
)

// The Stripe path end to end through the web layer: a server configured
// with a Stripe key whose API calls go to stripe-mock, a buyer paying
// through Checkout, the events Stripe would send delivered signed to the
// real webhook route, settlement making a refund and a transfer through
// stripe-go, and reconciliation against what was created.

// stripeFlowSecret is the webhook endpoint secret of the server under test.
const stripeFlowSecret = "whsec_stripe_flow_test"

// stripeCall is one HTTP request stripe-go sent to stripe-mock.
type stripeCall struct {
	Method, Path, IdempotencyKey string
	Form                         url.Values
}

// stripeWire is the HTTP transport of the server's Stripe client: it keeps
// every request on its way to stripe-mock, so the test can check what was
// really encoded and sent.
type stripeWire struct {
	mu    sync.Mutex
	calls []stripeCall
}

func (w *stripeWire) RoundTrip(req *http.Request) (*http.Response, error) {
	var body []byte
	if req.Body != nil {
		body, _ = io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	form, _ := url.ParseQuery(string(body))
	if req.Method == http.MethodGet {
		form = req.URL.Query()
	}
	w.mu.Lock()
	w.calls = append(w.calls, stripeCall{req.Method, req.URL.Path, req.Header.Get("Idempotency-Key"), form})
	w.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// to returns the requests sent with method to path.
func (w *stripeWire) to(method, path string) []stripeCall {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []stripeCall
	for _, c := range w.calls {
		if c.Method == method && c.Path == path {
			out = append(out, c)
		}
	}
	return out
}

// stripeMemory is the Stripe processor the test's server uses: the real
// billing.Stripe, talking to stripe-mock, plus a memory of what was created.
//
// Why the memory: stripe-mock is stateless. It validates every request
// against Stripe's API and answers it, but a retrieve returns a fixture
// (another amount, another payment intent), never the object created. Reconciling against
// it would report differences that are the mock's and could never catch the
// server's. So every mutating call (checkout, refund, transfer, connected
// account, account link) still goes through stripe-go to stripe-mock over
// HTTP — the request encoding, the idempotency keys and the error handling
// are the real ones — and stripeMemory remembers what the server asked for
// under the id stripe-mock returned. The reads that must reflect that state
// (the payment, refund and transfer retrievals reconciliation makes, and the
// account read when the provider returns from onboarding) are answered
// from the memory, together with what the test did on Stripe's hosted pages
// as the buyer (paid a checkout) and the provider (finished onboarding).
// An id the memory does not know is Stripe's "resource_missing".
type stripeMemory struct {
	*billing.Stripe
	mu        sync.Mutex
	checkouts map[string]billing.CheckoutInput // by checkout id: what the server asked the buyer to pay
	payments  map[string]billing.Payment       // by payment intent id: paid on the hosted page
	refunds   map[string]billing.Refund
	transfers map[string]billing.Transfer
	accounts  map[string]billing.Account
	// retrieved counts the reads answered from memory, by kind.
	retrieved map[string]int
}

func newStripeMemory(s *billing.Stripe) *stripeMemory {
	return &stripeMemory{Stripe: s, checkouts: map[string]billing.CheckoutInput{}, payments: map[string]billing.Payment{},
		refunds: map[string]billing.Refund{}, transfers: map[string]billing.Transfer{}, accounts: map[string]billing.Account{},
		retrieved: map[string]int{}}
}

func stripeMissing(op string) error {
	return &billing.Error{Op: op, Status: http.StatusNotFound, Code: "resource_missing", Err: fmt.Errorf("no such object")}
}

func (m *stripeMemory) CreateCheckout(ctx context.Context, in billing.CheckoutInput) (billing.Checkout, error) {
	co, err := m.Stripe.CreateCheckout(ctx, in)
	if err == nil {
		m.mu.Lock()
		m.checkouts[co.ID] = in
		m.mu.Unlock()
	}
	return co, err
}

func (m *stripeMemory) Refund(ctx context.Context, pi string, amount market.Cents, key string) (billing.Refund, error) {
	r, err := m.Stripe.Refund(ctx, pi, amount, key)
	if err == nil {
		m.mu.Lock()
		m.refunds[r.ID] = billing.Refund{ID: r.ID, PaymentIntentID: pi, Amount: amount, Status: "succeeded"}
		m.mu.Unlock()
	}
	return r, err
}

func (m *stripeMemory) Transfer(ctx context.Context, acct string, amount market.Cents, group, key string) (billing.Transfer, error) {
	t, err := m.Stripe.Transfer(ctx, acct, amount, group, key)
	if err == nil {
		m.mu.Lock()
		m.transfers[t.ID] = billing.Transfer{ID: t.ID, AccountID: acct, Amount: amount, TransferGroup: group}
		m.mu.Unlock()
	}
	return t, err
}

func (m *stripeMemory) CreateConnectedAccount(ctx context.Context, email, key string) (billing.Account, error) {
	a, err := m.Stripe.CreateConnectedAccount(ctx, email, key)
	if err == nil {
		m.mu.Lock()
		m.accounts[a.ID] = billing.Account{ID: a.ID, Email: email}
		m.mu.Unlock()
	}
	return a, err
}

func (m *stripeMemory) RetrievePayment(_ context.Context, id string) (billing.Payment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["payment"]++
	p, ok := m.payments[id]
	if !ok {
		return billing.Payment{}, stripeMissing("retrieve payment " + id)
	}
	return p, nil
}

func (m *stripeMemory) RetrieveRefund(_ context.Context, id string) (billing.Refund, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["refund"]++
	r, ok := m.refunds[id]
	if !ok {
		return billing.Refund{}, stripeMissing("retrieve refund " + id)
	}
	return r, nil
}

// ListPayments, ListRefunds and ListTransfers answer reconciliation's
// listing from the memory, as the retrievals do.
func (m *stripeMemory) ListPayments(context.Context, time.Time) ([]billing.Payment, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["payment list"]++
	return slices.Collect(maps.Values(m.payments)), nil
}

func (m *stripeMemory) ListRefunds(context.Context, time.Time) ([]billing.Refund, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["refund list"]++
	return slices.Collect(maps.Values(m.refunds)), nil
}

func (m *stripeMemory) ListTransfers(context.Context, time.Time) ([]billing.Transfer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["transfer list"]++
	return slices.Collect(maps.Values(m.transfers)), nil
}

func (m *stripeMemory) RetrieveTransfer(_ context.Context, id string) (billing.Transfer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["transfer"]++
	t, ok := m.transfers[id]
	if !ok {
		return billing.Transfer{}, stripeMissing("retrieve transfer " + id)
	}
	return t, nil
}

func (m *stripeMemory) RetrieveAccount(_ context.Context, id string) (billing.Account, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retrieved["account"]++
	a, ok := m.accounts[id]
	if !ok {
		return billing.Account{}, stripeMissing("retrieve account " + id)
	}
	return a, nil
}

// payCheckout is the buyer paying a checkout on Stripe's hosted page: the
// payment intent piID receives what the server put on the checkout. It
// returns the checkout the server created.
func (m *stripeMemory) payCheckout(t *testing.T, checkoutID, piID string) billing.CheckoutInput {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	in, ok := m.checkouts[checkoutID]
	if !ok {
		t.Fatalf("checkout %q was never created through the processor", checkoutID)
	}
	m.payments[piID] = billing.Payment{ID: piID, ReservationID: in.ReservationID, Amount: in.Amount, AmountReceived: in.Amount,
		Status: "succeeded", Succeeded: true, TransferGroup: market.TransferGroup(in.ReservationID), ChargeID: "ch_" + strings.TrimPrefix(piID, "pi_")}
	return in
}

// finishOnboarding is the provider completing Stripe's onboarding.
func (m *stripeMemory) finishOnboarding(t *testing.T, accountID string) billing.Account {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.accounts[accountID]
	if !ok {
		t.Fatalf("account %q was never created through the processor", accountID)
	}
	a.DetailsSubmitted, a.ChargesEnabled, a.PayoutsEnabled = true, true, true
	m.accounts[accountID] = a
	return a
}

func (m *stripeMemory) refundList() []billing.Refund {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []billing.Refund
	for _, r := range m.refunds {
		out = append(out, r)
	}
	return out
}

func (m *stripeMemory) transferList() []billing.Transfer {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []billing.Transfer
	for _, t := range m.transfers {
		out = append(out, t)
	}
	return out
}

// stripeFlowLog writes a server's log lines to the test's log.
type stripeFlowLog struct{ t *testing.T }

func (w stripeFlowLog) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

type stripeFlowApp struct {
	*billingApp
	mem  *stripeMemory
	wire *stripeWire
}

// newStripeFlowApp serves the real Echo instance over a real SQLite file
// with a Stripe key and webhook secret, its Stripe client pointed at the
// stripe-mock at apiBase, a 10% platform fee and a movable clock.
func newStripeFlowApp(t *testing.T, apiBase string) *stripeFlowApp {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, pgtest.DSN(t, filepath.Join(t.TempDir(), "web.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	wire := &stripeWire{}
	sp, err := billing.NewStripe(billing.StripeConfig{SecretKey: "sk_test_123", WebhookSecret: stripeFlowSecret, APIBase: apiBase,
		HTTPClient: &http.Client{Transport: wire, Timeout: 10 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	mem := newStripeMemory(sp)
	clock := newTestClock(testNow)
	// The server's log goes to the test's, shown when it fails.
	log := slog.New(slog.NewTextHandler(stripeFlowLog{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	wf, err := workflow.New(ctx, workflow.Config{Billing: mem, PlatformFeeBP: flowFeeBP, Now: clock.now, BaseURL: "http://127.0.0.1",
		SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	h, e, err := New(ctx, Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost,
		Now: clock.now, Workflow: wf}, db, log)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &stripeFlowApp{billingApp: &billingApp{testApp: &testApp{t: t, srv: srv, db: db, handler: h}, clock: clock}, mem: mem, wire: wire}
}

// deliver posts a signed event to the webhook route and requires want.
// The signature's time is the wall clock, not the test's fixed clock:
// stripe-go refuses signatures more than five minutes from time.Now.
func (a *stripeFlowApp) deliver(secret, id, typ string, obj map[string]any, want int) {
	a.t.Helper()
	if r := a.webhook(secret, id, typ, obj); r.status != want {
		a.t.Fatalf("webhook %s %s signed with %q: %d, want %d\n%s", typ, id, secret, r.status, want, r.body)
	}
}

// stripeFlowTerms are the offer's terms; the expected money is derived
// from them in the test, never read back from the implementation.
const (
	flowPriceCents   = 219 // per device-hour, wall clock
	flowDevices      = 8
	flowHours        = 24
	flowUptimeBP     = 9950
	flowTierCreditBP = 2500 // the credit below the guarantee
	flowFeeBP        = 1000
)

// providerOffer lists an approved offer of the signed-up provider, straight
// through the store, and puts it in the matcher's index.
func (a *stripeFlowApp) providerOffer(providerID int64) market.Offer {
	a.t.Helper()
	ctx := context.Background()
	accel, _ := market.FindAccelerator("nvidia-h100-80gb-sxm")
	o := market.Offer{
		ProviderID: providerID, Title: "8× H100 through Stripe", AcceleratorID: accel.ID, MemoryGB: accel.MemoryGB,
		DevicesPerNode: flowDevices, Nodes: 1, Interconnect: market.InterconnectNVLink, NetworkID: "none",
		CPUCores: 32, RAMGB: 256, StorageGB: 1000, DriverVersion: "550.90", CUDAVersion: "12.4", OSImage: "Ubuntu 22.04",
		ContainerRuntime: "Docker", RegionID: "us-east-va", AvailableFrom: testNow, AvailableUntil: testNow.AddDate(0, 2, 0),
		MinRentalHours: 1, MaxRentalHours: 720, ProvisioningMins: 10, PriceCentsPerDeviceHour: flowPriceCents,
		BillingBasis: market.BillingWallClock, UptimeBP: flowUptimeBP, CreditCapBP: 10000, FreeCancelHours: 24, CancelFeeBP: 2500,
		CreditSchedule: []market.CreditTier{{BelowBP: flowUptimeBP, CreditBP: flowTierCreditBP}},
	}
	if err := market.ValidateOffer(&o, testNow); err != nil {
		a.t.Fatal(err)
	}
	o, err := a.db.CreateOffer(ctx, o, testNow)
	if err != nil {
		a.t.Fatal(err)
	}
	if err := a.db.ReviewOffer(ctx, o.ID, market.ReviewApproved, "", testNow); err != nil {
		a.t.Fatal(err)
	}
	a.handler.wf.RefreshOffer(ctx, o.ID)
	return o
}

// connectStripePayouts has the provider start payout onboarding: a connected
// account is created through stripe-mock and the provider is sent to
// Stripe's onboarding. It returns the account id.
func (a *stripeFlowApp) connectStripePayouts(prov *client, providerID int64) string {
	a.t.Helper()
	r := prov.post("/provider/reservations", "/provider/payouts/connect", url.Values{})
	// stripe-mock's fixture link is on a Stripe development host, so only
	// "away to https" is checked.
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "https://") {
		a.t.Fatalf("connect payouts: %d → %q, want Stripe's onboarding\n%s", r.status, r.location, r.body)
	}
	acct, err := a.db.FindPayoutAccount(context.Background(), providerID)
	if err != nil {
		a.t.Fatal(err)
	}
	if !strings.HasPrefix(acct.AccountID, "acct_") || acct.Onboarded() {
		a.t.Fatalf("payout account %+v, want a new Stripe account not yet onboarded", acct)
	}
	calls := a.wire.to(http.MethodPost, "/v1/accounts")
	if len(calls) != 1 || calls[0].IdempotencyKey != fmt.Sprintf("provider_%d_account", providerID) ||
		calls[0].Form.Get("type") != "express" || calls[0].Form.Get("capabilities[transfers][requested]") != "true" {
		a.t.Fatalf("account creation requests %+v", calls)
	}
	links := a.wire.to(http.MethodPost, "/v1/account_links")
	if len(links) != 1 || links[0].Form.Get("account") != acct.AccountID || links[0].Form.Get("type") != "account_onboarding" ||
		links[0].Form.Get("return_url") != "http://127.0.0.1/provider/payouts/return" {
		a.t.Fatalf("account link requests %+v", links)
	}
	return acct.AccountID
}

// onboardAtStripe is the provider finishing onboarding on Stripe's pages; Stripe
// then sends account.updated (delivered twice here), and the provider
// comes back to the return page, which reads the account.
func (a *stripeFlowApp) onboardAtStripe(prov *client, providerID int64, accountID string) {
	a.t.Helper()
	ctx := context.Background()
	// A forged onboarding is refused and changes nothing. It carries the id
	// of the genuine event that follows: had it been recorded as processed,
	// the genuine one would be dropped as a replay.
	forged := map[string]any{"id": accountID, "object": "account", "details_submitted": true, "charges_enabled": true, "payouts_enabled": true}
	for _, secret := range []string{"whsec_not_the_endpoints", "local_whsec"} {
		a.deliver(secret, "evt_acct_"+accountID, "account.updated", forged, http.StatusBadRequest)
	}
	if acct, err := a.db.FindPayoutAccount(ctx, providerID); err != nil || acct.Onboarded() {
		a.t.Fatalf("a forged account.updated onboarded the provider: %v %+v", err, acct)
	}
	acct := a.mem.finishOnboarding(a.t, accountID)
	obj := map[string]any{"id": acct.ID, "object": "account", "type": "express", "details_submitted": acct.DetailsSubmitted,
		"charges_enabled": acct.ChargesEnabled, "payouts_enabled": acct.PayoutsEnabled}
	for range 2 {
		a.deliver(stripeFlowSecret, "evt_acct_"+accountID, "account.updated", obj, http.StatusOK)
	}
	if got, err := a.db.FindPayoutAccount(ctx, providerID); err != nil || !got.Onboarded() {
		a.t.Fatalf("after account.updated: %v %+v, want onboarded", err, got)
	}
	if r := prov.get("/provider/payouts/return"); r.status != http.StatusSeeOther || r.location != "/provider/reservations" {
		a.t.Fatalf("return from onboarding: %d → %q", r.status, r.location)
	}
	mustContain(a.t, prov.get("/provider/reservations").body, "connected — payouts enabled")
}

// flowMoney formats cents as the pages do, independently of market.Cents
// (the figures here are under $1,000).
func flowMoney(c int64) string { return fmt.Sprintf("$%d.%02d", c/100, c%100) }

var flowTagRe = regexp.MustCompile(`<[^>]*>`)

// stripeFlowFigure returns the text of the table cell marked testID, its
// markup removed; "" when the page has none.
func stripeFlowFigure(page, testID string) string {
	m := regexp.MustCompile(`<td[^>]*data-testid="` + regexp.QuoteMeta(testID) + `"[^>]*>(.*?)</td>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(flowTagRe.ReplaceAllString(m[1], ""))
}

func TestStripeFlow(t *testing.T) {
	apiBase := stripemock.URL(t)
	for _, tc := range []struct {
		name string
		// events is the order in which Stripe's two payment events are
		// delivered, each twice ("cs": checkout.session.completed, "pi":
		// payment_intent.succeeded).
		events []string
		// onboardLate: the provider connects payouts only after the
		// booking has ended, so the payout is held at settlement and
		// released by the account.updated webhook.
		onboardLate bool
	}{
		{name: "in order", events: []string{"cs", "pi", "cs", "pi"}},
		{name: "out of order, payout released by onboarding", events: []string{"pi", "cs", "pi", "cs"}, onboardLate: true},
	} {
		t.Run(tc.name, func(t *testing.T) { stripeFlow(t, apiBase, tc.events, tc.onboardLate) })
	}
}

func stripeFlow(t *testing.T, apiBase string, events []string, onboardLate bool) {
	app := newStripeFlowApp(t, apiBase)
	ctx := context.Background()

	// The money, from the terms: 8 devices for 24 hours at 2.19 $/device-hour;
	// the provider reports 4 devices down for 6 hours, which is a pro-rata
	// credit and takes uptime to 87.5%, below the 99.5% guarantee, for the
	// tier's 25% credit; the platform keeps 10% of what the provider keeps.
	// (The terms are chosen so that every figure is a whole cent.)
	const lostDeviceHours, reservedDeviceHours = 4 * 6, flowDevices * flowHours
	amount := int64(flowPriceCents * flowDevices * flowHours)
	refund := amount*lostDeviceHours/reservedDeviceHours + amount*flowTierCreditBP/10000
	kept := amount - refund
	fee := kept * flowFeeBP / 10000
	payout := kept - fee
	if amount*lostDeviceHours%reservedDeviceHours != 0 || amount*flowTierCreditBP%10000 != 0 || kept*flowFeeBP%10000 != 0 {
		t.Fatal("the terms do not give whole cents; pick others")
	}
	if uptime := (reservedDeviceHours - lostDeviceHours) * 10000 / reservedDeviceHours; uptime >= flowUptimeBP {
		t.Fatalf("uptime %d bp does not breach the guarantee", uptime)
	}

	prov := app.client()
	prov.signUp("gpu-host@example.com", true)
	provID := prov.userID()
	app.providerOffer(provID)
	var accountID string
	if !onboardLate {
		accountID = app.connectStripePayouts(prov, provID)
		app.onboardAtStripe(prov, provID, accountID)
	}

	// The buyer books and pays through Checkout.
	buyer := app.client()
	buyer.signUp("card-holder@example.com", false)
	buyerID := buyer.userID()
	reqJSON, sig := firstQuote(t, buyer.get("/requests?"+trainingQuery().Encode()).body)
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}
	resPath := r.location
	id, err := strconv.ParseInt(strings.TrimPrefix(resPath, "/reservations/"), 10, 64)
	if err != nil {
		t.Fatalf("reserve redirected to %q", resPath)
	}
	res, err := app.db.FindReservation(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Pieces) != 1 || res.Pieces[0].ProviderID != provID || res.Pieces[0].Devices != flowDevices ||
		res.Pieces[0].End.Sub(res.Pieces[0].Start) != flowHours*time.Hour || int64(res.AmountCents) != amount {
		t.Fatalf("reservation %+v, want one piece of %d devices for %d h from provider %d, %s", res, flowDevices, flowHours, provID, flowMoney(amount))
	}
	page := buyer.get(resPath).body
	mustContain(t, page, `data-testid="pay"`)
	mustNotContain(t, page, "simulated")

	pay := buyer.post(resPath, resPath+"/pay", url.Values{})
	if pay.status != http.StatusSeeOther || !strings.HasPrefix(pay.location, "https://checkout.stripe.com/") {
		t.Fatalf("pay: %d → %q, want Stripe Checkout\n%s", pay.status, pay.location, pay.body)
	}
	rid := strconv.FormatInt(id, 10)
	checkouts := app.wire.to(http.MethodPost, "/v1/checkout/sessions")
	if len(checkouts) != 1 {
		t.Fatalf("%d checkout requests, want 1", len(checkouts))
	}
	co := checkouts[0]
	for field, want := range map[string]string{
		"mode": "payment", "client_reference_id": rid, "metadata[reservation_id]": rid,
		"line_items[0][quantity]": "1", "line_items[0][price_data][currency]": "usd",
		"line_items[0][price_data][unit_amount]": strconv.FormatInt(amount, 10),
		"payment_intent_data[transfer_group]":    "res_" + rid, "payment_intent_data[metadata][reservation_id]": rid,
		"customer_email": "card-holder@example.com", "success_url": "http://127.0.0.1" + resPath + "?paid=1",
		"cancel_url": "http://127.0.0.1" + resPath,
	} {
		if got := co.Form.Get(field); got != want {
			t.Errorf("checkout request %s = %q, want %q", field, got, want)
		}
	}
	if co.IdempotencyKey != "res_"+rid+"_checkout" {
		t.Errorf("checkout idempotency key %q", co.IdempotencyKey)
	}
	p, err := app.db.FindPayment(ctx, id)
	if err != nil || !strings.HasPrefix(p.CheckoutID, "cs_") || p.Status != store.PaymentOpen || int64(p.Amount) != amount {
		t.Fatalf("payment after checkout: %v %+v", err, p)
	}

	// Forged payment events are refused and change nothing (their event id
	// is the genuine one's, which must still be applied when it comes).
	piID := "pi_flow_" + rid
	forged := map[string]any{"id": piID, "object": "payment_intent", "amount": amount, "amount_received": amount, "currency": "usd",
		"status": "succeeded", "metadata": map[string]string{"reservation_id": rid}, "transfer_group": "res_" + rid}
	for _, secret := range []string{"whsec_not_the_endpoints", "local_whsec"} {
		app.deliver(secret, "evt_pi_"+rid, "payment_intent.succeeded", forged, http.StatusBadRequest)
	}
	if got, _ := app.db.FindReservation(ctx, id); got.State != market.ReservationHeld {
		t.Fatalf("a forged payment event moved the reservation to %s", got.State)
	}
	if es := app.ledger(id); len(es) != 0 {
		t.Fatalf("a forged payment event wrote %+v", es)
	}
	if got, _ := app.db.FindPayment(ctx, id); got.Status != store.PaymentOpen || got.PaymentIntentID != "" {
		t.Fatalf("a forged payment event changed the payment: %+v", got)
	}

	// The buyer pays on Stripe's page; Stripe sends both events, in the
	// case's order, each twice.
	in := app.mem.payCheckout(t, p.CheckoutID, piID)
	if int64(in.Amount) != amount || in.ReservationID != id {
		t.Fatalf("checkout created for %d of %s, want %d of %s", in.ReservationID, in.Amount, id, flowMoney(amount))
	}
	session := map[string]any{"id": p.CheckoutID, "object": "checkout.session", "mode": "payment", "status": "complete",
		"payment_status": "paid", "amount_total": int64(in.Amount), "currency": "usd", "client_reference_id": rid,
		"metadata": map[string]string{"reservation_id": rid}, "payment_intent": piID}
	intent := map[string]any{"id": piID, "object": "payment_intent", "amount": int64(in.Amount), "amount_received": int64(in.Amount),
		"currency": "usd", "status": "succeeded", "metadata": map[string]string{"reservation_id": rid}, "transfer_group": "res_" + rid,
		"latest_charge": "ch_flow_" + rid}
	for _, ev := range events {
		switch ev {
		case "cs":
			app.deliver(stripeFlowSecret, "evt_cs_"+rid, "checkout.session.completed", session, http.StatusOK)
		case "pi":
			app.deliver(stripeFlowSecret, "evt_pi_"+rid, "payment_intent.succeeded", intent, http.StatusOK)
		}
		// Confirmed by the first, and exactly once whatever follows.
		if got, _ := app.db.FindReservation(ctx, id); got.State != market.ReservationConfirmed {
			t.Fatalf("after %s: reservation %s, want confirmed", ev, got.State)
		}
		es := app.ledger(id)
		if len(es) != 1 || es[0].Kind != market.EntryCharge || int64(es[0].Amount) != amount || es[0].StripeRef != piID ||
			es[0].Credit != market.ProviderAccount(provID) {
			t.Fatalf("after %s: ledger %+v, want one charge of %s referencing %s", ev, es, flowMoney(amount), piID)
		}
	}
	p, err = app.db.FindPayment(ctx, id)
	if err != nil || p.Status != store.PaymentPaid || p.PaymentIntentID != piID || p.ChargeID != "ch_flow_"+rid || p.CheckoutID != session["id"] {
		t.Fatalf("payment after the events: %v %+v", err, p)
	}
	page = buyer.get(resPath + "?paid=1").body
	mustContain(t, page, "Paid "+flowMoney(amount), "confirmed")
	mustNotContain(t, page, `data-testid="pay"`)

	// The booking runs; the provider reports a host failure.
	piece := res.Pieces[0]
	app.tick(piece.Start.Add(time.Hour))
	booking := fmt.Sprintf("/provider/bookings/%d", id)
	form := url.Values{"piece": {strconv.FormatInt(piece.ID, 10)}, "kind": {"host_failure"},
		"start": {piece.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {piece.Start.Add(8 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"4"}, "note": {"Node PSU failed, 4 GPUs down; ticket 5120."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}

	// The booking ends and the background work settles it.
	app.tick(piece.End.Add(time.Minute))
	st, err := app.db.FindSettlement(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if int64(st.RefundCents) != refund || !st.RefundDone || st.PaymentIntentID != piID {
		t.Fatalf("settlement %+v, want the refund of %s made against %s", st, flowMoney(refund), piID)
	}
	if onboardLate {
		if st.State != store.SettlementWaiting || len(st.Transfers) != 1 || st.Transfers[0].State != store.TransferHeld {
			t.Fatalf("settlement without a payout account: %s %+v, want waiting with the payout held", st.State, st.Transfers)
		}
		if n := len(app.wire.to(http.MethodPost, "/v1/transfers")); n != 0 {
			t.Fatalf("%d transfers sent before the provider could receive them", n)
		}
		accountID = app.connectStripePayouts(prov, provID)
		app.onboardAtStripe(prov, provID, accountID)
		if st, err = app.db.FindSettlement(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if st.State != store.SettlementDone || len(st.Transfers) != 1 || st.Transfers[0].State != store.TransferDone ||
		int64(st.Transfers[0].Amount) != payout || st.Transfers[0].AccountID != accountID {
		t.Fatalf("settlement %s %+v, want done with %s paid to %s", st.State, st.Transfers, flowMoney(payout), accountID)
	}
	if got, _ := app.db.FindReservation(ctx, id); got.State != market.ReservationSettled {
		t.Fatalf("reservation %s, want settled", got.State)
	}

	// Exactly one refund and one transfer went over the wire, encoded as
	// Stripe expects, with the settlement's idempotency keys.
	refunds := app.wire.to(http.MethodPost, "/v1/refunds")
	if len(refunds) != 1 || refunds[0].IdempotencyKey != "res_"+rid+"_refund" || refunds[0].Form.Get("payment_intent") != piID ||
		refunds[0].Form.Get("amount") != strconv.FormatInt(refund, 10) {
		t.Fatalf("refund requests %+v, want one of %d against %s", refunds, refund, piID)
	}
	transfers := app.wire.to(http.MethodPost, "/v1/transfers")
	if len(transfers) != 1 || transfers[0].IdempotencyKey != fmt.Sprintf("res_%s_transfer_p%d", rid, provID) ||
		transfers[0].Form.Get("amount") != strconv.FormatInt(payout, 10) || transfers[0].Form.Get("currency") != "usd" ||
		transfers[0].Form.Get("destination") != accountID || transfers[0].Form.Get("transfer_group") != "res_"+rid {
		t.Fatalf("transfer requests %+v, want one of %d to %s", transfers, payout, accountID)
	}
	memRefunds, memTransfers := app.mem.refundList(), app.mem.transferList()
	if len(memRefunds) != 1 || len(memTransfers) != 1 {
		t.Fatalf("%d refunds and %d transfers made, want one each", len(memRefunds), len(memTransfers))
	}

	// The ledger: the charge, the credit back, the fee, the refund and the
	// transfer, referencing the objects stripe-mock returned, all closed.
	es := app.ledger(id)
	if err := market.CheckSettled(es, id); err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[string]int64{market.EntryCharge: amount, market.EntryRefund: refund, market.EntryFee: fee, market.EntryTransfer: payout} {
		if got := int64(sumKind(es, kind)); got != want {
			t.Errorf("ledger %s entries: %s, want %s", kind, flowMoney(got), flowMoney(want))
		}
	}
	for _, e := range es {
		switch {
		case e.Kind == market.EntryRefund && e.StripeRef != memRefunds[0].ID:
			t.Errorf("refund entry references %q, the refund made is %q", e.StripeRef, memRefunds[0].ID)
		case e.Kind == market.EntryTransfer && e.StripeRef != memTransfers[0].ID:
			t.Errorf("transfer entry references %q, the transfer made is %q", e.StripeRef, memTransfers[0].ID)
		}
	}

	// Stripe reports the refund on the charge, twice; a forged chargeback
	// is refused.
	charge := map[string]any{"id": "ch_flow_" + rid, "object": "charge", "amount": amount, "amount_refunded": refund, "currency": "usd",
		"refunded": false, "payment_intent": piID, "transfer_group": "res_" + rid}
	for range 2 {
		app.deliver(stripeFlowSecret, "evt_ch_refunded_"+rid, "charge.refunded", charge, http.StatusOK)
	}
	dispute := map[string]any{"id": "dp_forged", "object": "dispute", "amount": amount, "currency": "usd", "payment_intent": piID, "charge": "ch_flow_" + rid}
	for _, secret := range []string{"whsec_not_the_endpoints", "local_whsec"} {
		app.deliver(secret, "evt_forged_dp", "charge.dispute.created", dispute, http.StatusBadRequest)
	}
	if ds, err := app.db.ListReservationDisputes(ctx, id); err != nil || len(ds) != 0 {
		t.Fatalf("a forged chargeback opened disputes: %v %+v", err, ds)
	}
	// Every payment event again, as Stripe retries: nothing moves.
	app.deliver(stripeFlowSecret, "evt_cs_"+rid, "checkout.session.completed", session, http.StatusOK)
	app.deliver(stripeFlowSecret, "evt_pi_"+rid, "payment_intent.succeeded", intent, http.StatusOK)
	if after := app.ledger(id); len(after) != len(es) {
		t.Fatalf("replayed events after settlement: %d ledger entries, had %d", len(after), len(es))
	}

	// What people see.
	bs, ps := buyer.get(resPath+"/statement").body, prov.get(booking+"/statement").body
	for _, c := range []struct {
		page, testID string
		want         int64
	}{
		{bs, "statement-paid", amount}, {bs, "statement-refund", refund}, {bs, "statement-payout", payout},
		{ps, "statement-refund", refund}, {ps, "statement-fee", fee}, {ps, "statement-payout", payout},
	} {
		if got := stripeFlowFigure(c.page, c.testID); got != flowMoney(c.want) {
			t.Errorf("statement %s shows %q, want %s", c.testID, got, flowMoney(c.want))
		}
	}
	kinds := func(userID int64) map[string][]string {
		ns, err := app.db.ListNotifications(ctx, userID, 100)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, n := range ns {
			out[n.Kind] = append(out[n.Kind], n.Notice.Text())
		}
		return out
	}
	pn, bn := kinds(provID), kinds(buyerID)
	if len(pn[store.NotifyBookingMade]) != 1 || !strings.Contains(pn[store.NotifyBookingMade][0], flowMoney(amount)) {
		t.Errorf("provider's booking notifications %q, want one of %s", pn[store.NotifyBookingMade], flowMoney(amount))
	}
	if len(pn[store.NotifyPayoutSent]) != 1 || !strings.Contains(pn[store.NotifyPayoutSent][0], flowMoney(payout)) {
		t.Errorf("provider's payout notifications %q, want one of %s", pn[store.NotifyPayoutSent], flowMoney(payout))
	}
	if len(bn[store.NotifyRefundSent]) != 1 || !strings.Contains(bn[store.NotifyRefundSent][0], flowMoney(refund)) {
		t.Errorf("buyer's refund notifications %q, want one of %s", bn[store.NotifyRefundSent], flowMoney(refund))
	}

	// Reconciliation against what was created: clean, and it did look.
	diffs, err := app.handler.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil || len(diffs) != 0 {
		t.Fatalf("reconcile: %v %+v", err, diffs)
	}
	app.mem.mu.Lock()
	retrieved := maps.Clone(app.mem.retrieved)
	app.mem.mu.Unlock()
	for _, kind := range []string{"payment", "refund", "transfer", "payment list", "refund list", "transfer list"} {
		if retrieved[kind] == 0 {
			t.Errorf("reconciliation never retrieved a %s", kind)
		}
	}
	// And it would see a refund that is not what the ledger says.
	app.mem.mu.Lock()
	changed := app.mem.refunds[memRefunds[0].ID]
	changed.Amount++
	app.mem.refunds[memRefunds[0].ID] = changed
	app.mem.mu.Unlock()
	diffs, err = app.handler.wf.Reconcile(ctx, workflow.ReconcileOptions{})
	if err != nil || len(diffs) != 1 || diffs[0].ReservationID != id || !strings.Contains(diffs[0].What, "amount differs") {
		t.Fatalf("reconcile with a refund amount changed at the processor: %v %+v, want one difference", err, diffs)
	}
}
