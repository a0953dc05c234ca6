package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// startCardSetup has c press "Add a card" and returns the simulated card
// page's path.
func (a *billingApp) startCardSetup(c *client) string {
	a.t.Helper()
	r := c.post("/account", "/account/payment-methods", url.Values{})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/setup/local/") {
		a.t.Fatalf("add a card: %d → %q\n%s", r.status, r.location, r.body)
	}
	return r.location
}

// addCard saves the test card numbered number for c through the account
// page, the simulated card page and the return link, as a person does.
func (a *billingApp) addCard(c *client, number string) {
	a.t.Helper()
	page := a.startCardSetup(c)
	r := c.post(page, page, url.Values{"card": {number}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/account/payment-methods/return?setup=") {
		a.t.Fatalf("save test card: %d → %q\n%s", r.status, r.location, r.body)
	}
	if back := c.get(r.location); back.status != http.StatusSeeOther || back.location != "/account#payment-methods" {
		a.t.Fatalf("return from card page: %d → %q\n%s", back.status, back.location, back.body)
	}
}

// buttonText is the text of the button marked data-testid="id", "" when
// there is none.
func buttonText(body, id string) string {
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)</button>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(m[1])
}

func (a *billingApp) savedCards(userID int64) []market.PaymentMethod {
	a.t.Helper()
	ms, err := a.db.ListPaymentMethods(context.Background(), userID)
	if err != nil {
		a.t.Fatal(err)
	}
	return ms
}

func TestPaymentMethodsAddAndRemove(t *testing.T) {
	app := newBillingApp(t)
	buyer, other := app.client(), app.client()
	buyer.signUp("cards@example.com", false)
	other.signUp("nosy@example.com", false)
	buyerID, otherID := buyer.userID(), other.userID()

	acct := buyer.get("/account").body
	mustContain(t, acct, `data-testid="payment-methods-none"`, `data-testid="payment-methods-test-mode"`, "Add a card")

	// Without the form's CSRF token nothing starts.
	if r := buyer.postRaw("/account/payment-methods", url.Values{}); r.status != http.StatusForbidden {
		t.Fatalf("add a card without a CSRF token: %d, want 403", r.status)
	}

	page := app.startCardSetup(buyer)
	setup := buyer.get(page)
	if setup.status != http.StatusOK {
		t.Fatalf("card page: %d", setup.status)
	}
	mustContain(t, setup.body, "TEST MODE — simulated payment, no money moves", "4242 4242 4242 4242", "4000 0000 0000 0002", "charges are declined")
	// Only the person who started it sees or completes it.
	if r := other.get(page); r.status != http.StatusNotFound {
		t.Errorf("another user's card page: %d, want 404", r.status)
	}
	if r := other.post("/account", page, url.Values{"card": {"4242424242424242"}}); r.status != http.StatusNotFound {
		t.Errorf("another user completing the card page: %d, want 404", r.status)
	}
	// A number that is not one of the test cards: the page again, 422.
	bad := buyer.post(page, page, url.Values{"card": {"4111 1111 1111 1111"}})
	if bad.status != http.StatusUnprocessableEntity || testidText(bad.body, "error-card") != "Choose one of the test cards listed." {
		t.Fatalf("unknown test card: %d %q", bad.status, testidText(bad.body, "error-card"))
	}
	done := buyer.post(page, page, url.Values{"card": {"4242 4242 4242 4242"}})
	if done.status != http.StatusSeeOther {
		t.Fatalf("save card: %d\n%s", done.status, done.body)
	}
	// The return link belongs to the buyer: another user following it
	// saves nothing.
	if r := other.get(done.location); r.status != http.StatusNotFound {
		t.Errorf("another user following the return link: %d, want 404", r.status)
	}
	for range 2 { // following it twice keeps one card
		if r := buyer.get(done.location); r.status != http.StatusSeeOther || r.location != "/account#payment-methods" {
			t.Fatalf("return: %d → %q", r.status, r.location)
		}
	}
	acct = buyer.get("/account").body
	if got := testidText(acct, "payment-method-label"); got != "Visa •••• 4242" {
		t.Errorf("saved card shown as %q, want Visa •••• 4242", got)
	}
	mustContain(t, acct, `data-testid="payment-method-default"`)
	mustNotContain(t, acct, `data-testid="payment-methods-none"`)
	if n := len(app.savedCards(buyerID)); n != 1 {
		t.Fatalf("%d saved cards after one setup returned twice, want 1", n)
	}
	if n := len(app.savedCards(otherID)); n != 0 {
		t.Fatalf("the other user has %d saved cards, want 0", n)
	}

	// A second card becomes the default, listed first.
	app.addCard(buyer, "5555 5555 5555 4444")
	cards := app.savedCards(buyerID)
	if len(cards) != 2 || cards[0].Label != "Mastercard •••• 4444" || cards[1].Label != "Visa •••• 4242" {
		t.Fatalf("cards %+v, want Mastercard then Visa", cards)
	}
	if cards[0].Customer != cards[1].Customer || cards[0].Customer == "" {
		t.Errorf("the cards are on customers %q and %q, want one customer", cards[0].Customer, cards[1].Customer)
	}
	if got := testidText(buyer.get("/account").body, "payment-method-label"); got != "Mastercard •••• 4444" {
		t.Errorf("first card shown %q, want the Mastercard", got)
	}

	remove := fmt.Sprintf("/account/payment-methods/%d/remove", cards[0].ID)
	if r := other.post("/account", remove, url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("another user removing the card: %d, want 404", r.status)
	}
	if r := buyer.postRaw(remove, url.Values{}); r.status != http.StatusForbidden {
		t.Errorf("removing without a CSRF token: %d, want 403", r.status)
	}
	if n := len(app.savedCards(buyerID)); n != 2 {
		t.Fatalf("%d cards after refused removals, want 2", n)
	}
	if r := buyer.post("/account", remove, url.Values{}); r.status != http.StatusSeeOther || r.location != "/account#payment-methods" {
		t.Fatalf("remove: %d → %q", r.status, r.location)
	}
	if r := buyer.post("/account", remove, url.Values{}); r.status != http.StatusNotFound {
		t.Errorf("removing a removed card: %d, want 404", r.status)
	}
	cards = app.savedCards(buyerID)
	if len(cards) != 1 || cards[0].Label != "Visa •••• 4242" {
		t.Fatalf("cards after removing the Mastercard: %+v", cards)
	}
}

