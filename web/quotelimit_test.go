package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// quoteHeader asks for the quotes partial, as the builder's script does.
var quoteHeader = http.Header{"X-Quotes-Partial": {"1"}}

// TestAnonymousQuotesLimitedPerAddress: a visitor's quotes are limited per
// client address, counted by RealIP, so X-Forwarded-For from a peer that
// is not a trusted proxy escapes nothing; over the limit the builder
// answers 429 with Retry-After, keeps the form and says why. Another
// address, a signed-in buyer on the same address and an API token each
// have their own limit.
func TestAnonymousQuotesLimitedPerAddress(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	path := "/requests?" + trainingQuery().Encode()

	visitor := app.clientFrom("127.0.0.2")
	xff := &forwardedFor{next: visitor.http.Transport}
	visitor.http.Transport = xff
	for i := range anonQuoteBurst {
		xff.addr = "198.51.100." + strconv.Itoa(i+1) // forged, from an untrusted peer: ignored
		if r := visitor.get(path); r.status != http.StatusOK || !strings.Contains(r.body, `data-testid="quote"`) {
			t.Fatalf("quote %d: status %d", i+1, r.status)
		}
	}
	xff.addr = "203.0.113.99"
	r, hdr := visitor.do(http.MethodGet, path, nil, nil)
	if r.status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" {
		t.Fatalf("over the limit: status %d, Retry-After %q, want 429 and 1", r.status, hdr.Get("Retry-After"))
	}
	mustContain(t, r.body, `data-testid="quotes-message"`, "Too many quote requests from here: please wait 1 second and try again.",
		"Logged-in buyers may ask for quotes more often.", `name="workload.devices"`)
	mustNotContain(t, r.body, `data-testid="quote"`)
	r, hdr = visitor.do(http.MethodGet, path, nil, quoteHeader)
	if r.status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" || strings.Contains(r.body, "<html") {
		t.Fatalf("partial over the limit: status %d, Retry-After %q, a whole page %v", r.status, hdr.Get("Retry-After"), strings.Contains(r.body, "<html"))
	}
	mustContain(t, r.body, "Too many quote requests from here")
	// The builder without a request runs no matcher and is not limited.
	if r := visitor.get("/requests"); r.status != http.StatusOK {
		t.Fatalf("empty builder: %d", r.status)
	}

	if r := app.clientFrom("127.0.0.3").get(path); r.status != http.StatusOK {
		t.Fatalf("another address: %d, want 200", r.status)
	}

	buyer := app.clientFrom("127.0.0.2")
	buyer.signUp("quoter@example.com", false)
	for i := range userQuoteBurst {
		if r := buyer.get(path); r.status != http.StatusOK {
			t.Fatalf("signed-in quote %d from the limited address: %d, want 200", i+1, r.status)
		}
	}
	r, hdr = buyer.do(http.MethodGet, path, nil, nil)
	if r.status != http.StatusTooManyRequests || hdr.Get("Retry-After") != "1" {
		t.Fatalf("signed-in over its own limit: status %d, Retry-After %q", r.status, hdr.Get("Retry-After"))
	}
	mustNotContain(t, r.body, "Logged-in buyers may ask")

	tok := buyer.createToken("q", "read")
	body := apiQuoteBody(t, trainingQuery())
	if r := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, body); r.status != http.StatusOK {
		t.Fatalf("API token from the same machine: %d, want 200\n%s", r.status, r.body)
	}
}

// apiQuoteBody is the portable request JSON of the builder's query.
func apiQuoteBody(t *testing.T, q url.Values) string {
	t.Helper()
	req, errs := requestFromValues(readRequestForm(q, testNow))
	if errs != nil {
		t.Fatal(errs)
	}
	b, err := market.EncodeRequestJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestAPIRateLimitRetryAfter: the token's limit says when to come back,
// in the JSON error's shape.
func TestAPIRateLimitRetryAfter(t *testing.T) {
	app := newTestAppWith(t, func(c *Config) { c.APIRatePerSecond = 0.5 })
	c := app.client()
	c.signUp("slow@example.com", false)
	tok := c.createToken("t", "read")
	for i := range 1 { // burst: twice the rate
		if r := app.apiCall(http.MethodGet, "/api/v1/ping", tok, ""); r.status != http.StatusOK {
			t.Fatalf("call %d: %d", i+1, r.status)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, app.srv.URL+"/api/v1/ping", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := read(t, resp)
	if r.status != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" || !strings.Contains(r.body, `"code":"rate_limited"`) {
		t.Fatalf("over the limit: %d, Retry-After %q\n%s", r.status, resp.Header.Get("Retry-After"), r.body)
	}
}

// TestQuotesWithinBudget: a request over the work budget is answered over
// the cheapest offers, says so on the page and in the API, and its quote
// books (the booking runs within the same budget, so it finds it).
func TestQuotesWithinBudget(t *testing.T) {
	app := newTestAppWith(t, func(c *Config) { c.QuoteBudget = market.Budget{Offers: 2} })
	cheap := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 239)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 259)
	buyer := app.client()
	buyer.signUp("budget@example.com", false)

	r := buyer.get("/requests?" + trainingQuery().Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	if n := strings.Count(r.body, `data-testid="quote"`); n != 2 {
		t.Fatalf("%d quotes, want the 2 cheapest offers'", n)
	}
	mustContain(t, r.body, `data-testid="quotes-cut"`, "among the 2 offers with the lowest prices (up to $2.39 per device-hour); 1 dearer offer was not examined",
		"Best 2 of at least 2 ways to run it, among the offers examined")
	first := r.body[strings.Index(r.body, `data-testid="quote"`):]
	mustContain(t, first[:strings.Index(first, `</article>`)], "/offers/"+itoa(cheap.ID))

	reqJSON, quoteID := firstQuote(t, r.body)
	if r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}}); r.status != http.StatusSeeOther {
		t.Fatalf("booking the cut quote: %d\n%s", r.status, r.body)
	}

	tok := buyer.createToken("q", "read")
	ar := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, apiQuoteBody(t, trainingQuery()))
	var out apiQuotes
	if err := json.Unmarshal([]byte(ar.body), &out); err != nil || ar.status != http.StatusOK {
		t.Fatalf("API: %d %v\n%s", ar.status, err, ar.body)
	}
	if s := out.Search; s.Complete || s.Examined != 2 || s.NotExamined != 1 || s.PriceCeilingCents != 239 || !strings.Contains(s.Message, "1 dearer offer was not examined") {
		t.Fatalf("API search: %+v", s)
	}

	// Within the budget (one model, one region) the search is complete.
	q := trainingQuery()
	q.Set("constraints.regions", "us-east-va")
	ar = app.apiCall(http.MethodPost, "/api/v1/quotes", tok, apiQuoteBody(t, q))
	out = apiQuotes{}
	if err := json.Unmarshal([]byte(ar.body), &out); err != nil || !out.Search.Complete || out.Search.Message != "" || out.Search.NotExamined != 0 {
		t.Fatalf("narrow API search: %v %+v", err, out.Search)
	}
	r = buyer.get("/requests?" + q.Encode())
	mustNotContain(t, r.body, `data-testid="quotes-cut"`)
}
