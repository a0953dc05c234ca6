package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
)

// TestSpotBidCeilingAndConfirmation: on an offer listed at $2.19
// on-demand (floor $1.20), the form refuses a maximum above 3 × 2.19 =
// $6.57 next to the field; a maximum of $2.40, above on-demand, re-renders
// with the confirmation checkbox and refuses without it; ticked, the bid
// is placed. The API refuses 9×10¹⁸¢ and 3×10¹⁸¢ (naming
// max_cents_per_device_hour) and 240¢ without confirm_above_on_demand.
func TestSpotBidCeilingAndConfirmation(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host-bounds@example.com", true)
	o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) {
		o.Interruptible, o.InterruptibleCentsPerDH, o.PreemptNoticeMins = true, 120, 30
	})
	if o.PriceCentsPerDeviceHour != 219 {
		t.Fatalf("fixture on-demand price %d, want 219", o.PriceCentsPerDeviceHour)
	}
	buyer := app.client()
	buyer.signUp("bidder-bounds@example.com", false)
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")
	offerPath := fmt.Sprintf("/offers/%d", o.ID)
	bidPath := offerPath + "/spot-bids"
	first := testNow.Truncate(time.Hour).Add(2 * time.Hour)
	form := func(devices, max, confirm string) url.Values {
		v := url.Values{"devices": {devices}, "max_price": {max},
			"first_hour": {first.Format("2006-01-02T15:04")}, "last_hour": {first.Format("2006-01-02T15:04")}}
		if confirm != "" {
			v.Set("confirm_above_on_demand", confirm)
		}
		return v
	}

	got := buyer.post(offerPath, bidPath, form("4", "500.00", "1"))
	if got.status != http.StatusUnprocessableEntity {
		t.Fatalf("500.00 bid: %d", got.status)
	}
	mustContain(t, got.body, `data-testid="error-max_price"`, "Bid at most $6.57 per device-hour: 3 times the on-demand price, $2.19.", `value="500.00"`)

	got = buyer.post(offerPath, bidPath, form("2", "2.40", ""))
	if got.status != http.StatusUnprocessableEntity {
		t.Fatalf("2.40 unconfirmed: %d", got.status)
	}
	mustContain(t, got.body, `name="confirm_above_on_demand"`, `data-testid="error-confirm_above_on_demand"`,
		"I accept paying up to $2.40 per device-hour, above the on-demand price $2.19.")
	if recs, _ := app.db.ListBuyerSpotBids(context.Background(), buyer.userID()); len(recs) != 0 {
		t.Fatalf("refused bids stored: %+v", recs)
	}
	// At or below on-demand no checkbox is asked for.
	mustNotContain(t, buyer.get(offerPath).body, `name="confirm_above_on_demand"`)

	got = buyer.post(offerPath, bidPath, form("2", "2.40", "1"))
	if got.status != http.StatusSeeOther || got.location != "/spot" {
		t.Fatalf("2.40 confirmed: %d %q\n%s", got.status, got.location, got.body)
	}
	recs, err := app.db.ListBuyerSpotBids(context.Background(), buyer.userID())
	if err != nil || len(recs) != 1 || recs[0].Bid.MaxCents != 240 || recs[0].Bid.Devices != 2 {
		t.Fatalf("bids %+v, %v", recs, err)
	}

	write := buyer.createToken("bounds", "write")
	body := func(devices int, max int64, confirm bool) string {
		return fmt.Sprintf(`{"offer_id":%d,"devices":%d,"max_cents_per_device_hour":%d,"first_hour":%q,"last_hour":%q,"confirm_above_on_demand":%v}`,
			o.ID, devices, max, first.Format(time.RFC3339), first.Format(time.RFC3339), confirm)
	}
	for _, b := range []string{body(1, 9_000_000_000_000_000_000, true), body(4, 3_000_000_000_000_000_000, true), body(1, 658, true)} {
		if r := app.apiCall("POST", "/api/v1/spot/bids", write, b); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"max_cents_per_device_hour"`) {
			t.Fatalf("API bid %s: %d %s", b, r.status, r.body)
		}
	}
	if r := app.apiCall("POST", "/api/v1/spot/bids", write, body(1, 240, false)); r.status != http.StatusBadRequest || !strings.Contains(r.body, `"confirm_above_on_demand"`) {
		t.Fatalf("API bid above on-demand, unconfirmed: %d %s", r.status, r.body)
	}
	if r := app.apiCall("POST", "/api/v1/spot/bids", write, body(1, 657, true)); r.status != http.StatusCreated {
		t.Fatalf("API bid at the ceiling, confirmed: %d %s", r.status, r.body)
	}
	// The provider's own bid is refused through the API too.
	app.saveTestCard(prov.userID(), "4242 4242 4242 4242")
	if r := app.apiCall("POST", "/api/v1/spot/bids", prov.createToken("own", "write"), body(1, 150, false)); r.status != http.StatusConflict ||
		!strings.Contains(r.body, "You cannot bid on your own offer.") {
		t.Fatalf("own-offer API bid: %d %s", r.status, r.body)
	}
	requireReconciled(t, app.testApp)
}

// notSimulated is the local processor presenting itself as a real one
// (as Stripe does): Simulated is false.
type notSimulated struct{ *countingLocal }

func (notSimulated) Simulated() bool { return false }

// TestDemoBannerSaysWhetherMoneyMoves: with -demo, the banner says no real
// money moves only when payments are simulated; with a real processor (a
// Stripe key) it says real Stripe calls are made.
func TestDemoBannerSaysWhetherMoneyMoves(t *testing.T) {
	sim := newBillingAppWith(t, func(cfg *Config) { cfg.Demo = true })
	if v := testidValue(t, sim.client().get("/").body, "demo-banner"); !strings.Contains(v, "no real money moves") {
		t.Fatalf("simulated demo banner %q", v)
	}
	real := newBillingAppWith(t, func(cfg *Config) { cfg.Demo = true },
		func(l *countingLocal) billing.Processor { return notSimulated{l} })
	v := testidValue(t, real.client().get("/").body, "demo-banner")
	if strings.Contains(v, "no real money") || !strings.Contains(v, "payments are real Stripe calls") {
		t.Fatalf("demo banner with a real processor %q", v)
	}
	var _ billing.Processor = notSimulated{}
}
