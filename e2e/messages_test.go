package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestMessagesWithoutAgent is an offer whose hosts run no agent, end to end: the provider lists it
// with access instructions; the buyer finds it with the catalogue's access filter, sees "No agent"
// on the card and the quote, pays, reads the instructions on the reservation page and writes to
// the provider; the provider follows the notification to the thread, reads the message and
// answers; the buyer reads the answer on the reservation page — at 390 px without sideways
// scrolling, and at 1280 px.
func TestMessagesWithoutAgent(t *testing.T) {
	srv := startServer(t)

	provider := newPage(t)
	signUp(t, provider, srv, "hana@byhand.test", "Hana Hands", "By Hand Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title, o.MemoryGB = "Hand-run H100 box, Québec", "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	selectOption(t, field(provider, "Do the hosts run the provider agent?"), "No: I give access by hand")
	const instructions = "Send your public key in the messages; I add it within the hour and reply with the host and port."
	fill(t, field(provider, "Access instructions (without the agent)"), instructions)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")

	srv.createAdmin(t, "ops@byhand.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@byhand.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	buyer := newPage(t)
	signUp(t, buyer, srv, "ben@byhand.test", "Ben Buyer", "", true, false)
	gotoOK(t, buyer, srv.URL+"/")
	selectOption(t, field(buyer, "Access"), "No agent: the provider gives access")
	click(t, buyer.GetByTestId("filter-submit"), "Apply")
	card := buyer.GetByTestId("offer-card").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	expectText(t, card.GetByTestId("card-access"), "No agent", "the card's access badge")
	if n, err := buyer.GetByTestId("offer-card").Count(); err != nil || n != 1 {
		t.Errorf("the access filter shows %d offers, want only the hand-run one (%v)", n, err)
	}
	if err := buyer.SetViewportSize(narrow.Width, narrow.Height); err != nil {
		t.Fatal(err)
	}
	noHorizontalOverflow(t, buyer, "the filtered catalogue at 390 px")
	if dir := os.Getenv("E2E_MESSAGES_SHOTS"); dir != "" {
		if _, err := card.Screenshot(playwright.LocatorScreenshotOptions{Path: playwright.String(filepath.Join(dir, "card-narrow.png"))}); err != nil {
			t.Fatal(err)
		}
	}
	if err := buyer.SetViewportSize(wide.Width, wide.Height); err != nil {
		t.Fatal(err)
	}

	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	id := reserve(t, buyer, srv, 2, 4, start)
	expectVisible(t, buyer.GetByTestId("access-instructions-pending"), "the note that the instructions come after payment")
	if text, _ := buyer.GetByTestId("access-instructions").TextContent(); strings.Contains(text, "within the hour") {
		t.Errorf("the instructions show before payment: %q", text)
	}
	click(t, buyer.GetByTestId("pay"), "Pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	expectText(t, buyer.GetByTestId("access-instruction"), "I add it within the hour", "the instructions after payment")

	const ask = "Hi Hana, my key is ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOq ben@laptop. When can I log in?"
	fill(t, buyer.GetByLabel("Your message"), ask)
	click(t, buyer.GetByTestId("message-submit"), "Send")
	expectText(t, buyer.GetByTestId("flash"), "Message sent", "flash after sending")
	expectText(t, buyer.GetByTestId("message").Last(), "When can I log in?", "the buyer's message in the thread")

	gotoOK(t, provider, srv.URL+"/notifications")
	note := provider.GetByTestId("notification").Filter(playwright.LocatorFilterOptions{HasText: "The buyer of booking #" + id + " wrote"})
	click(t, note.GetByRole("link"), "the message notification")
	expectURL(t, provider, srv.URL+"/reservations/"+id+"/messages")
	expectText(t, provider.GetByTestId("message").Last(), "When can I log in?", "the provider reads the message")
	const answer = "Key added. Connect with: ssh -p 2222 ubuntu@gpu1.byhand.test"
	fill(t, provider.GetByLabel("Your message"), answer)
	click(t, provider.GetByTestId("message-submit"), "Send the answer")
	expectText(t, provider.GetByTestId("message").Last(), "ssh -p 2222 ubuntu@gpu1.byhand.test", "the provider's answer in the thread")

	gotoOK(t, buyer, srv.URL+"/reservations/"+id)
	answered := buyer.GetByTestId("message").Last()
	expectText(t, answered, "ssh -p 2222 ubuntu@gpu1.byhand.test", "the buyer reads the answer")
	if role, _ := answered.GetAttribute("data-role"); role != "provider" {
		t.Errorf("the answer is marked %q, want provider", role)
	}
	if err := buyer.GetByTestId("messages").ScrollIntoViewIfNeeded(); err != nil {
		t.Fatalf("scroll to the messages: %v", err)
	}
	for _, vp := range []viewport{narrow, wide} {
		if err := buyer.SetViewportSize(vp.Width, vp.Height); err != nil {
			t.Fatalf("resize to %s: %v", vp.Name, err)
		}
		noHorizontalOverflow(t, buyer, "the reservation's messages at "+vp.Name)
		if dir := os.Getenv("E2E_MESSAGES_SHOTS"); dir != "" {
			if err := screenshot(buyer, filepath.Join(dir, "messages-"+vp.Name+".png")); err != nil {
				t.Fatal(err)
			}
		}
	}
	shot(t, buyer, "reservation-messages")
}
