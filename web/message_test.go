package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

const testInstructions = "Send your public key in the messages; I add it within the hour and reply with the host and port."

// manualOffer lists, for a signed-up provider, the listing helper's offer
// with hosts that run no agent and the given instructions.
func (a *billingApp) manualOffer(providerID int64, instructions string) market.Offer {
	a.t.Helper()
	return a.ownOfferTerms(providerID, func(o *market.Offer) {
		o.Access, o.AccessInstructions = market.AccessManual, instructions
	})
}

// mailTo is the newest message of kind queued to the address.
func (a *billingApp) mailTo(to, kind string) store.OutboxMail {
	a.t.Helper()
	all, err := a.db.ListMail(context.Background(), 0, 1000)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, m := range all {
		if m.To == to && m.Kind == kind {
			return m
		}
	}
	a.t.Fatalf("no %s mail to %s", kind, to)
	return store.OutboxMail{}
}

// payHeld pays a held reservation on the simulated page, as the buyer.
func payHeld(t *testing.T, buyer *client, id int64) {
	t.Helper()
	resPath := fmt.Sprintf("/reservations/%d", id)
	r := buyer.post(resPath, resPath+"/pay", url.Values{})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/pay/local/") {
		t.Fatalf("pay: %d → %q\n%s", r.status, r.location, r.body)
	}
	if done := buyer.post(r.location, r.location, url.Values{"outcome": {"pay"}}); done.status != http.StatusSeeOther || done.location != resPath {
		t.Fatalf("simulated payment: %d → %q\n%s", done.status, done.location, done.body)
	}
}

// TestCataloguePagesAndQuoteSayWhetherTheAgentRuns: the catalogue card,
// the offer page and the quote say whether the hosts run the agent; the
// filter form and the query language keep one kind or the other (a value
// that means nothing is refused, 422, next to the field); the
// instructions appear nowhere public, API included.
func TestCataloguePagesAndQuoteSayWhetherTheAgentRuns(t *testing.T) {
	app := newBillingApp(t)
	agentOffer := app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "eu-west-ie", 150)
	prov := app.client()
	prov.signUp("byhand@example.com", true)
	manual := app.manualOffer(prov.userID(), testInstructions)
	anon := app.client()

	cards := func(path string) map[int64]string {
		t.Helper()
		r := anon.get(path)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, r.status, r.body)
		}
		out := map[int64]string{}
		for _, id := range []int64{agentOffer.ID, manual.ID} {
			i := strings.Index(r.body, fmt.Sprintf(`data-offer-id="%d"`, id))
			if i < 0 {
				continue
			}
			card := r.body[i:]
			card = card[:strings.Index(card, "</article>")]
			switch {
			case strings.Contains(card, `data-testid="card-access" data-agent="yes"`) && strings.Contains(card, "Agent: automatic access"):
				out[id] = "agent"
			case strings.Contains(card, `data-testid="card-access" data-agent="no"`) && strings.Contains(card, "No agent: access by the provider"):
				out[id] = "manual"
			default:
				out[id] = "no badge"
			}
		}
		return out
	}
	if got := cards("/"); got[agentOffer.ID] != "agent" || got[manual.ID] != "manual" {
		t.Fatalf("catalogue cards: %v", got)
	}
	for _, path := range []string{"/?agent=no", "/?q=agent%3Dno", "/?q=agent%21%3Dyes"} {
		if got := cards(path); len(got) != 1 || got[manual.ID] != "manual" {
			t.Errorf("%s: %v, want only the offer without the agent", path, got)
		}
	}
	for _, path := range []string{"/?agent=yes", "/?q=automatic_access%3Dyes"} {
		if got := cards(path); len(got) != 1 || got[agentOffer.ID] != "agent" {
			t.Errorf("%s: %v, want only the agent's offer", path, got)
		}
	}
	bad := anon.get("/?agent=maybe")
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("agent=maybe: %d", bad.status)
	}
	mustContain(t, bad.body, `data-testid="error-agent"`, "yes or no")
	if r := anon.get("/?q=agent%3Dyes+agent%3Dno"); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, "runs the agent or not, not both") {
		t.Fatalf("agent=yes agent=no: %d", r.status)
	}

	page := anon.get(fmt.Sprintf("/offers/%d", manual.ID)).body
	mustContain(t, page, `data-testid="offer-access"`, `data-testid="offer-access-badge" data-agent="no"`, "hosts run no agent: the provider gives you access by hand")
	mustNotContain(t, page, "I add it within the hour")
	mustContain(t, anon.get(fmt.Sprintf("/offers/%d", agentOffer.ID)).body, `data-testid="offer-access-badge" data-agent="yes"`, "hosts run the agent: your SSH keys are installed")

	buyer := app.client()
	buyer.signUp("quote-access@example.com", false)
	q := trainingQuery()
	q.Set("constraints.offers", fmt.Sprint(manual.ID))
	quotes := buyer.get("/requests?" + q.Encode()).body
	mustContain(t, quotes, `data-testid="quote-piece-access" data-agent="no"`)
	mustNotContain(t, quotes, "I add it within the hour")

	tok := buyer.createToken("reader", "read")
	api := app.apiCall(http.MethodGet, "/api/v1/offers", tok, "")
	if api.status != http.StatusOK || !strings.Contains(api.body, `"access":"manual"`) || strings.Contains(api.body, "I add it within the hour") {
		t.Fatalf("API catalogue: %d, want the mode and no instructions\n%s", api.status, api.body)
	}
	if api := app.apiCall(http.MethodGet, "/api/v1/offers?q=agent%3Dno", tok, ""); api.status != http.StatusOK || !strings.Contains(api.body, fmt.Sprintf(`"id":%d`, manual.ID)) || strings.Contains(api.body, fmt.Sprintf(`"id":%d,`, agentOffer.ID)) {
		t.Fatalf("API agent=no: %d\n%s", api.status, api.body)
	}
}

