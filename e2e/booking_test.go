package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestReserveAfterWaitingASAP: a buyer asks for capacity "as soon as possible" (no earliest
// start), reads the quote for a few seconds and reserves it. The quote says how long its price is
// held; the reservation is made (not "no longer available … fresh quotes", as when quotes were
// pinned to the second they were made) and the buyer is told the start they got: when they
// reserved, not when they asked.
func TestReserveAfterWaitingASAP(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t)
	const email = "buyer@demo.gpumarket.test"
	logIn(t, page, srv, email, demoPassword(t, srv, email))

	gotoOK(t, page, srv.URL+"/requests")
	selectOption(t, field(page, "Kind"), "Training (tightly coupled, one gang)")
	fill(t, field(page, "Devices"), "2")
	fill(t, field(page, "Duration (hours)"), "12")
	fill(t, field(page, "Earliest start (UTC)"), "")
	click(t, page.GetByTestId("get-quotes"), "Get quotes")
	first := page.GetByTestId("quote").First()
	expectVisible(t, first, "the first quote")
	expectText(t, first.GetByTestId("quote-validity"), "(5 minutes). As soon as possible: it starts when you reserve", "the quote's validity")
	expectText(t, first.GetByTestId("quote-cancellation"), "Free to cancel until you pay", "the quote's cancellation terms")
	shot(t, page, "quote")

	// A person reads the quote before reserving.
	time.Sleep(4 * time.Second)
	before := time.Now().UTC()
	click(t, first.GetByTestId("reserve"), "Reserve")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`/reservations/\d+$`)); err != nil {
		msg, _ := page.GetByTestId("quotes-message").TextContent()
		t.Fatalf("not on the reservation's page after reserving a 4-second-old quote (%q): %v", msg, err)
	}
	after := time.Now().UTC()
	expectText(t, page.GetByTestId("reservation-state"), "held", "the reservation's state")
	// The flash names the start: the minute of the booking (the server's clock is the test's).
	flash, err := page.GetByTestId("flash").TextContent()
	if err != nil {
		t.Fatalf("read the flash: %v", err)
	}
	m := regexp.MustCompile(`Reserved from (\d+ \w+ \d{4} \d\d:\d\d) UTC to (\d+ \w+ \d{4} \d\d:\d\d) UTC`).FindStringSubmatch(flash)
	if m == nil {
		t.Fatalf("the flash %q does not say the start and end", flash)
	}
	start, err1 := time.Parse("2 Jan 2006 15:04", m[1])
	end, err2 := time.Parse("2 Jan 2006 15:04", m[2])
	if err1 != nil || err2 != nil {
		t.Fatalf("the flash's times %q, %q: %v %v", m[1], m[2], err1, err2)
	}
	if start.Before(before.Truncate(time.Minute)) || start.After(after) || end.Sub(start) != 12*time.Hour {
		t.Errorf("reserved %s – %s; want a 12-hour booking starting when reserved (%s – %s)", start, end, before, after)
	}
	expectText(t, page.GetByTestId("cancel-summary"), "Free to cancel until you pay", "the held page's cancellation terms")
	shot(t, page, "reserved")
}

