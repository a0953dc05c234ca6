package e2e

import (
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestStandingOrderFillsWhenAnOfferIsApproved: a buyer asks for 4 H100s that nobody offers; under
// "Nothing fits" they place a standing order (first with a bad limit: the form comes back with the
// message by the field and what they typed). The order is open on /orders. A provider lists 4 H100s
// and an admin approves them; with no action by the buyer the order fills (the server re-matches
// on the approval, not on a timer), and the buyer sees it filled on /orders, follows the link and
// finds the held reservation on the listed offer.
func TestStandingOrderFillsWhenAnOfferIsApproved(t *testing.T) {
	srv := startServer(t, withArgs("-tick", "1h")) // no background tick during the test
	buyer := newPage(t)
	signUp(t, buyer, srv, "olga@orders.test", "Olga Orders", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(24 * time.Hour)
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"4"}, "workload.hours": {"6"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	expectVisible(t, buyer.GetByTestId("no-quotes"), "nothing fits")
	form := buyer.GetByTestId("standing-order-form")
	expectVisible(t, form, "the standing order form")
	expectText(t, form, "you cannot place standing orders for 7 days", "the rules on the form")
	shot(t, buyer, "form")

	fill(t, field(buyer, "Limit (US dollars)"), "cheap")
	fill(t, field(buyer, "Fill by (UTC)"), start.Format("2006-01-02T15:04"))
	click(t, buyer.GetByTestId("standing-order-submit"), "Place the standing order")
	expectText(t, buyer.GetByTestId("error-limit"), "Enter the limit in US dollars", "the message by the limit")
	if v, _ := field(buyer, "Limit (US dollars)").InputValue(); v != "cheap" {
		t.Fatalf("the limit typed was not kept: %q", v)
	}
	shot(t, buyer, "form-error")
	fill(t, field(buyer, "Limit (US dollars)"), "100")
	click(t, buyer.GetByTestId("standing-order-submit"), "Place the standing order")
	expectText(t, buyer.GetByTestId("flash"), "placed", "the flash after placing")
	row := buyer.GetByTestId("order-row").First()
	expectText(t, row.GetByTestId("order-state"), "Open", "the order's state")
	shot(t, buyer, "open")

	provider := newPage(t)
	signUp(t, provider, srv, "pavel@orders.test", "Pavel Provider", "Order Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title = "Standing-order H100s"
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@orders.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@orders.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// The buyer only reloads the page.
	deadline := time.Now().Add(15 * time.Second)
	for {
		gotoOK(t, buyer, srv.URL+"/orders")
		if s, _ := buyer.GetByTestId("order-row").First().GetAttribute("data-state"); s == "filled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the standing order did not fill after the offer was approved")
		}
		time.Sleep(200 * time.Millisecond)
	}
	expectText(t, row.GetByTestId("order-state"), "Filled", "the order's state")
	link := row.GetByTestId("order-reservation")
	expectText(t, link, "held", "the reservation's state on the order")
	shot(t, buyer, "filled")
	click(t, link, "the reservation")
	if err := expect.Page(buyer).ToHaveURL(regexp.MustCompile(`/reservations/\d+$`)); err != nil {
		t.Fatalf("not on the reservation's page: %v", err)
	}
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "the reservation's state")
	expectText(t, buyer.Locator("main"), o.Title, "the listed offer on the reservation")
	shot(t, buyer, "reservation")
	expectNotification(t, buyer, srv, "filled: reservation #", "the fill's notification")
}