// TestOfferFormTakesAccessInstructions: without the agent the form needs
// the instructions (422 next to the field when missing or too long, the
// text kept); they are stored with the mode and shown back on editing.
func TestOfferFormTakesAccessInstructions(t *testing.T) {
	app := newTestApp(t)
	prov := app.client()
	prov.signUp("form-access@example.com", true)
	form := validOfferForm()
	form.Set("access", "manual")
	form.Set("access_instructions", "  ")
	r := prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("no instructions: %d", r.status)
	}
	mustContain(t, r.body, `id="e-access_instructions"`, "say how the buyer gets in", `<label for="f-access_instructions">`)
	long := strings.Repeat("z", market.MaxAccessInstructions+1)
	form.Set("access_instructions", long)
	r = prov.post("/provider/offers/new", "/provider/offers", form)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("long instructions: %d", r.status)
	}
	mustContain(t, r.body, `data-testid="error-access_instructions"`, "Keep the instructions under 2,000 characters (they have 2,001)", long)
	form.Set("access", "carrier-pigeon")
	if r := prov.post("/provider/offers/new", "/provider/offers", form); r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-access"`) {
		t.Fatalf("unknown mode: %d", r.status)
	}

	form.Set("access", "manual")
	form.Set("access_instructions", testInstructions)
	id := prov.createOffer(form)
	o, err := app.db.FindProviderOffer(context.Background(), prov.userID(), id)
	if err != nil {
		t.Fatal(err)
	}
	if o.Access != market.AccessManual || o.AccessInstructions != testInstructions {
		t.Fatalf("stored %q %q", o.Access, o.AccessInstructions)
	}
	edit := prov.get(fmt.Sprintf("/provider/offers/%d/edit", id)).body
	mustContain(t, edit, `<option value="manual" selected>`, testInstructions)

	// With the agent, no instructions are kept (the agent gives access).
	form.Set("access", "agent")
	form.Set("title", "8× H100 SXM, Oregon, agent")
	id2 := prov.createOffer(form)
	o2, err := app.db.FindProviderOffer(context.Background(), prov.userID(), id2)
	if err != nil {
		t.Fatal(err)
	}
	if o2.Access != market.AccessAgent || o2.AccessInstructions != "" {
		t.Fatalf("agent offer stored %q %q", o2.Access, o2.AccessInstructions)
	}
}

// TestAccessInstructionsShownAfterPayment: the buyer of an offer without
// the agent reads the provider's instructions on the reservation page
// once it is paid, not while it is held.
func TestAccessInstructionsShownAfterPayment(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("instr@example.com", true)
	app.manualOffer(prov.userID(), testInstructions)
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("instr-buyer@example.com", false)
	r := app.heldReservation(buyer)
	path := fmt.Sprintf("/reservations/%d", r.ID)
	held := buyer.get(path).body
	mustContain(t, held, `data-testid="access-instructions-pending"`, "appear here once the reservation is paid")
	mustNotContain(t, held, "I add it within the hour")
	payHeld(t, buyer, r.ID)
	paid := buyer.get(path).body
	mustContain(t, paid, `data-testid="access-instruction"`, "How you get in", "I add it within the hour and reply with the host and port.")
	mustNotContain(t, paid, `data-testid="access-instructions-pending"`)
}

