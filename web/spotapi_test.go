package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestSpotBidAPI: a programmatic buyer places, lists and cancels spot bids
// through /api/v1 under the form's rules — a saved card, the floor, write
// scope — and another buyer cannot cancel theirs.
func TestSpotBidAPI(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host-api@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, 120, 30
	})
	buyer := app.client()
	buyer.signUp("bidder-api@example.com", false)
	write, read := buyer.createToken("bids", "write"), buyer.createToken("look", "read")
	first := testNow.Truncate(time.Hour).Add(2 * time.Hour)
	body := func(max int64) string {
		return fmt.Sprintf(`{"offer_id":%d,"devices":2,"max_cents_per_device_hour":%d,"first_hour":%q,"last_hour":%q}`,
			o.ID, max, first.Format(time.RFC3339), first.Add(time.Hour).Format(time.RFC3339))
	}

	if r := app.apiCall("POST", "/api/v1/spot/bids", write, body(150)); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, "Add a payment method on your account page first.") {
		t.Fatalf("bid without a card: %d %s", r.status, r.body)
	}
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	if r := app.apiCall("POST", "/api/v1/spot/bids", write, body(100)); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"max_cents_per_device_hour"`) {
		t.Fatalf("bid below the 120¢ floor: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/spot/bids", read, body(150)); r.status != http.StatusForbidden {
		t.Fatalf("read token bidding: %d", r.status)
	}
	r := app.apiCall("POST", "/api/v1/spot/bids", write, body(150))
	if r.status != http.StatusCreated {
		t.Fatalf("bid: %d %s", r.status, r.body)
	}
	var b apiSpotBid
	if err := json.Unmarshal([]byte(r.body), &b); err != nil || b.ID == 0 || b.State != "live" || b.MaxCents != 150 || b.Devices != 2 ||
		!b.FirstHour.Equal(first) || len(b.HoursWon) != 0 {
		t.Fatalf("placed: %+v %v", b, err)
	}
	var list struct{ Bids []apiSpotBid }
	r = app.apiCall("GET", "/api/v1/spot/bids", read, "")
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Bids) != 1 || list.Bids[0].ID != b.ID {
		t.Fatalf("list: %s %v", r.body, err)
	}
	other := app.client()
	other.signUp("other-bidder@example.com", false)
	if r := app.apiCall("POST", fmt.Sprintf("/api/v1/spot/bids/%d/cancel", b.ID), other.createToken("x", "write"), ""); r.status != http.StatusNotFound {
		t.Fatalf("another buyer's cancel: %d %s", r.status, r.body)
	}
	r = app.apiCall("POST", fmt.Sprintf("/api/v1/spot/bids/%d/cancel", b.ID), write, "")
	if r.status != http.StatusOK || !strings.Contains(r.body, `"state":"cancelled"`) {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
}
