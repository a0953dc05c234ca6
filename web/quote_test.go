package web

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// asapQuery is trainingQuery without an earliest start: "as soon as possible".
func asapQuery() url.Values {
	q := trainingQuery()
	q.Del("constraints.earliest_start")
	return q
}

// TestReserveASAPAfterWaiting: a quote for "as soon as possible" is honoured
// for its stated validity — the buyer who reserves a few seconds (or almost 5
// minutes) later gets it at the quoted price, starting when they reserved,
// and is told that start; after the validity it is refused with fresh quotes.
func TestReserveASAPAfterWaiting(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("asap@example.com", false)
	// 8 devices for 24 hours at $2.19 per device-hour, nothing else charged.
	const amount = market.Cents(8 * 24 * 219)

	for i, wait := range []time.Duration{4 * time.Second, market.QuoteValidity} {
		quotedAt := testNow.Add(time.Duration(i) * 48 * time.Hour) // after the previous booking
		app.clock.set(quotedAt)
		page := buyer.get("/requests?" + asapQuery().Encode()).body
		until := quotedAt.Add(5 * time.Minute).Format("2 Jan 2006 15:04 UTC")
		mustContain(t, page, `data-testid="quote-validity"`, "Price held until "+until+" (5 minutes).", "it starts when you reserve")
		reqJSON, quoteID := firstQuote(t, page)

		app.clock.set(quotedAt.Add(wait))
		r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
		if r.status != http.StatusSeeOther {
			t.Fatalf("reserve %s after the quote: %d\n%s", wait, r.status, r.body)
		}
		id, _ := strconv.ParseInt(strings.TrimPrefix(r.location, "/reservations/"), 10, 64)
		res, err := app.db.FindReservation(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		start := quotedAt.Add(wait)
		if !res.Start().Equal(start) || !res.End().Equal(start.Add(24*time.Hour)) || res.AmountCents != amount {
			t.Fatalf("reserved %s – %s for %s; want from the booking, %s, for 24 hours, for %s", res.Start(), res.End(), res.AmountCents, start, amount)
		}
		// The buyer is told the start they got.
		mustContain(t, buyer.get(r.location).body, "Reserved from "+start.Format("2 Jan 2006 15:04 UTC")+" to "+start.Add(24*time.Hour).Format("2 Jan 2006 15:04 UTC"))
	}

	// One second past the validity the quote is refused, with fresh quotes that book.
	quotedAt := testNow.Add(96 * time.Hour)
	app.clock.set(quotedAt)
	reqJSON, quoteID := firstQuote(t, buyer.get("/requests?"+asapQuery().Encode()).body)
	app.clock.set(quotedAt.Add(market.QuoteValidity + time.Second))
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if r.status != http.StatusConflict {
		t.Fatalf("an expired quote: %d, want 409", r.status)
	}
	mustContain(t, r.body, `data-testid="quotes-message"`, "That quote has expired: quotes are held for 5 minutes. Here are fresh quotes.")
	reqJSON, fresh := firstQuote(t, r.body)
	if r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {fresh}}); r.status != http.StatusSeeOther {
		t.Fatalf("the fresh quote: %d\n%s", r.status, r.body)
	}
}

// TestReservePinnedStartStaysPut: with an earliest start the buyer chose,
// waiting does not move the booking.
func TestReservePinnedStartStaysPut(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	buyer := app.client()
	buyer.signUp("pinned@example.com", false)
	page := buyer.get("/requests?" + trainingQuery().Encode()).body
	mustNotContain(t, page, "it starts when you reserve")
	reqJSON, quoteID := firstQuote(t, page)
	app.clock.set(testNow.Add(3 * time.Minute))
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(r.location, "/reservations/"), 10, 64)
	res, err := app.db.FindReservation(context.Background(), id)
	if want := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC); err != nil || !res.Start().Equal(want) {
		t.Fatalf("reserved from %s (%v), want the chosen %s", res.Start(), err, want)
	}
}