// TestReservationMessages: the buyer writes to the provider from the
// reservation page (CSRF; an empty or oversized message is 422 next to
// the field, the text kept); the provider is notified and mailed, reads
// it on the booking and answers; the buyer is notified. A third person
// neither reads nor writes (404); an admin reads it, without a form.
func TestReservationMessages(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("msg-prov@example.com", true)
	app.manualOffer(prov.userID(), testInstructions)
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("msg-buyer@example.com", false)
	r := app.bookAndPay(buyer)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	msgs := resPath + "/messages"
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)

	page := buyer.get(resPath).body
	mustContain(t, page, `data-testid="messages"`, "Messages with the provider", `data-testid="messages-empty"`,
		`action="`+msgs+`"`, `<label for="f-body">Your message</label>`, `name="back" value="reservation"`)

	if got := buyer.postRaw(msgs, url.Values{"body": {"hello"}}); got.status != http.StatusForbidden {
		t.Fatalf("without CSRF: %d", got.status)
	}
	empty := buyer.post(resPath, msgs, url.Values{"body": {"  \n "}, "back": {"reservation"}})
	if empty.status != http.StatusUnprocessableEntity {
		t.Fatalf("empty message: %d", empty.status)
	}
	mustContain(t, empty.body, `id="e-body"`, "Write the message.", `aria-invalid="true"`, `name="back" value="reservation"`)
	long := strings.Repeat("w", market.MaxMessageText+1)
	big := buyer.post(resPath, msgs, url.Values{"body": {long}})
	if big.status != http.StatusUnprocessableEntity {
		t.Fatalf("oversized message: %d", big.status)
	}
	mustContain(t, big.body, `data-testid="error-body"`, "Keep the message under 4,000 characters (it has 4,001).", long)

	const ask = "Hello! My key is ssh-ed25519 AAAAC3Nza test@laptop.\nWhen can I log in?"
	sent := buyer.post(resPath, msgs, url.Values{"body": {ask}, "back": {"reservation"}})
	if sent.status != http.StatusSeeOther || !strings.HasPrefix(sent.location, resPath+"#message-") {
		t.Fatalf("send: %d → %q\n%s", sent.status, sent.location, sent.body)
	}
	after := buyer.get(resPath).body
	mustContain(t, after, "Message sent", `data-testid="message-body"`, "When can I log in?")
	if !app.notified(prov.userID(), "reservation_message", fmt.Sprintf("The buyer of booking #%d wrote: “Hello! My key is ssh-ed25519 AAAAC3Nza test@laptop. When can I log in?”", r.ID)) {
		t.Fatal("the provider was not notified")
	}
	mail := app.mailTo("msg-prov@example.com", "reservation_message")
	if mail.Subject != "New message about a reservation" || mail.URLPath != msgs || !strings.Contains(mail.Notice.Text(), "When can I log in?") {
		t.Fatalf("the provider's mail: %+v", mail)
	}

	provPage := prov.get(booking).body
	mustContain(t, provPage, "Messages with the buyer", "When can I log in?", `name="back" value="booking"`, `data-role="buyer"`)
	const answer = "Key added. ssh -p 2222 ubuntu@203.0.113.7"
	ans := prov.post(booking, msgs, url.Values{"body": {answer}, "back": {"booking"}})
	if ans.status != http.StatusSeeOther || !strings.HasPrefix(ans.location, booking+"#message-") {
		t.Fatalf("answer: %d → %q\n%s", ans.status, ans.location, ans.body)
	}
	if !app.notified(buyer.userID(), "reservation_message", fmt.Sprintf("The provider of reservation #%d wrote: “%s”", r.ID, answer)) {
		t.Fatal("the buyer was not notified")
	}
	thread := buyer.get(msgs).body
	if strings.Index(thread, "When can I log in?") > strings.Index(thread, answer) || !strings.Contains(thread, `data-role="provider"`) {
		t.Fatalf("the thread is not in order, or lacks the answer:\n%s", thread)
	}
	mustContain(t, thread, "I add it within the hour", "Back to the reservation")

	// A third person: not found, reading or writing, and nothing written.
	other := app.client()
	other.signUp("msg-other@example.com", true)
	if got := other.get(msgs); got.status != http.StatusNotFound {
		t.Fatalf("a third person reads: %d", got.status)
	}
	if got := other.post("/provider/offers", msgs, url.Values{"body": {"let me in"}}); got.status != http.StatusNotFound {
		t.Fatalf("a third person writes: %d", got.status)
	}
	th, err := app.db.ReservationThread(context.Background(), buyer.userID(), r.ID)
	if err != nil || len(th.Messages) != 2 {
		t.Fatalf("thread %+v %v, want the two messages", th.Messages, err)
	}

	// The admin reads, with no form.
	admin := app.adminClient("msg-admin@example.com")
	adminPage := admin.get(fmt.Sprintf("/admin/reservations/%d", r.ID))
	if adminPage.status != http.StatusOK {
		t.Fatalf("admin reservation: %d", adminPage.status)
	}
	mustContain(t, adminPage.body, "Messages between the buyer and the providers", "When can I log in?", answer)
	mustNotContain(t, adminPage.body, `data-testid="message-form"`)
	if got := admin.get(fmt.Sprintf("/admin/reservations/%d/messages", r.ID)); got.status != http.StatusOK || !strings.Contains(got.body, answer) {
		t.Fatalf("admin thread page: %d", got.status)
	}
	if got := admin.get(msgs); got.status != http.StatusNotFound {
		t.Fatalf("the admin on the parties' page: %d", got.status)
	}
}

