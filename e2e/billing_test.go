package e2e

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestBookPayIncidentSettle: a buyer books through the request builder and pays on the test
// processor's page; the provider connects payouts and, while the booking runs, reports a host
// failure; when the booking has ended the background loop settles it: the buyer sees the credit
// on the statement and the provider sees the payout. Time passes by restarting the server on the
// same database with a larger -clock-offset; -tick 1s makes settlement quick.
func TestBookPayIncidentSettle(t *testing.T) {
	srv := startServer(t, withArgs("-tick", "1s"))

	// A provider lists 4 H100s in Québec; an admin approves them.
	provider := newPage(t)
	signUp(t, provider, srv, "hana@settle.test", "Hana Settle", "Settle Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")

	srv.createAdmin(t, "ops@settle.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@settle.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// The provider connects payouts through the simulated onboarding.
	gotoOK(t, provider, srv.URL+"/provider/reservations")
	expectText(t, provider.GetByTestId("onboarding-state"), "not connected", "onboarding state before connecting")
	click(t, provider.GetByTestId("connect-payouts"), "Connect payouts")
	expectVisible(t, provider.GetByTestId("test-mode"), "the test-mode notice on onboarding")
	click(t, provider.GetByTestId("onboard-simulated"), "Complete onboarding")
	expectText(t, provider.GetByTestId("onboarding-state"), "connected — payouts enabled", "onboarding state after connecting")

	// A buyer asks for 4 H100s for 4 hours, starting within the next hours, and reserves.
	buyer := newPage(t)
	signUp(t, buyer, srv, "ben@settle.test", "Ben Buyer", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"4"}, "workload.hours": {"4"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	click(t, buyer.GetByTestId("quote").First().GetByTestId("reserve"), "Reserve")
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "state after reserving")
	resURL := buyer.URL()
	resID := regexp.MustCompile(`/reservations/(\d+)`).FindStringSubmatch(resURL)
	if resID == nil {
		t.Fatalf("not on a reservation page: %s", resURL)
	}

	// It pays on the test processor's page, which says plainly that no money moves.
	click(t, buyer.GetByTestId("pay"), "Pay")
	expectVisible(t, buyer.GetByTestId("test-mode"), "the test-mode notice")
	expectText(t, buyer.GetByTestId("test-mode"), "TEST MODE — simulated payment, no money moves", "test-mode notice")
	shot(t, buyer, "pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	expectText(t, buyer.GetByTestId("payment-status"), "Paid", "payment status")

	// While the booking runs (the server restarted an hour into it), the provider reports a host
	// failure of 1 of the 4 devices for 30 minutes.
	srv.stop(t)
	srv.reported = true
	srv = startServer(t, withDB(srv.DB), withArgs("-tick", "1s", "-clock-offset", offsetTo(start.Add(time.Hour))))
	waitFor(t, provider, srv.URL+"/provider/bookings/"+resID[1], "active")
	click(t, provider.GetByTestId("report-incident"), "Report an incident")
	selectOption(t, field(provider, "What happened"), "Host failure — Pro-rata refund for the device-hours not delivered.")
	fill(t, field(provider, "Started (UTC)"), start.Add(time.Hour).Format("2006-01-02T15:04"))
	fill(t, field(provider, "Ended (UTC)"), start.Add(90*time.Minute).Format("2006-01-02T15:04"))
	fill(t, field(provider, "Devices affected"), "1")
	fill(t, provider.Locator("#f-note"), "Node lost power supply; ticket HF-1209.")
	click(t, provider.GetByTestId("submit-incident"), "Report incident")
	expectText(t, provider.GetByTestId("flash"), "applies at once", "flash after reporting")
	expectText(t, provider.GetByTestId("incident-status").First(), "Applies", "incident status")

	// After the end the background loop settles the booking.
	srv.stop(t)
	srv.reported = true
	srv = startServer(t, withDB(srv.DB), withArgs("-tick", "1s", "-clock-offset", offsetTo(start.Add(5*time.Hour))))
	waitFor(t, buyer, srv.URL+"/reservations/"+resID[1], "settled")
	click(t, buyer.GetByTestId("statement-link"), "Settlement statement")
	expectText(t, buyer.GetByTestId("settlement-state"), "done", "settlement state")
	expectText(t, buyer.GetByTestId("statement-clause").First(), "Host failure, 1 of 4 devices", "host failure clause")
	refund, err := buyer.GetByTestId("statement-refund").TextContent()
	if err != nil || strings.TrimSpace(refund) == "$0.00" || !strings.HasPrefix(strings.TrimSpace(refund), "$") {
		t.Errorf("the buyer's statement shows no refund: %q %v", refund, err)
	}
	expectText(t, buyer.GetByTestId("statement-delivered"), "15.50 of 16.00", "delivered device-hours")
	shot(t, buyer, "statement")

	gotoOK(t, provider, srv.URL+"/provider/reservations")
	row := provider.GetByTestId("provider-settlement-row").Filter(playwright.LocatorFilterOptions{HasText: "#" + resID[1]})
	expectText(t, row, "Settled", "the provider's settlement row")
	payout, err := row.GetByTestId("provider-payout").TextContent()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(payout), "$") || strings.TrimSpace(payout) == "$0.00" {
		t.Errorf("the provider sees no payout: %q %v", payout, err)
	}
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+resID[1]+"/statement")
	expectText(t, provider.GetByTestId("payout-state"), "paid to your connected account", "payout state")
	expectText(t, provider.GetByTestId("statement-payout"), strings.TrimSpace(payout), "payout on the statement")
}

// offsetTo is the -clock-offset that makes the server's clock read at (now).
func offsetTo(at time.Time) string {
	return fmt.Sprintf("%ds", int64(time.Until(at)/time.Second))
}

// waitFor reloads url until its reservation state says want (the background loop ticks every second).
func waitFor(t *testing.T, page playwright.Page, url, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		gotoOK(t, page, url)
		text, _ := page.GetByTestId("reservation-state").TextContent()
		if strings.Contains(text, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still says %q, want %q", url, text, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