// apiASAPRequest is the request of docs/api.md's example: no earliest start.
const apiASAPRequest = `{"version":1,"workload":{"kind":"training","devices":8,"hours":24,"checkpoint_mins":60,"restart_mins":10},
 "constraints":{"families":["H100"]},"preferences":{"cost_weight":100},"limit":3}`

// TestAPIQuoteWaitReserve is docs/api.md's curl example: quote, wait, reserve.
// A lost race answers 409 with fresh quotes, one of which books.
func TestAPIQuoteWaitReserve(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	alice := app.client()
	alice.signUp("alice@example.com", false)
	aliceTok := alice.createToken("ci", "write")
	bob := app.client()
	bob.signUp("bob@example.com", false)
	bobTok := bob.createToken("ci", "write")

	quote := func(tok string) apiQuote {
		t.Helper()
		r := app.apiCall(http.MethodPost, "/api/v1/quotes", tok, apiASAPRequest)
		var out apiQuotes
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &out) != nil || len(out.Quotes) == 0 {
			t.Fatalf("quotes: %d %s", r.status, r.body)
		}
		return out.Quotes[0]
	}
	book := func(tok, quoteID string) response {
		t.Helper()
		return app.apiCall(http.MethodPost, "/api/v1/reservations", tok, `{"request":`+apiASAPRequest+`,"quote_id":"`+quoteID+`"}`)
	}

	q := quote(aliceTok)
	if !q.QuotedAt.Equal(testNow) || !q.ValidUntil.Equal(testNow.Add(5*time.Minute)) || !q.Start.Equal(testNow) {
		t.Fatalf("quote made %s valid until %s starting %s; want %s, 5 minutes later, now", q.QuotedAt, q.ValidUntil, q.Start, testNow)
	}
	bobsQuote := quote(bobTok)

	app.clock.set(testNow.Add(time.Second))
	r := book(aliceTok, q.QuoteID)
	var got apiReservation
	if r.status != http.StatusCreated || json.Unmarshal([]byte(r.body), &got) != nil {
		t.Fatalf("reserve a second after the quote: %d %s", r.status, r.body)
	}
	if len(got.Pieces) != 1 || !got.Pieces[0].Start.Equal(testNow.Add(time.Second)) || got.AmountCents != q.ChargedCents {
		t.Fatalf("reserved %+v, want from %s for the quoted %s", got, testNow.Add(time.Second), q.ChargedCents)
	}

	// Bob's quote was for the same devices: 409, with fresh quotes after Alice's booking.
	r = book(bobTok, bobsQuote.QuoteID)
	var conflict struct {
		Error  apiError   `json:"error"`
		Quotes []apiQuote `json:"quotes"`
	}
	if r.status != http.StatusConflict || json.Unmarshal([]byte(r.body), &conflict) != nil {
		t.Fatalf("the lost race: %d %s", r.status, r.body)
	}
	if conflict.Error.Code != market.CodeConflict || !strings.Contains(conflict.Error.Message, "Here are fresh quotes") || len(conflict.Quotes) == 0 {
		t.Fatalf("the 409 is %+v, want the conflict and fresh quotes", conflict)
	}
	fresh := conflict.Quotes[0]
	if fresh.Start.Before(got.Pieces[0].End) {
		t.Fatalf("the fresh quote starts %s, inside Alice's booking (to %s)", fresh.Start, got.Pieces[0].End)
	}
	if r := book(bobTok, fresh.QuoteID); r.status != http.StatusCreated {
		t.Fatalf("booking the fresh quote: %d %s", r.status, r.body)
	}

	// A quote id from elsewhere is refused as invalid, naming the field.
	if r := book(bobTok, "7:8:1796115600:1796158800:0"); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"quote_id"`) {
		t.Fatalf("a malformed quote id: %d %s", r.status, r.body)
	}
}
