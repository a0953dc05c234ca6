package e2e

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// addTestCard saves a local test card on the account page.
func addTestCard(t *testing.T, page playwright.Page, srv *server, last4 string) {
	t.Helper()
	gotoOK(t, page, srv.URL+"/account")
	click(t, page.GetByTestId("payment-method-add"), "Add a card")
	click(t, page.GetByTestId("test-card-"+last4), "the test card "+last4)
	click(t, page.GetByTestId("save-test-card"), "Save card")
	expectText(t, page.GetByTestId("flash"), "saved", "the flash after saving "+last4)
}

// TestResaleOfReservedTime: a holder pays for a reservation with a saved card and lists its time
// for sale from the reservation page (a price over the cap is refused next to the field); a
// second buyer with a saved test card finds it under Resale with its badge, reads the contract,
// buys it and sees it as theirs, marked "bought on resale" with its price on its page and in the
// list; the provider's page of each booking marks it resold and links the other; the seller sees it sold and the credit to their card. The books
// reconcile.
func TestResaleOfReservedTime(t *testing.T) {
	srv := startServer(t, withDemo())
	seller := newPage(t)
	const email = "buyer@demo.gpumarket.test"
	logIn(t, seller, srv, email, demoPassword(t, srv, email))
	addTestCard(t, seller, srv, "4242")
	start := time.Now().UTC().Add(72 * time.Hour).Truncate(time.Hour)
	reserve(t, seller, srv, 2, 12, start)
	resURL := seller.URL()
	click(t, seller.GetByTestId("pay-saved"), "Pay now with Visa •••• 4242")
	expectText(t, seller.GetByTestId("reservation-state"), "confirmed", "the state after paying")

	click(t, seller.GetByTestId("resale-sell"), "Sell remaining time…")
	expectVisible(t, seller.GetByTestId("resale-rules"), "the resale rules on the form")
	fill(t, field(seller, "Price for all of it (USD)"), "99999")
	click(t, seller.GetByTestId("resale-list"), "List for sale")
	expectText(t, seller.Locator("#e-price"), "Ask at most", "the cap's message by the price")
	expectVisible(t, seller.GetByTestId("resale-fee"), "the fee note")
	shot(t, seller, "sell-form-error")
	fill(t, field(seller, "Price for all of it (USD)"), "10.00")
	click(t, seller.GetByTestId("resale-list"), "List for sale")
	expectText(t, seller.GetByTestId("flash"), "Listed for $10.00", "the flash after listing")
	listingURL := seller.URL()
	gotoOK(t, seller, resURL)
	expectText(t, seller.GetByTestId("resale-listing-status"), "open", "the listing on the reservation page")

	buyer := newPage(t)
	signUp(t, buyer, srv, "second@example.com", "Second Buyer", "", true, false)
	// The same request finds the listing as a resale source beside the quotes.
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"2"}, "workload.hours": {"12"},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	expectVisible(t, buyer.GetByTestId("resale-sources"), "the resale source beside the quotes")
	expectText(t, buyer.GetByTestId("resale-sources").GetByTestId("resale-price"), "$10.00", "the listing's price among the quotes")
	shot(t, buyer, "quotes-with-resale")
	gotoOK(t, buyer, srv.URL+"/resale")
	expectVisible(t, buyer.GetByTestId("resale-badge").First(), "the resale badge")
	expectText(t, buyer.GetByTestId("resale-price").First(), "$10.00", "the price on the card")
	shot(t, buyer, "resale-list")
	gotoOK(t, buyer, listingURL)
	expectVisible(t, buyer.GetByTestId("resale-no-card"), "the note asking for a saved card")
	addTestCard(t, buyer, srv, "4242")
	gotoOK(t, buyer, listingURL)
	expectVisible(t, buyer.GetByTestId("resale-pieces"), "the contract")
	shot(t, buyer, "listing")
	click(t, buyer.GetByTestId("resale-buy-button"), "Buy for $10.00")
	expectText(t, buyer.GetByTestId("flash"), "Bought.", "the flash after buying")
	expectText(t, buyer.GetByTestId("resale-bought"), "You bought this time on resale for $10.00", "the bought reservation")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "the bought reservation's state")
	expectText(t, buyer.GetByTestId("reservation-resale"), "bought on resale", "the mark by the bought reservation's title")
	expectText(t, buyer.GetByTestId("reservation-resale-price"), "$10.00", "the listing's price in the mark")
	noHorizontalOverflow(t, buyer, "the bought reservation")
	shot(t, buyer, "bought")
	boughtURL := buyer.URL()
	providerName, err := buyer.GetByTestId("reservation-piece").First().Locator("td").First().Locator("div").TextContent()
	if err != nil {
		t.Fatal(err)
	}
	gotoOK(t, buyer, srv.URL+"/reservations")
	expectText(t, buyer.GetByTestId("reservation-resale"), "bought on resale $10.00", "the mark in the buyer's list")
	expectText(t, buyer.GetByTestId("reservation-amount"), "$10.00", "the amount in the buyer's list")
	noHorizontalOverflow(t, buyer, "the buyer's list")
	shot(t, buyer, "bought-list")

	gotoOK(t, seller, resURL)
	expectText(t, seller.GetByTestId("resale-listing-status"), "sold", "the listing sold")
	expectText(t, seller.GetByTestId("resale-listing-detail"), "platform fee $1.00, $9.00 refunded to your card", "the seller's credit")
	if err := expect.Locator(seller.GetByTestId("cancel-reservation")).ToHaveCount(0); err != nil {
		t.Errorf("time sold whole still offers cancelling: %v", err)
	}
	shot(t, seller, "sold")

	// The provider's page of each booking marks it resold and links the other.
	demoProviders := map[string]string{"Nordic Compute": "nordic", "Atlantic GPU Cloud": "atlantic", "Community Labs": "lab", "Pacific Racks": "pacific"}
	provEmail := ""
	for name, user := range demoProviders {
		if strings.HasPrefix(strings.TrimSpace(providerName), name) {
			provEmail = user + "@demo.gpumarket.test"
		}
	}
	if provEmail == "" {
		t.Fatalf("the bought piece's provider %q is not a demo provider", providerName)
	}
	provider := newPage(t)
	logIn(t, provider, srv, provEmail, demoPassword(t, srv, provEmail))
	boughtID := boughtURL[strings.LastIndex(boughtURL, "/")+1:]
	sellerID := resURL[strings.LastIndex(resURL, "/")+1:]
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+boughtID)
	expectText(t, provider.GetByTestId("booking-resale"), "bought on resale from #"+sellerID, "the bought booking's mark on the provider's page")
	noHorizontalOverflow(t, provider, "the provider's page of the bought booking")
	shot(t, provider, "provider-bought")
	click(t, provider.GetByTestId("booking-resale").GetByRole("link"), "the link to the booking it was bought from")
	expectText(t, provider.GetByTestId("booking-resale"), "to #"+boughtID, "the resold booking's mark on the provider's page")
	shot(t, provider, "provider-resold")
	srv.reconcile(t)
}