// TestAPIReservationMessages: the buyer and the provider read and write a
// reservation's messages through the API (answers checked against the
// contract); an empty message is 400, a read token cannot write (403),
// and a third person's token is 404 both ways.
func TestAPIReservationMessages(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("api-msg-prov@example.com", true)
	app.manualOffer(prov.userID(), testInstructions)
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("api-msg-buyer@example.com", false)
	r := app.bookAndPay(buyer)
	path := fmt.Sprintf("/api/v1/reservations/%d/messages", r.ID)
	bw, br, pw := buyer.createToken("w", "write"), buyer.createToken("r", "read"), prov.createToken("pw", "write")

	if got := app.apiCall(http.MethodGet, path, br, ""); got.status != http.StatusOK || !strings.Contains(got.body, `"role":"buyer","messages":[]`) {
		t.Fatalf("empty thread: %d %s", got.status, got.body)
	}
	if got := app.apiCall(http.MethodPost, path, br, `{"body":"hi"}`); got.status != http.StatusForbidden {
		t.Fatalf("read token writes: %d", got.status)
	}
	if got := app.apiCall(http.MethodPost, path, bw, `{"body":"   "}`); got.status != http.StatusBadRequest || !strings.Contains(got.body, "Write the message.") {
		t.Fatalf("empty message: %d %s", got.status, got.body)
	}
	if got := app.apiCall(http.MethodPost, path, bw, `{"body":"Key is on my account."}`); got.status != http.StatusCreated || !strings.Contains(got.body, `"role":"buyer"`) {
		t.Fatalf("buyer writes: %d %s", got.status, got.body)
	}
	if got := app.apiCall(http.MethodPost, path, pw, `{"body":"Added: ssh -p 2222 ubuntu@203.0.113.7"}`); got.status != http.StatusCreated || !strings.Contains(got.body, `"role":"provider"`) {
		t.Fatalf("provider writes: %d %s", got.status, got.body)
	}
	got := app.apiCall(http.MethodGet, path, br, "")
	if got.status != http.StatusOK || strings.Count(got.body, `"author_id"`) != 2 || strings.Index(got.body, "Key is on my account.") > strings.Index(got.body, "ssh -p 2222") {
		t.Fatalf("thread: %d %s", got.status, got.body)
	}
	other := app.client()
	other.signUp("api-msg-other@example.com", false)
	ow := other.createToken("ow", "write")
	if got := app.apiCall(http.MethodGet, path, ow, ""); got.status != http.StatusNotFound {
		t.Fatalf("third person reads: %d", got.status)
	}
	if got := app.apiCall(http.MethodPost, path, ow, `{"body":"let me in"}`); got.status != http.StatusNotFound {
		t.Fatalf("third person writes: %d", got.status)
	}
}

// TestRequestRequiresTheAgent: the request builder's "only hosts that run
// the provider agent" leaves out an offer without it, says so, and offers
// to drop the constraint when nothing else fits.
func TestRequestRequiresTheAgent(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("req-byhand@example.com", true)
	manual := app.manualOffer(prov.userID(), testInstructions)
	buyer := app.client()
	buyer.signUp("req-agent@example.com", false)
	q := trainingQuery()
	mustContain(t, buyer.get("/requests?"+q.Encode()).body, `data-testid="quote-piece-access" data-agent="no"`)
	q.Set("constraints.require_agent", "1")
	page := buyer.get("/requests?" + q.Encode()).body
	mustContain(t, page, `name="constraints.require_agent" value="1" checked`, "1 run no agent", "accept hosts without the agent")
	mustNotContain(t, page, fmt.Sprintf(`href="/offers/%d"`, manual.ID), `data-testid="quote-piece-access"`)
	agentOffer := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 250)
	page = buyer.get("/requests?" + q.Encode()).body
	mustContain(t, page, fmt.Sprintf(`href="/offers/%d"`, agentOffer.ID), `data-testid="quote-piece-access" data-agent="yes"`)
	mustNotContain(t, page, `data-agent="no"`)
}
