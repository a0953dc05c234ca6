package web

import (
	"encoding/json"
	"net/http"
	"testing"
)

// TestQuotesAtLeast: when the matcher stops once no other offer could
// rank, the page and the API say the total is a lower bound.
func TestQuotesAtLeast(t *testing.T) {
	app := newTestApp(t)
	// Nodes of 16 leave 8 free under the 8-device gang, so no cheap offer
	// wins every tie before the others are seen (the matcher stops at an
	// exact fit): all 11 are evaluated, the 2 dear ones are not.
	for range 11 {
		app.listedOffer("nvidia-h100-80gb-sxm", 16, 1, "us-east-va", 219)
	}
	for range 2 {
		app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 900)
	}
	buyer := app.client()
	buyer.signUp("atleast@example.com", false)
	r := buyer.get("/requests?" + trainingQuery().Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	mustContain(t, r.body, "Best 5 of at least 11 ways to run it")

	tok := buyer.createToken("q", "read")
	ar := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, apiQuoteBody(t, trainingQuery()))
	var out apiQuotes
	if err := json.Unmarshal([]byte(ar.body), &out); err != nil || ar.status != http.StatusOK {
		t.Fatalf("API: %d %v\n%s", ar.status, err, ar.body)
	}
	if s := out.Search; s.Exhaustive || s.NotEvaluated != 2 || !s.Complete || out.Total != 11 || len(out.Quotes) != 5 {
		t.Fatalf("API: total %d, %d quotes, search %+v", out.Total, len(out.Quotes), s)
	}

	// With the dear offers over the maximum price the search is
	// exhaustive and says so.
	q := trainingQuery()
	q.Set("constraints.max_price", "5.00")
	ar = app.apiCall(http.MethodPost, "/api/v1/quotes", tok, apiQuoteBody(t, q))
	out = apiQuotes{}
	if err := json.Unmarshal([]byte(ar.body), &out); err != nil || !out.Search.Exhaustive || out.Search.NotEvaluated != 0 || out.Total != 11 {
		t.Fatalf("API under the maximum price: %v total %d %+v", err, out.Total, out.Search)
	}
}
