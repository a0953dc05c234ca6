package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The metered path through the pages, as a person does it: the provider
// allows metered rentals on the offer page; the buyer tops up 20.00 from a
// saved card (a bad amount is a 422 next to the field), starts one device
// now from the offer page, the agent hands over at s+2m, the buyer stops
// it from the reservation page at s+32m: 30 minutes × 219¢ / 60 = 109.5 →
// 109¢ drawn; the statement lists the top-up and the draws; reconciled.
func TestMeteredRentalThroughThePages(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("metered-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	offerPath := fmt.Sprintf("/offers/%d", o.ID)
	mustContain(t, prov.get(offerPath).body, `data-testid="metered-allow"`)
	if r := prov.post(offerPath, fmt.Sprintf("/provider/offers/%d/metered", o.ID), url.Values{"allow": {"1"}, "notice_minutes": {"30"}}); r.status != http.StatusSeeOther {
		t.Fatalf("allow metered: %d\n%s", r.status, r.body)
	}
	mustContain(t, prov.get(offerPath).body, `data-testid="metered-disallow"`)

	buyer := app.client()
	buyer.signUp("metered-buyer@example.com", false)
	page := buyer.get(offerPath).body
	mustContain(t, page, `data-testid="metered-start"`, "You don&#39;t pay for what you can&#39;t use", "30 minutes&#39; notice")
	mustContain(t, buyer.get("/balance").body, `data-testid="topup-no-card"`)
	mustContain(t, buyer.get("/reservations").body, `href="/balance"`) // the Account menu leads to it
	app.addCard(buyer, "4242 4242 4242 4242")
	r := buyer.post("/balance", "/balance/top-up", url.Values{"amount": {"twenty"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(testidText(r.body, "topup-amount-error"), "Enter an amount") {
		t.Fatalf("bad amount: %d %q", r.status, testidText(r.body, "topup-amount-error"))
	}
	if r := buyer.post("/balance", "/balance/top-up", url.Values{"amount": {"20.00"}}); r.status != http.StatusSeeOther {
		t.Fatalf("top up: %d\n%s", r.status, r.body)
	}
	if got := testidText(buyer.get("/balance").body, "balance-amount"); got != "$20.00" {
		t.Fatalf("balance %q, want $20.00", got)
	}

	s := testNow.Add(time.Hour)
	app.clock.set(s)
	// Too many devices: 422 on the offer page, the message in the panel.
	r = buyer.post(offerPath, offerPath+"/metered", url.Values{"devices": {"9"}})
	if r.status != http.StatusUnprocessableEntity || testidText(r.body, "metered-start-error") == "" {
		t.Fatalf("9 devices: %d %q", r.status, testidText(r.body, "metered-start-error"))
	}
	r = buyer.post(offerPath, offerPath+"/metered", url.Values{"devices": {"1"}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/reservations/") {
		t.Fatalf("start: %d → %q\n%s", r.status, r.location, r.body)
	}
	resPath := r.location
	rental, err := app.db.ListMeteredRentals(ctx, buyer.userID())
	if err != nil || len(rental) != 1 {
		t.Fatalf("rentals %+v %v", rental, err)
	}
	m := rental[0]
	page = buyer.get(resPath).body
	mustContain(t, page, `data-testid="metered-panel"`, `data-testid="metered-stop"`, "The clock starts when the machine is usable")

	tok, _, err := app.db.CreateHostToken(ctx, prov.userID(), o.ID, 0, s)
	if err != nil {
		t.Fatal(err)
	}
	app.clock.set(s.Add(2 * time.Minute))
	if _, err := app.handler.wf.RecordInstalled(ctx, tok, m.PieceID, market.Connection{Host: "203.0.113.9", Port: 22, User: "gpu"}); err != nil {
		t.Fatal(err)
	}
	if _, err := app.handler.wf.RecordAcceptance(ctx, tok, m.PieceID, market.AcceptanceResult{Metric: market.FigureBF16TFLOPS, PerDeviceMilli: []int64{900000}, DurationSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	for i := 3; i <= 32; i++ {
		app.tick(s.Add(time.Duration(i) * time.Minute))
	}
	if r := buyer.post(resPath, resPath+"/stop", url.Values{}); r.status != http.StatusSeeOther || r.location != resPath {
		t.Fatalf("stop: %d → %q", r.status, r.location)
	}
	mustNotContain(t, buyer.get(resPath).body, `data-testid="metered-stop"`)
	for i := 33; i <= 35; i++ {
		app.tick(s.Add(time.Duration(i) * time.Minute))
	}
	page = buyer.get(resPath).body
	if got := testidText(page, "metered-panel-minutes"); got != "30 minute(s)" {
		t.Fatalf("minutes on the reservation page %q, want 30", got)
	}
	if got := testidText(page, "metered-panel-drawn"); got != "$1.09" {
		t.Fatalf("drawn %q, want $1.09", got)
	}
	bal := buyer.get("/balance").body
	if got := testidText(bal, "balance-amount"); got != "$18.91" {
		t.Fatalf("balance %q, want $20.00 − $1.09 = $18.91", got)
	}
	mustContain(t, bal, "Top-up", fmt.Sprintf("Metered rental #%d", m.ReservationID), "stopped by you")
	requireReconciled(t, app.testApp)
}

// The API: the balance, a metered start and its stop, each answer checked
// against web/openapi.json by apiCall.
func TestMeteredAPI(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("metered-api-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	if err := app.handler.wf.SetOfferMetered(context.Background(), prov.userID(), o.ID, true, 0); err != nil {
		t.Fatal(err)
	}
	buyer := app.client()
	buyer.signUp("metered-api-buyer@example.com", false)
	tok := buyer.createToken("cli", "write")
	start := fmt.Sprintf("/api/v1/offers/%d/metered", o.ID)
	// No balance: a 409.
	if r := app.apiCall("POST", start, tok, `{"devices":1}`); r.status != http.StatusConflict {
		t.Fatalf("start without balance: %d %s", r.status, r.body)
	}
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	if _, err := app.handler.wf.TopUpWithSavedCard(context.Background(), buyer.userID(), 1000); err != nil {
		t.Fatal(err)
	}
	var bal apiBalance
	r := app.apiCall("GET", "/api/v1/balance", tok, "")
	if err := json.Unmarshal([]byte(r.body), &bal); err != nil || r.status != http.StatusOK || bal.BalanceCents != 1000 || len(bal.Entries) != 1 {
		t.Fatalf("balance: %d %s", r.status, r.body)
	}
	app.clock.set(testNow.Add(time.Hour))
	var m apiMetered
	r = app.apiCall("POST", start, tok, `{"devices":2}`)
	if err := json.Unmarshal([]byte(r.body), &m); err != nil || r.status != http.StatusCreated || m.Devices != 2 || m.State != "running" || m.PriceCents != 219 {
		t.Fatalf("start: %d %s", r.status, r.body)
	}
	stop := fmt.Sprintf("/api/v1/reservations/%d/stop", m.ReservationID)
	r = app.apiCall("POST", stop, tok, "")
	if err := json.Unmarshal([]byte(r.body), &m); err != nil || r.status != http.StatusOK || m.State != "stopped" || m.StopReason != market.MeteredStopBuyer {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", stop, tok, ""); r.status != http.StatusConflict {
		t.Fatalf("stop again: %d %s", r.status, r.body)
	}
	app.tick(testNow.Add(time.Hour + 5*time.Minute))
	requireReconciled(t, app.testApp)
}

// A top-up on the payment page with no saved card: the local test
// processor's page, paid, back on the balance page with 15.00; the return
// link afterwards changes nothing; a bad amount is a 422 next to the field.
func TestTopUpOnThePaymentPage(t *testing.T) {
	app := newBillingApp(t)
	buyer := app.client()
	buyer.signUp("topup-page@example.com", false)
	r := buyer.post("/balance", "/balance/top-up/checkout", url.Values{"amount": {"1.00"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(testidText(r.body, "checkout-amount-error"), "between $5.00") {
		t.Fatalf("1.00: %d %q", r.status, testidText(r.body, "checkout-amount-error"))
	}
	r = buyer.post("/balance", "/balance/top-up/checkout", url.Values{"amount": {"15.00"}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/pay/local/") {
		t.Fatalf("top up on the page: %d → %q\n%s", r.status, r.location, r.body)
	}
	payPage := buyer.get(r.location)
	mustContain(t, payPage.body, "Balance top-up #", "$15.00")
	// Another buyer cannot pay it.
	other := app.client()
	other.signUp("topup-other@example.com", false)
	if o := other.get(r.location); o.status != http.StatusNotFound {
		t.Fatalf("another buyer's top-up page: %d", o.status)
	}
	done := buyer.post(r.location, r.location, url.Values{"outcome": {"pay"}})
	if done.status != http.StatusSeeOther || done.location != "/balance" {
		t.Fatalf("pay: %d → %q\n%s", done.status, done.location, done.body)
	}
	if got := testidText(buyer.get("/balance").body, "balance-amount"); got != "$15.00" {
		t.Fatalf("balance %q, want $15.00", got)
	}
	tops, err := app.db.ListTopUps(context.Background(), buyer.userID())
	if err != nil || len(tops) != 1 || tops[0].State != "paid" || tops[0].Method != "checkout" {
		t.Fatalf("top-ups %+v %v", tops, err)
	}
	if back := buyer.get(fmt.Sprintf("/balance/top-up/return?top_up=%d", tops[0].ID)); back.status != http.StatusSeeOther {
		t.Fatalf("return: %d", back.status)
	}
	bal, err := app.db.FindBalance(context.Background(), buyer.userID())
	if err != nil || bal.TopUps != 1500 || bal.Balance != 1500 {
		t.Fatalf("balance after the return link %+v %v", bal, err)
	}
	requireReconciled(t, app.testApp)
}

// The automatic top-up on /balance: values checked next to their fields
// (422), set to below 30.00 add 10.00 with a balance of 20.00, the next
// tick tops it up once (30.00), repeated ticks add nothing; cleared.
// Reconciled.
func TestAutoTopUpThroughThePage(t *testing.T) {
	app := newBillingApp(t)
	buyer := app.client()
	buyer.signUp("auto-buyer@example.com", false)
	mustNotContain(t, buyer.get("/balance").body, `data-testid="auto-topup"`)
	app.addCard(buyer, "4242 4242 4242 4242")
	if r := buyer.post("/balance", "/balance/top-up", url.Values{"amount": {"20.00"}}); r.status != http.StatusSeeOther {
		t.Fatalf("top up: %d", r.status)
	}
	r := buyer.post("/balance", "/balance/auto-top-up", url.Values{"threshold": {"lots"}, "amount": {"1.00"}})
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(testidText(r.body, "auto-threshold-error"), "Enter an amount") ||
		!strings.Contains(testidText(r.body, "auto-amount-error"), "between") {
		t.Fatalf("bad values: %d %q %q", r.status, testidText(r.body, "auto-threshold-error"), testidText(r.body, "auto-amount-error"))
	}
	if r := buyer.post("/balance", "/balance/auto-top-up", url.Values{"threshold": {"30.00"}, "amount": {"10.00"}}); r.status != http.StatusSeeOther {
		t.Fatalf("set: %d\n%s", r.status, r.body)
	}
	mustContain(t, buyer.get("/balance").body, `data-testid="auto-topup-on"`)
	for i := 1; i <= 3; i++ {
		app.tick(testNow.Add(time.Duration(i) * time.Minute))
	}
	if got := testidText(buyer.get("/balance").body, "balance-amount"); got != "$30.00" {
		t.Fatalf("balance %q, want $20.00 + $10.00", got)
	}
	if r := buyer.post("/balance", "/balance/auto-top-up", url.Values{"threshold": {""}, "amount": {""}}); r.status != http.StatusSeeOther {
		t.Fatalf("clear: %d", r.status)
	}
	mustNotContain(t, buyer.get("/balance").body, `data-testid="auto-topup-on"`)
	requireReconciled(t, app.testApp)
}

// A quote card's piece of an offer that allows metered rentals links to
// the offer page's metered form with the piece's devices filled in; a
// piece of an offer that does not has no such link.
func TestQuotePieceStartsMetered(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("quote-metered-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("quote-metered-buyer@example.com", false)
	q := trainingQuery()
	page := buyer.get("/requests?" + q.Encode()).body
	mustContain(t, page, fmt.Sprintf(`href="/offers/%d"`, o.ID))
	mustNotContain(t, page, `data-testid="quote-piece-metered"`)
	offerPath := fmt.Sprintf("/offers/%d", o.ID)
	if r := prov.post(offerPath, fmt.Sprintf("/provider/offers/%d/metered", o.ID), url.Values{"allow": {"1"}, "notice_minutes": {"30"}}); r.status != http.StatusSeeOther {
		t.Fatalf("allow metered: %d", r.status)
	}
	page = buyer.get("/requests?" + q.Encode()).body
	m := regexp.MustCompile(fmt.Sprintf(`href="(/offers/%d\?devices=(\d+)#metered)" data-testid="quote-piece-metered"`, o.ID)).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no metered link for offer %d among %d pieces", o.ID, strings.Count(page, `data-testid="quote-piece"`))
	}
	if got, want := strings.Count(page, `data-testid="quote-piece-metered"`), strings.Count(page, fmt.Sprintf(`<a href="/offers/%d">`, o.ID)); got != want {
		t.Fatalf("%d metered links, want one per piece of offer %d (%d)", got, o.ID, want)
	}
	t.Logf("link %s", m[1])
	if m[2] == "0" {
		t.Fatalf("link %q", m[1])
	}
	form := buyer.get(strings.TrimSuffix(m[1], "#metered")).body
	mustContain(t, form, `data-testid="metered-start"`, fmt.Sprintf(`value="%s" required data-testid="metered-devices"`, m[2]))
	// Without the link's devices the form starts at one.
	if m[2] != "1" {
		mustContain(t, buyer.get(offerPath).body, `value="1" required data-testid="metered-devices"`)
	}
}

// The automatic top-up through the API, each answer checked against
// web/openapi.json: bad values 400, set, a tick tops 10.00 up by 20.00
// below 15.00 (30.00), cleared.
func TestAutoTopUpAPI(t *testing.T) {
	app := newBillingApp(t)
	buyer := app.client()
	buyer.signUp("auto-api-buyer@example.com", false)
	tok := buyer.createToken("cli", "write")
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	if _, err := app.handler.wf.TopUpWithSavedCard(context.Background(), buyer.userID(), 1000); err != nil {
		t.Fatal(err)
	}
	if r := app.apiCall("PUT", "/api/v1/balance/auto-top-up", tok, `{"threshold_cents":50,"amount_cents":100}`); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, "threshold") {
		t.Fatalf("bad values: %d %s", r.status, r.body)
	}
	var a apiAutoTopUp
	r := app.apiCall("PUT", "/api/v1/balance/auto-top-up", tok, `{"threshold_cents":1500,"amount_cents":2000}`)
	if err := json.Unmarshal([]byte(r.body), &a); err != nil || r.status != http.StatusOK || !a.On || a.ThresholdCents != 1500 || a.AmountCents != 2000 {
		t.Fatalf("set: %d %s", r.status, r.body)
	}
	app.tick(testNow.Add(time.Minute))
	app.tick(testNow.Add(2 * time.Minute))
	var bal apiBalance
	r = app.apiCall("GET", "/api/v1/balance", tok, "")
	if err := json.Unmarshal([]byte(r.body), &bal); err != nil || bal.BalanceCents != 3000 || len(bal.Entries) != 2 ||
		!bal.AutoTopUp.On || bal.AutoTopUp.ThresholdCents != 1500 || bal.AutoTopUp.AmountCents != 2000 {
		t.Fatalf("balance after the tick: %d %s", r.status, r.body)
	}
	r = app.apiCall("PUT", "/api/v1/balance/auto-top-up", tok, `{"threshold_cents":0,"amount_cents":0}`)
	if err := json.Unmarshal([]byte(r.body), &a); err != nil || r.status != http.StatusOK || a.On {
		t.Fatalf("clear: %d %s", r.status, r.body)
	}
	requireReconciled(t, app.testApp)
}
