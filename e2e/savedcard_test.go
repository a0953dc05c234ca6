package e2e

import (
	"regexp"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestSavedCardPaysAtOnce: a buyer saves the test card that is always declined on the account
// page (the test-mode card page offers test numbers as labelled radio buttons),
// reserves, presses "Pay now with Visa •••• 0002" and is told the bank declined it while the
// reservation stays held; saves 4242, whose button now shows, pays with it in one step and the
// reservation is confirmed. Removing the declined card leaves the other listed.
func TestSavedCardPaysAtOnce(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t)
	const email = "buyer@demo.gpumarket.test"
	logIn(t, page, srv, email, demoPassword(t, srv, email))

	gotoOK(t, page, srv.URL+"/account")
	expectVisible(t, page.GetByTestId("payment-methods-none"), "the empty state of payment methods")
	expectVisible(t, page.GetByTestId("payment-methods-test-mode"), "the test-mode note")
	shot(t, page, "account-empty")
	addCard := func(last4 string) {
		t.Helper()
		gotoOK(t, page, srv.URL+"/account")
		click(t, page.GetByTestId("payment-method-add"), "Add a card")
		expectVisible(t, page.GetByTestId("test-mode"), "the TEST MODE notice on the card page")
		if last4 == "0002" {
			shot(t, page, "card-page")
		}
		click(t, page.GetByTestId("test-card-"+last4), "the test card "+last4)
		click(t, page.GetByTestId("save-test-card"), "Save card")
		expectText(t, page.GetByTestId("flash"), "saved", "the flash after saving "+last4)
	}
	addCard("0002")
	expectText(t, page.GetByTestId("payment-method-label").First(), "Visa •••• 0002", "the saved card")

	reserve(t, page, srv, 2, 12, time.Now().UTC().Add(72*time.Hour).Truncate(time.Hour))
	resURL := page.URL()
	click(t, page.GetByTestId("pay-saved"), "Pay now with Visa •••• 0002")
	expectText(t, page.GetByTestId("flash"), "Visa •••• 0002 was declined by the bank. Nothing was charged.", "the decline")
	expectText(t, page.GetByTestId("reservation-state"), "held", "the state after a decline")
	shot(t, page, "declined")

	addCard("4242")
	gotoOK(t, page, resURL)
	expectText(t, page.GetByTestId("pay-saved"), "Pay now with Visa •••• 4242", "the button with the newest card")
	click(t, page.GetByTestId("pay-saved"), "Pay now with Visa •••• 4242")
	expectText(t, page.GetByTestId("flash"), "Paid with your saved test card (simulated)", "the payment")
	expectText(t, page.GetByTestId("reservation-state"), "confirmed", "the state after paying")
	if err := expect.Locator(page.GetByTestId("pay-saved")).ToHaveCount(0); err != nil {
		t.Errorf("a paid reservation still offers to pay: %v", err)
	}
	noHorizontalOverflow(t, page, "the paid reservation")

	gotoOK(t, page, srv.URL+"/account")
	click(t, page.GetByRole("button", playwright.PageGetByRoleOptions{Name: "Remove Visa •••• 0002"}), "Remove Visa •••• 0002")
	expectText(t, page.GetByTestId("flash"), "Card removed", "the flash after removing")
	if err := expect.Locator(page.GetByTestId("payment-method")).ToHaveCount(1); err != nil {
		t.Errorf("cards listed after removing one: %v", err)
	}
	expectText(t, page.GetByTestId("payment-method-label"), "Visa •••• 4242", "the card left")
	if !regexp.MustCompile(`#payment-methods$`).MatchString(page.URL()) {
		t.Errorf("after removing, at %s, want the payment methods section", page.URL())
	}
	shot(t, page, "account-cards")
}
