package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"

	"github.com/gpumarket/gpumarket/market"
)

// TestSpotBidWinsAnHour: a provider lists 4 H100s selling interruptible capacity (floor $1.59,
// 15 minutes' notice); a buyer saves the 4242 test card on the account page, bids for 2 devices
// at up to $2.00 for one hour on the offer's page (a bid below the floor first: the message by the
// field), and sees it live on /spot. With the server's clock moved to the hour's clearing time
// (the hour less the notice) the background loop clears it: the only bid fits, so it wins at the
// floor, $1.59 per device-hour, $3.18 charged; /spot shows the hour and the price, /market the
// latest clearing. The books reconcile.
func TestSpotBidWinsAnHour(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))

	provider := newPage(t)
	signUp(t, provider, srv, "sol@spot.test", "Sol Spot", "Spot Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@spot.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@spot.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	buyer := newPage(t)
	signUp(t, buyer, srv, "bea@spot.test", "Bea Bidder", "", true, false)
	// Find the offer in the catalogue; without a saved card the page links to the account page.
	gotoOK(t, buyer, srv.URL+"/?interruptible=yes")
	click(t, buyer.GetByRole("link", playwright.PageGetByRoleOptions{Name: o.Title}).First(), "the offer in the catalogue")
	offerPath := strings.TrimPrefix(strings.SplitN(buyer.URL(), "#", 2)[0], srv.URL)
	offerURL := srv.URL + offerPath
	expectText(t, buyer.GetByTestId("spot-floor"), "$1.59 per device-hour", "the floor on the offer page")
	expectText(t, buyer.GetByTestId("spot-notice"), "15 minutes", "the notice")
	expectVisible(t, buyer.GetByTestId("spot-needs-card"), "the request to add a card")
	click(t, buyer.GetByTestId("spot-needs-card").GetByRole("link"), "the account page link")
	click(t, buyer.GetByTestId("payment-method-add"), "Add a card")
	click(t, buyer.GetByTestId("test-card-4242"), "the test card 4242")
	click(t, buyer.GetByTestId("save-test-card"), "Save card")
	expectText(t, buyer.GetByTestId("flash"), "saved", "the flash after saving the card")

	// The hour two hours ahead clears 15 minutes before it starts.
	hour := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	gotoOK(t, buyer, offerURL)
	fill(t, field(buyer, "Devices"), "2")
	fill(t, field(buyer, "Your maximum per device-hour (US dollars)"), "1.50")
	fill(t, field(buyer, "First hour (UTC)"), hour.Format("2006-01-02T15:04"))
	fill(t, field(buyer, "Last hour (UTC), included"), hour.Format("2006-01-02T15:04"))
	click(t, buyer.GetByTestId("spot-submit"), "Place bid")
	expectText(t, buyer.GetByTestId("error-max_price"), "The provider's floor is $1.59 per device-hour", "the message by the price")
	if got, _ := field(buyer, "Devices").InputValue(); got != "2" {
		t.Errorf("the devices typed were not kept: %q", got)
	}
	shot(t, buyer, "spot-bid-error")
	fill(t, field(buyer, "Your maximum per device-hour (US dollars)"), "2.00")
	click(t, buyer.GetByTestId("spot-submit"), "Place bid")
	expectText(t, buyer.GetByTestId("flash"), "placed: 2 devices at up to $2.00 per device-hour", "the flash after bidding")
	expectText(t, buyer.GetByTestId("spot-bid-state").First(), "Live", "the bid's state")

	// The provider's page shows the book.
	gotoOK(t, provider, offerURL)
	expectText(t, provider.GetByTestId("spot-live"), "1 live bid for 2 devices", "the provider's spot book")

	// Move the server's clock to a minute after the clearing time; the loop ticks every second.
	srv = restartAt(t, srv, hour.Add(-14*time.Minute))
	offerURL = srv.URL + offerPath
	deadline := time.Now().Add(15 * time.Second)
	for {
		gotoOK(t, buyer, srv.URL+"/spot")
		if n, _ := buyer.GetByTestId("spot-hour").Count(); n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the hour did not clear")
		}
		time.Sleep(500 * time.Millisecond)
	}
	expectText(t, buyer.GetByTestId("spot-hour-price"), "$1.59", "the clearing price: the floor, the only bid fits")
	expectText(t, buyer.GetByTestId("spot-hour"), market.FormatTime(hour), "the hour won")
	expectText(t, buyer.GetByTestId("spot-hour"), "$3.18", "2 devices × $1.59 charged")
	expectText(t, buyer.GetByTestId("spot-hour"), "confirmed", "the hour's reservation is paid")
	expectText(t, buyer.GetByTestId("spot-bid-won"), "1 hour, $3.18 in all; 0 preemptions", "the bid's summary")
	shot(t, buyer, "spot-bids")
	noHorizontalOverflow(t, buyer, "the spot bids page")
	narrowPage := newPage(t, narrow)
	logIn(t, narrowPage, srv, "bea@spot.test", "a long enough password")
	gotoOK(t, narrowPage, srv.URL+"/spot")
	noHorizontalOverflow(t, narrowPage, "the spot bids page on a phone")
	gotoOK(t, narrowPage, offerURL+"#spot")
	noHorizontalOverflow(t, narrowPage, "the offer page with the bid form on a phone")
	gotoOK(t, buyer, offerURL+"#spot")
	expectText(t, buyer.GetByTestId("spot-last"), "$1.59 per device-hour", "the latest clearing on the offer page")
	shot(t, buyer, "spot-offer")

	gotoOK(t, buyer, srv.URL+"/market")
	expectText(t, buyer.GetByTestId("spot-latest"), "$1.59", "the latest clearing on /market")
	shot(t, buyer, "spot-market")

	srv.reconcile(t)
}
