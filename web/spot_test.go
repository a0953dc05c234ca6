package web

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
)

// saveTestCard saves a local test card as the user's payment method, as
// the account page's setup flow does.
func (a *billingApp) saveTestCard(userID int64, number string) {
	a.t.Helper()
	ctx := context.Background()
	co, err := a.pay.Local.CreateSetupCheckout(ctx, billing.SetupInput{UserID: userID, SuccessURL: "http://127.0.0.1/account", CancelURL: "http://127.0.0.1/account"})
	if err != nil {
		a.t.Fatal(err)
	}
	m, err := a.pay.Local.CompleteSetup(co.ID, number)
	if err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.db.SavePaymentMethod(ctx, userID, market.PaymentMethod{Customer: m.Customer, ProcessorMethodID: m.PaymentMethodID, Label: m.Label}, a.clock.now()); err != nil {
		a.t.Fatal(err)
	}
}

// TestSpotBidFlow: the bid form on an interruptible offer's page needs a
// saved card; bad input is 422 with the input kept and messages by the
// fields; a bid is placed with the session's CSRF token only; the clearing
// shows the won hour and its price on /spot; only the owner cancels.
func TestSpotBidFlow(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, 120, 30
	})
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	offerPath := fmt.Sprintf("/offers/%d", o.ID)
	bidPath := offerPath + "/spot-bids"
	first := testNow.Truncate(time.Hour).Add(2 * time.Hour) // 11:00, clears at 10:30
	bidForm := func() url.Values {                          // fresh each time: post adds the CSRF token to the values
		return url.Values{"devices": {"2"}, "max_price": {"1.50"},
			"first_hour": {first.Format("2006-01-02T15:04")}, "last_hour": {first.Add(time.Hour).Format("2006-01-02T15:04")}}
	}

	// Signed out: the panel asks to log in.
	anon := app.client()
	mustContain(t, anon.get(offerPath).body, `data-testid="spot-panel"`, `data-testid="spot-login"`, "$1.20 per device-hour")
	// No saved card: a link to the account page, and a post is refused.
	page := buyer.get(offerPath).body
	mustContain(t, page, `data-testid="spot-needs-card"`, `href="/account"`)
	mustNotContain(t, page, `data-testid="spot-form"`)
	if got := buyer.post(offerPath, bidPath, bidForm()); got.status != http.StatusUnprocessableEntity || !strings.Contains(got.body, "Add a payment method on your account page first.") {
		t.Fatalf("bid without a card: %d", got.status)
	}
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	mustContain(t, buyer.get(offerPath).body, `data-testid="spot-form"`, `name="max_price"`)

	// Bad input: 422, the input kept, each message by its field; nothing stored.
	bad := url.Values{"devices": {"two"}, "max_price": {"1.00"}, "first_hour": {first.Add(time.Minute).Format("2006-01-02T15:04")}, "last_hour": bidForm()["last_hour"]}
	got := buyer.post(offerPath, bidPath, bad)
	if got.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad bid: %d", got.status)
	}
	mustContain(t, got.body, `data-testid="error-devices"`, `value="two"`, `data-testid="error-first_hour"`)
	below := url.Values{"devices": {"2"}, "max_price": {"1.00"}, "first_hour": bidForm()["first_hour"], "last_hour": bidForm()["last_hour"]}
	got = buyer.post(offerPath, bidPath, below)
	mustContain(t, got.body, `data-testid="error-max_price"`, "The provider&#39;s floor is $1.20 per device-hour")
	if got.status != http.StatusUnprocessableEntity {
		t.Fatalf("bid below the floor: %d", got.status)
	}
	// Without the CSRF token: refused.
	if got := buyer.postRaw(bidPath, bidForm()); got.status != http.StatusForbidden {
		t.Fatalf("bid without CSRF: %d", got.status)
	}
	if recs, _ := app.db.ListBuyerSpotBids(context.Background(), buyer.userID()); len(recs) != 0 {
		t.Fatalf("refused bids stored: %+v", recs)
	}
	// The provider cannot bid on their own offer, and sees the book instead of the form.
	app.saveTestCard(prov.userID(), "4242 4242 4242 4242")
	provPage := prov.get(offerPath).body
	mustContain(t, provPage, "Spot book", `data-testid="spot-live"`)
	mustNotContain(t, provPage, `data-testid="spot-form"`)
	if got := prov.post(offerPath, bidPath, bidForm()); got.status != http.StatusConflict {
		t.Fatalf("own offer bid: %d", got.status)
	}

	got = buyer.post(offerPath, bidPath, bidForm())
	if got.status != http.StatusSeeOther || got.location != "/spot" {
		t.Fatalf("bid: %d %q\n%s", got.status, got.location, got.body)
	}
	spot := buyer.get("/spot").body
	mustContain(t, spot, "Live", "$1.50 per device-hour", `data-testid="spot-cancel"`)
	if v := testidValue(t, prov.get(offerPath).body, "spot-live"); v != "1 live bid for 2 devices" {
		t.Fatalf("provider's book: %q", v)
	}

	// 10:30: 11:00 clears; one bid fits, so it pays the floor.
	app.tick(first.Add(-30 * time.Minute))
	spot = buyer.get("/spot").body
	if v := testidValue(t, spot, "spot-hour-price"); v != "$1.20" {
		t.Fatalf("won hour price %q", v)
	}
	mustContain(t, spot, formatSpan(first, first.Add(time.Hour)), "1 hour, $2.40 in all; 0 preemptions")
	mustContain(t, buyer.get(offerPath).body, "$1.20 per device-hour for "+formatSpan(first, first.Add(time.Hour)))

	// The clearing is published: the market page's spot section, JSON and CSV.
	mkt := anon.get("/market").body
	mustContain(t, mkt, `data-testid="spot-market-row" data-class="nvidia-h100-80gb-sxm"`)
	if v := testidValue(t, mkt, "spot-latest"); v != "$1.20" {
		t.Fatalf("market page latest spot price %q", v)
	}
	csvBody := anon.get("/market/spot.csv").body
	wantRow := fmt.Sprintf("%s,%d,nvidia-h100-80gb-sxm,120,120,8,2,2", first.Format(time.RFC3339), o.ID)
	if !strings.Contains(csvBody, wantRow) {
		t.Fatalf("spot CSV lacks %q:\n%s", wantRow, csvBody)
	}
	var js struct {
		Classes []struct {
			Accelerator string `json:"accelerator"`
			LatestCents int64  `json:"latest_cents"`
			Days        []struct {
				VWAPCents   int64 `json:"vwap_cents"`
				DeviceHours int64 `json:"device_hours"`
			} `json:"days"`
		} `json:"classes"`
	}
	if err := json.Unmarshal([]byte(anon.get("/market/spot.json").body), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Classes) != 1 || js.Classes[0].LatestCents != 120 || len(js.Classes[0].Days) != 1 || js.Classes[0].Days[0].DeviceHours != 2 {
		t.Fatalf("spot JSON %+v", js)
	}
	mustContain(t, anon.get("/market/methodology").body, `id="spot"`, "the lowest winning bid pays exactly its own maximum")

	// Only the owner cancels.
	recs, err := app.db.ListBuyerSpotBids(context.Background(), buyer.userID())
	if err != nil || len(recs) != 1 {
		t.Fatalf("bids %+v, %v", recs, err)
	}
	cancelPath := fmt.Sprintf("/spot/bids/%d/cancel", recs[0].Bid.ID)
	other := app.client()
	other.signUp("other@example.com", false)
	if got := other.post("/spot", cancelPath, url.Values{}); got.status != http.StatusNotFound {
		t.Fatalf("another buyer cancels: %d", got.status)
	}
	if got := buyer.postRaw(cancelPath, url.Values{}); got.status != http.StatusForbidden {
		t.Fatalf("cancel without CSRF: %d", got.status)
	}
	if got := buyer.post("/spot", cancelPath, url.Values{}); got.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d", got.status)
	}
	spot = buyer.get("/spot").body
	mustContain(t, spot, "Cancelled", "Cancelled by you.")
	mustNotContain(t, spot, `data-testid="spot-cancel"`)
	if got := buyer.post("/spot", cancelPath, url.Values{}); got.status != http.StatusConflict {
		t.Fatalf("cancel twice: %d", got.status)
	}
	requireReconciled(t, app.testApp)
}