// TestCancelConfirmationShowsFee: a provider lists capacity that is free to cancel until 48
// hours before the start and costs 33.33% after; a buyer books it to start in two hours, so the
// fee applies from the moment it is paid. The quote and the held page say so in money (not
// "cancelling now is free"); after paying, Cancel asks first on its own page with the fee and the
// refund, computed here from the terms; confirming cancels and refunds exactly that, and
// `gpumarket reconcile` finds nothing owed.
func TestCancelConfirmationShowsFee(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))
	const feeBP = 3333
	provider := newPage(t)
	signUp(t, provider, srv, "cato@cancel.test", "Cato Cancel", "Cancel Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title = "Cancellable H100s"
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	fill(t, field(provider, "Free cancellation until (hours before start)"), "48")
	fill(t, field(provider, "Cancellation fee after that (%)"), "33.33")
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@cancel.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@cancel.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")
	gotoOK(t, provider, srv.URL+"/provider/reservations")
	click(t, provider.GetByTestId("connect-payouts"), "Connect payouts")
	click(t, provider.GetByTestId("onboard-simulated"), "Complete onboarding")

	// 4 devices × 4 hours × $3.17; the fee is 33.33% of it, rounded half away from zero.
	const devices, hours = 4, 4
	paid := int64(devices * hours * priceCents)
	fee := roundHalfAway(paid*feeBP, 10000)
	refund := paid - fee
	feeNow := fmt.Sprintf("cancelling costs %s of %s", usd(fee), usd(paid))

	buyer := newPage(t)
	signUp(t, buyer, srv, "bea@cancel.test", "Bea Buyer", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	resID := reserve(t, buyer, srv, devices, hours, start)
	expectText(t, buyer.GetByTestId("cancel-summary"), "Free to cancel until you pay; once paid, "+feeNow, "the held page's cancellation terms")
	shot(t, buyer, "held")
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	expectText(t, buyer.GetByTestId("cancel-summary"), "Cancelling costs "+usd(fee)+" of "+usd(paid), "the paid page's cancellation terms")

	click(t, buyer.GetByTestId("cancel-reservation"), "Cancel reservation…")
	expectURL(t, buyer, srv.URL+"/reservations/"+resID+"/cancel")
	expectAmount(t, buyer.GetByTestId("cancel-paid"), usd(paid), "the amount paid on the confirmation")
	expectAmount(t, buyer.GetByTestId("cancel-fee"), usd(fee), "the fee on the confirmation")
	expectAmount(t, buyer.GetByTestId("cancel-refund"), usd(refund), "the refund on the confirmation")
	shot(t, buyer, "confirm")

	// "Keep it" goes back and changes nothing.
	click(t, buyer.GetByTestId("keep-reservation"), "Keep it")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after keeping it")

	click(t, buyer.GetByTestId("cancel-reservation"), "Cancel reservation…")
	click(t, buyer.GetByTestId("confirm-cancel"), "Cancel and pay the fee")
	expectURL(t, buyer, srv.URL+"/reservations/"+resID)
	expectText(t, buyer.GetByTestId("reservation-state"), "cancelled", "state after cancelling")
	expectText(t, buyer.GetByTestId("flash"), fmt.Sprintf("A %s cancellation fee applies under the offer's policy; %s is refunded to you.", usd(fee), usd(refund)), "the flash after cancelling")
	shot(t, buyer, "cancelled")
	expectNotification(t, buyer, srv, fmt.Sprintf("A refund of %s for reservation #%s", usd(refund), resID), "the buyer's refund")

	srv.reconcile(t)
}

// TestTokenRefreshDoesNotDuplicate: creating an API token shows it once, on the account page the
// form redirects to, scrolled to the token on a phone; refreshing that page creates no second token
// and does not show it again.
func TestTokenRefreshDoesNotDuplicate(t *testing.T) {
	srv := startServer(t)
	page := newPage(t, narrow)
	signUp(t, page, srv, "tia@tokens.test", "Tia Token", "", true, false)
	gotoOK(t, page, srv.URL+"/account")
	fill(t, field(page, "Token name"), "ci-pipeline")
	selectOption(t, field(page, "Scope"), "read and write")
	click(t, page.GetByTestId("create-token"), "Create token")
	expectURL(t, page, srv.URL+"/account#tok-h")
	expectText(t, page.GetByTestId("new-token"), "gpm_", "the new token")
	if err := expect.Locator(page.GetByTestId("new-token")).ToBeInViewport(); err != nil {
		t.Errorf("the new token is off screen on a phone: %v", err)
	}
	token, err := page.GetByTestId("new-token").Locator(".mono").TextContent()
	if err != nil || !strings.HasPrefix(strings.TrimSpace(token), "gpm_") {
		t.Fatalf("read the token: %q %v", token, err)
	}
	token = strings.TrimSpace(token)
	rows := page.GetByTestId("tokens").Locator("tbody tr")
	if err := expect.Locator(rows).ToHaveCount(1); err != nil {
		t.Fatalf("tokens after creating one: %v", err)
	}
	shot(t, page, "created")

	if _, err := page.Reload(); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	expectURL(t, page, srv.URL+"/account#tok-h")
	if err := expect.Locator(rows).ToHaveCount(1); err != nil {
		t.Errorf("tokens after refreshing: %v", err)
	}
	if err := expect.Locator(page.GetByTestId("new-token")).ToHaveCount(0); err != nil {
		t.Errorf("the token is shown again after refreshing: %v", err)
	}
	if err := expect.Locator(page.GetByText(token)).ToHaveCount(0); err != nil {
		t.Errorf("the token's text %q is on the refreshed page: %v", token, err)
	}
	if err := expect.Locator(rows.First()).ToContainText("ci-pipeline"); err != nil {
		t.Errorf("the token row: %v", err)
	}
}
