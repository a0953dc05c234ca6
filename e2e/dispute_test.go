package e2e

import (
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestDispute: a buyer pays for a booking and, while it runs, opens a dispute (hardware not as
// listed); the provider answers; after the booking ends the settlement waits on the frozen payout;
// the admin reads the reservation's timeline and grants a partial credit; the buyer sees the
// decision, and the refund on the statement and in the ledger. Time passes by restarting the
// server on the same database with a larger -clock-offset, as in the billing test.
func TestDispute(t *testing.T) {
	srv := startServer(t, withArgs("-tick", "1s"))

	provider := newPage(t)
	signUp(t, provider, srv, "pia@dispute.test", "Pia Provider", "Dispute Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")

	srv.createAdmin(t, "ops@dispute.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@dispute.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	gotoOK(t, provider, srv.URL+"/provider/reservations")
	click(t, provider.GetByTestId("connect-payouts"), "Connect payouts")
	click(t, provider.GetByTestId("onboard-simulated"), "Complete onboarding")

	// The buyer books 4 H100s for 4 hours and pays.
	buyer := newPage(t)
	signUp(t, buyer, srv, "bo@dispute.test", "Bo Buyer", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"4"}, "workload.hours": {"4"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	click(t, buyer.GetByTestId("quote").First().GetByTestId("reserve"), "Reserve")
	resID := regexp.MustCompile(`/reservations/(\d+)`).FindStringSubmatch(buyer.URL())
	if resID == nil {
		t.Fatalf("not on a reservation page: %s", buyer.URL())
	}
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")

	// The buyer opens a dispute with a statement.
	click(t, buyer.GetByTestId("open-dispute-link"), "Open a dispute")
	selectOption(t, field(buyer, "What is the dispute about?"), "Hardware not as listed")
	fill(t, buyer.Locator("#f-statement"), "Two of the four devices report as A100 40GB in nvidia-smi; log attached to ticket BB-7.")
	click(t, buyer.GetByTestId("submit-dispute"), "Open the dispute")
	expectText(t, buyer.GetByTestId("dispute-status"), "open", "dispute status")
	disputeURL := buyer.URL()
	disputePath := strings.TrimPrefix(disputeURL, srv.URL) // the port changes when the server restarts

	// The provider is notified and answers.
	gotoOK(t, provider, srv.URL+"/notifications")
	click(t, provider.GetByTestId("notification").Filter(playwright.LocatorFilterOptions{HasText: "opened a dispute"}).GetByRole("link"), "the dispute notification")
	expectURL(t, provider, disputeURL)
	fill(t, provider.Locator("#f-statement"), "All four devices were H100 SXM; two were misreported by an old driver, fixed within the hour.")
	click(t, provider.GetByTestId("dispute-answer"), "Add statement")
	expectText(t, provider.GetByTestId("dispute-statement").Last(), "misreported by an old driver", "the provider's answer")

	// After the booking ends the settlement is computed; the payout waits on the dispute.
	srv.stop(t)
	srv.reported = true
	srv = startServer(t, withDB(srv.DB), withArgs("-tick", "1s", "-clock-offset", offsetTo(start.Add(5*time.Hour))))
	waitFor(t, buyer, srv.URL+"/reservations/"+resID[1], "completed")
	deadline := time.Now().Add(15 * time.Second)
	for {
		if n, _ := buyer.GetByTestId("statement-link").Count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no settlement statement after the booking ended")
		}
		time.Sleep(500 * time.Millisecond)
		gotoOK(t, buyer, srv.URL+"/reservations/"+resID[1])
	}

	// The admin reads the whole timeline and grants a partial credit.
	gotoOK(t, admin, srv.URL+"/admin/disputes")
	click(t, admin.GetByTestId("open-dispute").First(), "the dispute")
	for _, kind := range []string{"booking", "payment", "dispute", "statement", "ledger", "settlement"} {
		expectVisible(t, admin.Locator(`[data-testid="timeline-event"][data-kind="`+kind+`"]`).First(), "a "+kind+" event on the timeline")
	}
	fill(t, field(admin, "Credit to the buyer (US$; 0 or empty to reject)"), "25.00")
	fill(t, admin.Locator("#f-reason"), "Partly substantiated: the misreporting cost the buyer the first hour of two devices.")
	shot(t, admin, "decide")
	click(t, admin.GetByTestId("grant-credit"), "Grant the credit")
	expectText(t, admin.GetByTestId("flash"), "Credit of $25.00 granted and refunded", "flash after granting")
	expectText(t, admin.GetByTestId("dispute-status"), "granted", "dispute status after granting")

	// Both parties see the outcome and the reason.
	gotoOK(t, provider, srv.URL+disputePath)
	expectText(t, provider.GetByTestId("dispute-outcome"), "a credit of $25.00", "the provider sees the outcome")
	gotoOK(t, buyer, srv.URL+disputePath)
	expectText(t, buyer.GetByTestId("dispute-outcome"), "the misreporting cost the buyer", "the buyer sees the reason")
	expectText(t, buyer.GetByTestId("dispute-refund"), "Refunded $25.00", "the buyer sees the refund")

	// The refund is on the buyer's statement and in the ledger.
	gotoOK(t, buyer, srv.URL+"/reservations/"+resID[1]+"/statement")
	expectText(t, buyer.GetByTestId("adjustment-amount").First(), "$25.00", "the dispute credit on the statement")
	refund := buyer.Locator(`[data-testid="ledger-row"][data-kind="refund"]`).Filter(playwright.LocatorFilterOptions{HasText: "$25.00"})
	expectVisible(t, refund, "the dispute refund in the ledger")
	text, _ := refund.TextContent()
	if !strings.Contains(text, "platform:cash") {
		t.Errorf("the ledger refund row does not show money leaving the platform's cash: %q", text)
	}
	shot(t, buyer, "statement")
}
