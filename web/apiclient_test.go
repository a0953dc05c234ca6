package web

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The routes the command-line client added (apiclient.go), through real
// HTTP; apiCall validates every answer against web/openapi.json.
func TestAPIPayExtendResaleAndHosts(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("api-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	provTok := prov.createToken("agents", "write")
	buyer := app.client()
	buyer.signUp("api-buyer@example.com", false)
	tok := buyer.createToken("cli", "write")

	var quotes apiQuotes
	r := app.apiCall("POST", "/api/v1/quotes", tok, apiTrainingRequest)
	if err := json.Unmarshal([]byte(r.body), &quotes); err != nil || len(quotes.Quotes) != 1 {
		t.Fatalf("quotes: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/reservations", tok, `{"request":`+apiTrainingRequest+`,"quote_id":"`+quotes.Quotes[0].QuoteID+`"}`)
	var res apiReservation
	if err := json.Unmarshal([]byte(r.body), &res); err != nil || r.status != http.StatusCreated {
		t.Fatalf("book: %d %s", r.status, r.body)
	}
	pay := "/api/v1/reservations/" + itoa(res.ID) + "/pay"

	// Pay with the saved card: none yet is a 400 naming payment_method.
	if r := app.apiCall("POST", pay, tok, ""); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"payment_method"`) {
		t.Fatalf("pay without a card: %d %s", r.status, r.body)
	}
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	for range 2 { // a repeated press is paid once (the reconciliation at the end checks the processor)
		r = app.apiCall("POST", pay, tok, "")
		var paid apiReservationDetail
		if err := json.Unmarshal([]byte(r.body), &paid); err != nil || r.status != http.StatusOK || paid.State != "confirmed" || paid.AmountCents != 8*24*219 {
			t.Fatalf("pay: %d %s", r.status, r.body)
		}
	}

	// Extend: only a running reservation; priced; the price seen is checked.
	ext := "/api/v1/reservations/" + itoa(res.ID) + "/extension"
	if r := app.apiCall("GET", ext+"?hours=2", tok, ""); r.status != http.StatusConflict {
		t.Fatalf("extension before the start: %d %s", r.status, r.body)
	}
	app.tick(res.Pieces[0].Start)
	// Resale of the rest, from a whole hour, then withdrawn.
	from := res.Pieces[0].Start.Add(6 * time.Hour)
	r = app.apiCall("POST", "/api/v1/reservations/"+itoa(res.ID)+"/resale", tok, `{"from":"`+from.Format(time.RFC3339)+`","price_cents":20000}`)
	var listing apiResale
	if err := json.Unmarshal([]byte(r.body), &listing); err != nil || r.status != http.StatusCreated || listing.State != "open" || listing.PriceCents != 20000 ||
		!listing.From.Equal(from) || !listing.End.Equal(res.Pieces[0].End) || listing.ReservationID != res.ID || listing.Devices != 8 {
		t.Fatalf("resale: %d %s", r.status, r.body)
	}
	if r := app.apiCall("GET", "/api/v1/resale", provTok, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"id":`+itoa(listing.ID)) ||
		strings.Contains(r.body, `"reservation_id"`) {
		t.Fatalf("resale list to another: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/resale/"+itoa(listing.ID)+"/withdraw", provTok, ""); r.status != http.StatusNotFound {
		t.Fatalf("withdrawn by another: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/resale/"+itoa(listing.ID)+"/withdraw", tok, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"state":"withdrawn"`) {
		t.Fatalf("withdraw: %d %s", r.status, r.body)
	}
	r = app.apiCall("GET", ext+"?hours=2", tok, "")
	var eq apiExtension
	if err := json.Unmarshal([]byte(r.body), &eq); err != nil || r.status != http.StatusOK || eq.Hours != 2 || eq.AmountCents != 8*2*219 ||
		len(eq.Pieces) != 1 || !eq.Pieces[0].Start.Equal(res.Pieces[0].End) || eq.MaxHours < 2 {
		t.Fatalf("extension quote: %d %s", r.status, r.body)
	}
	if r := app.apiCall("GET", ext+"?hours=two", tok, ""); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"hours"`) {
		t.Fatalf("bad hours: %d %s", r.status, r.body)
	}
	extend := "/api/v1/reservations/" + itoa(res.ID) + "/extend"
	if r := app.apiCall("POST", extend, tok, `{"hours":2}`); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"amount_cents"`) {
		t.Fatalf("extend without the amount: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", extend, tok, `{"hours":2,"amount_cents":1}`); r.status != http.StatusConflict {
		t.Fatalf("extend at another price: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", extend, tok, `{"hours":2,"amount_cents":3504}`)
	var x apiReservation
	if err := json.Unmarshal([]byte(r.body), &x); err != nil || r.status != http.StatusCreated || x.State != "held" || x.AmountCents != 3504 || x.ID == res.ID {
		t.Fatalf("extend: %d %s", r.status, r.body)
	}

	// Resale: the fields named; the list; another buyer's reservation is not found.
	if r := app.apiCall("GET", "/api/v1/resale", tok, ""); r.status != http.StatusOK || !strings.Contains(r.body, `"listings":[]`) {
		t.Fatalf("resale list: %d %s", r.status, r.body)
	}
	sell := "/api/v1/reservations/" + itoa(res.ID) + "/resale"
	if r := app.apiCall("POST", sell, tok, `{}`); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"from"`) || !strings.Contains(r.body, `"price_cents"`) {
		t.Fatalf("resale without terms: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", sell, provTok, `{"from":"`+from.Format(time.RFC3339)+`","price_cents":20000}`); r.status != http.StatusNotFound {
		t.Fatalf("another's reservation listed: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/resale/999/withdraw", tok, ""); r.status != http.StatusNotFound {
		t.Fatalf("withdraw of nothing: %d %s", r.status, r.body)
	}

	// Hosts: a provider's only; a node's token, shown once.
	if r := app.apiCall("GET", "/api/v1/provider/hosts", tok, ""); r.status != http.StatusForbidden {
		t.Fatalf("a buyer's hosts: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/provider/hosts/tokens", provTok, `{}`); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, `"offer_id"`) || !strings.Contains(r.body, `"node"`) {
		t.Fatalf("host token without offer and node: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", "/api/v1/provider/hosts/tokens", provTok, `{"offer_id":`+itoa(o.ID)+`,"node":0}`)
	var ht apiHostToken
	if err := json.Unmarshal([]byte(r.body), &ht); err != nil || r.status != http.StatusCreated || !strings.HasPrefix(ht.Token, "gph_") || ht.OfferID != o.ID || ht.Node != 0 {
		t.Fatalf("host token: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/provider/hosts/tokens", provTok, `{"offer_id":`+itoa(o.ID)+`,"node":5}`); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"node"`) {
		t.Fatalf("host token for a node the offer lacks: %d %s", r.status, r.body)
	}
	app.beat(ht.Token, heartbeatBody(1, 8))
	r = app.apiCall("GET", "/api/v1/provider/hosts", provTok, "")
	var hosts struct {
		Offers []apiHostOffer `json:"offers"`
	}
	if err := json.Unmarshal([]byte(r.body), &hosts); err != nil || r.status != http.StatusOK || len(hosts.Offers) != 1 || hosts.Offers[0].OfferID != o.ID ||
		len(hosts.Offers[0].Nodes) != 1 || !hosts.Offers[0].Nodes[0].Online || hosts.Offers[0].Nodes[0].HealthyDevices != 8 ||
		hosts.Offers[0].Nodes[0].TokenPrefix == "" || !strings.HasPrefix(ht.Token, hosts.Offers[0].Nodes[0].TokenPrefix) || hosts.Offers[0].Nodes[0].Rentals != 1 {
		t.Fatalf("hosts: %d %s", r.status, r.body)
	}
	requireReconciled(t, app.testApp)
}
