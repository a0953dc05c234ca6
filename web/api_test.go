package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// apiCall sends a JSON request with a bearer token.
func (a *testApp) apiCall(method, path, token, body string) response {
	a.t.Helper()
	req, err := http.NewRequest(method, a.srv.URL+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	r := read(a.t, resp)
	a.conformsToContract(req, []byte(body), resp, r.body) // every answer, against web/openapi.json
	return r
}

var newTokenRe = regexp.MustCompile(`data-testid="new-token">[\s\S]*?<div class="mono"[^>]*>([^<]+)</div>`)

// createToken creates a token on the account page and returns it as shown
// once, on the page the creation redirects to.
func (c *client) createToken(name, scope string) string {
	c.app.t.Helper()
	r := c.post("/account", "/account/tokens", url.Values{"token_name": {name}, "token_scope": {scope}})
	if r.status != http.StatusSeeOther || r.location != "/account#tok-h" {
		c.app.t.Fatalf("create token: %d → %q\n%s", r.status, r.location, r.body)
	}
	r = c.get(r.location)
	m := newTokenRe.FindStringSubmatch(r.body)
	if m == nil {
		c.app.t.Fatal("token not shown")
	}
	return strings.TrimSpace(m[1])
}

const apiTrainingRequest = `{"version":1,"workload":{"kind":"training","devices":8,"hours":24,"checkpoint_mins":60,"restart_mins":10},
 "constraints":{"families":["H100"],"earliest_start":"2026-12-01T10:00:00Z","deadline":"2026-12-08T10:00:00Z"}}`

func TestAPIQuoteBookListCancel(t *testing.T) {
	app := newTestApp(t)
	offer := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()
	c.signUp("bot@example.com", false)
	write := c.createToken("ci", "write")
	read := c.createToken("dashboards", "read")
	if strings.Contains(c.get("/account").body, write) {
		t.Fatal("the token is shown again after creation")
	}

	r := app.apiCall("POST", "/api/v1/quotes", read, apiTrainingRequest)
	if r.status != http.StatusOK {
		t.Fatalf("quotes: %d %s", r.status, r.body)
	}
	var quotes apiQuotes
	if err := json.Unmarshal([]byte(r.body), &quotes); err != nil {
		t.Fatal(err)
	}
	if len(quotes.Quotes) != 1 || quotes.Quotes[0].Pieces[0].OfferID != offer.ID || quotes.Quotes[0].Cost.Instance != 42048 {
		t.Fatalf("quotes: %+v", quotes)
	}

	booking := `{"request":` + apiTrainingRequest + `,"quote_id":"` + quotes.Quotes[0].QuoteID + `"}`
	if r := app.apiCall("POST", "/api/v1/reservations", read, booking); r.status != http.StatusForbidden {
		t.Fatalf("read token booked: %d", r.status)
	}
	r = app.apiCall("POST", "/api/v1/reservations", write, booking)
	if r.status != http.StatusCreated {
		t.Fatalf("book: %d %s", r.status, r.body)
	}
	var res apiReservation
	if err := json.Unmarshal([]byte(r.body), &res); err != nil {
		t.Fatal(err)
	}
	if res.State != "held" || res.AmountCents != 42048 || res.HoldExpiresAt == nil {
		t.Fatalf("reservation: %+v", res)
	}
	// Booking the same quote again: the devices are taken.
	r = app.apiCall("POST", "/api/v1/reservations", write, booking)
	if r.status != http.StatusConflict || !strings.Contains(r.body, `"code":"conflict"`) {
		t.Fatalf("double booking: %d %s", r.status, r.body)
	}

	r = app.apiCall("GET", "/api/v1/reservations", read, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state":"held"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	other := app.client()
	other.signUp("other-bot@example.com", false)
	otherTok := other.createToken("x", "write")
	if r := app.apiCall("GET", "/api/v1/reservations/"+itoa(res.ID), otherTok, ""); r.status != http.StatusNotFound {
		t.Fatalf("another buyer's reservation: %d", r.status)
	}
	if r := app.apiCall("POST", "/api/v1/reservations/"+itoa(res.ID)+"/cancel", otherTok, ""); r.status != http.StatusNotFound {
		t.Fatalf("another buyer cancelled: %d", r.status)
	}
	r = app.apiCall("POST", "/api/v1/reservations/"+itoa(res.ID)+"/cancel", write, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
}

func TestAPIErrors(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("err@example.com", true)
	tok := c.createToken("t", "write")

	if r := app.apiCall("POST", "/api/v1/quotes", "", apiTrainingRequest); r.status != http.StatusUnauthorized || !strings.Contains(r.body, `"code":"unauthorized"`) {
		t.Fatalf("no token: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/quotes", "gpm_forged", apiTrainingRequest); r.status != http.StatusUnauthorized {
		t.Fatalf("forged token: %d", r.status)
	}
	r := app.apiCall("POST", "/api/v1/quotes", tok, `{"version":1,"workload":{"kind":"training","devices":"eight"}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "workload.devices") {
		t.Fatalf("wrong type: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/quotes", tok, `{"version":1,"workload":{"kind":"training","devices":8,"hours":24,"gpus":2}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "gpus") {
		t.Fatalf("unknown field: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/quotes", tok, `{"version":1,"workload":{"kind":"training","devices":0,"hours":24}}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"workload.devices"`) {
		t.Fatalf("out of range: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/reservations", tok, `{"request": {}, "quote_id": 5}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "quote_id") {
		t.Fatalf("booking body: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/provider/offers", tok, `{"version":1,"title":"x","accelerator":"nvidia-h100-80gb-sxm","memory_gb":96}`)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "memory_gb") {
		t.Fatalf("bad offer: %d %s", r.status, r.body)
	}
}

func TestAPITokenRevocationAndSuspension(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("rev@example.com", false)
	tok := c.createToken("t", "read")
	if r := app.apiCall("GET", "/api/v1/offers", tok, ""); r.status != http.StatusOK {
		t.Fatalf("offers: %d", r.status)
	}
	page := c.get("/account").body
	m := regexp.MustCompile(`action="(/account/tokens/\d+/revoke)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no revoke form")
	}
	if r := c.post("/account", m[1], url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("revoke: %d", r.status)
	}
	if r := app.apiCall("GET", "/api/v1/offers", tok, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("revoked token still works: %d", r.status)
	}

	tok2 := c.createToken("t2", "read")
	app.suspend(c.userIDByEmail("rev@example.com"))
	if r := app.apiCall("GET", "/api/v1/offers", tok2, ""); r.status != http.StatusUnauthorized {
		t.Fatalf("suspended user's token still works: %d", r.status)
	}
}

func TestAPIRateLimit(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("fast@example.com", false)
	tok := c.createToken("t", "read")
	limited := false
	for i := 0; i < 200 && !limited; i++ {
		r := app.apiCall("GET", "/api/v1/offers?limit=1", tok, "")
		limited = r.status == http.StatusTooManyRequests
	}
	if !limited {
		t.Fatal("200 requests at once were never rate limited")
	}
}

func TestAPIProviderOffers(t *testing.T) {
	app := newTestApp(t)
	owner := app.client()
	owner.signUp("api-prov@example.com", true)
	tok := owner.createToken("t", "write")
	form := validOfferForm()
	id := owner.createOffer(form)
	r := app.apiCall("GET", "/api/v1/provider/offers", tok, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"review":"pending"`) {
		t.Fatalf("list: %d %s", r.status, r.body)
	}
	var list apiOfferList
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Offers) != 1 {
		t.Fatalf("decode: %v %s", err, r.body)
	}
	doc := strings.Replace(string(list.Offers[0].Contract), `"price_cents":239`, `"price_cents":199`, 1)
	if r := app.apiCall("PUT", "/api/v1/provider/offers/"+itoa(id), tok, doc); r.status != http.StatusOK || !strings.Contains(r.body, `"price_cents":199`) {
		t.Fatalf("update: %d %s", r.status, r.body)
	}
	other := app.client()
	other.signUp("api-other@example.com", true)
	otherTok := other.createToken("t", "write")
	if r := app.apiCall("PUT", "/api/v1/provider/offers/"+itoa(id), otherTok, doc); r.status != http.StatusNotFound {
		t.Fatalf("another provider updated the offer: %d", r.status)
	}
	if r := app.apiCall("POST", "/api/v1/provider/offers/"+itoa(id)+"/state", otherTok, `{"state":"withdrawn"}`); r.status != http.StatusNotFound {
		t.Fatalf("another provider withdrew the offer: %d", r.status)
	}
}

func (c *client) userIDByEmail(email string) int64 {
	u, _, err := c.app.db.FindUserByEmail(context.Background(), email)
	if err != nil {
		c.app.t.Fatal(err)
	}
	return u.ID
}
