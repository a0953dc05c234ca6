package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestSpotIndicativeShown: the offer page and the API show the next
// hour's indicative clearing price: the floor with no bids, the floor
// while every bid fits, the marginal winner's maximum once bids exceed
// the capacity. Figures by hand: 4 devices, floor 100¢; bids 2@150 and
// 2@120 fit (100¢); with 2@300 more, 300 and 150 win and 150 is paid.
func TestSpotIndicativeShown(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host-ind@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.DevicesPerNode, o.Nodes = 4, 1
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, 100, 30
	})
	buyer := app.client()
	buyer.signUp("bidder-ind@example.com", false)
	token := buyer.createToken("look", "read")
	offerPath := fmt.Sprintf("/offers/%d", o.ID)
	apiPath := offerPath + "/spot/indicative"
	next := testNow.Truncate(time.Hour).Add(time.Hour) // 10:00: 09:00 + 30 minutes' notice, rounded up to the next hour
	hourText := formatSpan(next, next.Add(time.Hour))

	check := func(price string, cents int64, basis string, bid, sold int) {
		t.Helper()
		page := buyer.get(offerPath).body
		if v := testidValue(t, page, "spot-indicative-price"); v != price {
			t.Fatalf("page indicative price %q, want %q", v, price)
		}
		if v := testidValue(t, page, "spot-indicative-hour"); v != hourText {
			t.Fatalf("page indicative hour %q, want %q", v, hourText)
		}
		mustContain(t, page, basis, "Indicative: changes as bids arrive", "assumes every live bid&#39;s card hold succeeds")
		r := app.apiCall("GET", "/api/v1"+apiPath, token, "")
		var got apiSpotIndicative
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != http.StatusOK {
			t.Fatalf("api: %d %s %v", r.status, r.body, err)
		}
		want := apiSpotIndicative{OfferID: o.ID, Hour: next, PriceCents: cents, FloorCents: 100, Capacity: 4, DevicesBid: bid, DevicesSold: sold, Note: spotIndicativeNote}
		if got != want {
			t.Fatalf("api: %+v, want %+v", got, want)
		}
	}
	check("$1.00", 100, "the floor: no bids at or above it yet", 0, 0)

	bid := func(email string, devices int, max market.Cents) {
		t.Helper()
		c := app.client()
		c.signUp(email, false)
		if _, err := app.db.PlaceSpotBid(ctx, market.SpotBid{BuyerID: c.userID(), OfferID: o.ID, Devices: devices, MaxCents: max,
			FirstHour: next, LastHour: next, ConfirmAboveOnDemand: true}, testNow); err != nil {
			t.Fatalf("PlaceSpotBid: %v", err)
		}
	}
	bid("b150@example.com", 2, 150)
	bid("b120@example.com", 2, 120)
	check("$1.00", 100, "4 devices bid for 4 devices on sale", 4, 4)
	bid("b300@example.com", 2, 300)
	check("$1.50", 150, "6 devices bid for 4 devices on sale", 6, 4)

	// An offer selling no spot capacity has none.
	plain := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	if r := app.apiCall("GET", fmt.Sprintf("/api/v1/offers/%d/spot/indicative", plain.ID), token, ""); r.status != http.StatusNotFound {
		t.Fatalf("plain offer: %d %s", r.status, r.body)
	}
}