func TestPaySavedMethod(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	buyer, other := app.client(), app.client()
	buyer.signUp("saved@example.com", false)
	other.signUp("stranger@example.com", false)
	ctx := context.Background()

	r := app.heldReservation(buyer)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	page := buyer.get(resPath).body
	mustContain(t, page, `data-testid="pay"`, `data-testid="pay-saved-hint"`)
	mustNotContain(t, page, `data-testid="pay-saved"`)
	// Without a saved card the button's POST says what to do.
	if res := buyer.post(resPath, resPath+"/pay-saved", url.Values{}); res.status != http.StatusSeeOther || res.location != resPath {
		t.Fatalf("pay-saved without a card: %d → %q", res.status, res.location)
	}
	mustContain(t, buyer.get(resPath).body, "Add a payment method on your account page first.")

	// A card the bank declines: a clear message, still held, nothing charged.
	app.addCard(buyer, "4000 0000 0000 0002")
	page = buyer.get(resPath).body
	if got := buttonText(page, "pay-saved"); got != "Pay now with Visa •••• 0002" {
		t.Fatalf("pay-saved button %q", got)
	}
	if res := buyer.post(resPath, resPath+"/pay-saved", url.Values{}); res.status != http.StatusSeeOther || res.location != resPath {
		t.Fatalf("pay-saved declined: %d → %q", res.status, res.location)
	}
	page = buyer.get(resPath).body
	flash := testidText(page, "flash")
	if !strings.Contains(flash, "Visa •••• 0002 was declined by the bank. Nothing was charged.") || !strings.Contains(flash, "stays held") {
		t.Errorf("decline message %q", flash)
	}
	// The page keeps saying so after the flash, with both ways to pay.
	page = buyer.get(resPath).body
	if got := testidText(page, "payment-failure"); !strings.Contains(got, "Visa •••• 0002 was declined by the bank") {
		t.Errorf("payment failure on the page %q", got)
	}
	mustContain(t, page, `data-testid="pay-saved"`, `data-testid="pay"`)
	if got, _ := app.db.FindReservation(ctx, r.ID); got.State != market.ReservationHeld {
		t.Fatalf("after a decline the reservation is %s, want held", got.State)
	}
	if es := app.ledger(r.ID); len(es) != 0 {
		t.Fatalf("ledger after a decline: %+v", es)
	}

	// Another buyer cannot pay it; no CSRF token, nothing happens.
	app.addCard(other, "4242 4242 4242 4242")
	if res := other.post("/reservations", resPath+"/pay-saved", url.Values{}); res.status != http.StatusNotFound {
		t.Errorf("another buyer paying with their card: %d, want 404", res.status)
	}
	app.addCard(buyer, "4242 4242 4242 4242")
	if res := buyer.postRaw(resPath+"/pay-saved", url.Values{}); res.status != http.StatusForbidden {
		t.Errorf("pay-saved without a CSRF token: %d, want 403", res.status)
	}
	if got, _ := app.db.FindReservation(ctx, r.ID); got.State != market.ReservationHeld {
		t.Fatalf("after refused requests the reservation is %s, want held", got.State)
	}

	// The newest card, which succeeds: confirmed, the amount in the ledger.
	if got := buttonText(buyer.get(resPath).body, "pay-saved"); got != "Pay now with Visa •••• 4242" {
		t.Fatalf("pay-saved button %q after adding the 4242 card", got)
	}
	for i := range 2 { // the second press charges nothing more
		res := buyer.post(resPath, resPath+"/pay-saved", url.Values{})
		if res.status != http.StatusSeeOther || res.location != resPath {
			t.Fatalf("pay-saved %d: %d → %q", i, res.status, res.location)
		}
	}
	got, err := app.db.FindReservation(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != market.ReservationConfirmed {
		t.Fatalf("state %s after paying with the saved card, want confirmed", got.State)
	}
	es := app.ledger(r.ID)
	if len(es) != 1 || es[0].Kind != market.EntryCharge || es[0].Amount != r.AmountCents {
		t.Fatalf("ledger %+v, want one charge of %s", es, r.AmountCents)
	}
	p, err := app.db.FindPayment(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != store.PaymentPaid || p.PaymentIntentID != es[0].StripeRef {
		t.Errorf("payment %+v, charge ref %q", p, es[0].StripeRef)
	}
	page = buyer.get(resPath).body
	mustContain(t, page, "Paid "+r.AmountCents.String()+".")
	mustNotContain(t, page, `data-testid="pay-saved"`)
	requireReconciled(t, app.testApp)
}
