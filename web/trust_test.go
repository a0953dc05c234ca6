package web

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/gpumarket/gpumarket/store"
)

// Issue 23: trust between accounts. An address belongs to its owner.

// Nothing that acts for the account can be created before its address is
// confirmed: each refusal is the page saying so, with the button that
// mails the link again; nothing is stored.
func TestUnconfirmedAccountHoldsNothingThatActsForIt(t *testing.T) {
	app := newBillingApp(t)
	c := app.client()
	c.signUpUnverified("squat@example.com", true)
	key := publicKeyLine(t, "ed25519")
	refused := []struct {
		what, from, path string
		form             url.Values
	}{
		{"an API token", "/account", "/account/tokens", url.Values{"token_name": {"ci"}, "token_scope": {"write"}}},
		{"an SSH key", "/account", "/account/ssh-keys", url.Values{"public_key": {key}}},
		{"a saved card", "/account", "/account/payment-methods", url.Values{}},
		{"a host token", "/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {"1"}, "node": {"0"}}},
		{"a standing order", "/account", "/orders", url.Values{}},
		{"a spot bid", "/account", "/offers/1/spot-bids", url.Values{}},
		{"a resale listing", "/account", "/reservations/1/resale", url.Values{}},
	}
	for _, x := range refused {
		r := c.post(x.from, x.path, x.form)
		if r.status != http.StatusForbidden {
			t.Errorf("%s unconfirmed: %d, want 403\n%.1500s", x.what, r.status, r.body)
			continue
		}
		mustContain(t, r.body, `data-testid="verify-needed"`, "Confirm your e-mail address first", "API or host tokens, SSH keys or saved cards",
			`data-testid="resend-verification"`)
	}
	ctx := context.Background()
	id := c.userID()
	if n := app.tokenCount(id); n != 0 {
		t.Errorf("%d API tokens on an unconfirmed account", n)
	}
	if keys, _ := app.db.ListSSHKeys(ctx, id); len(keys) != 0 {
		t.Errorf("%d SSH keys on an unconfirmed account", len(keys))
	}
	// The store refuses too, whoever calls it.
	if _, _, err := app.db.CreateAPIToken(ctx, id, "direct", scopeWrite, testNow); err == nil || !strings.Contains(err.Error(), "Confirm your e-mail") {
		t.Errorf("store.CreateAPIToken for an unconfirmed account: %v", err)
	}
}

// The address's owner takes the account back from whoever signed up with
// it: her first confirmation logs the squatter's session out, and her
// password reset revokes the API tokens, removes the SSH keys (listed on
// the page and in a mail) and ends the half-done two-factor log-ins; the
// saved card left is named, and she is taken to it after logging in.
func TestOwnerTakesTheAccountBackFromASquatter(t *testing.T) {
	app := newBillingApp(t)
	squatter := app.client()
	squatter.signUpUnverified("owner@example.com", false)
	id := squatter.userID()

	// The owner follows the confirmation link in her own browser.
	owner := app.client()
	if r := owner.get(app.mailLink("owner@example.com", store.MailVerifyAddress)); r.status != http.StatusSeeOther {
		t.Fatalf("owner confirms: %d", r.status)
	}
	if r := squatter.get("/account"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.location, "/login") {
		t.Fatalf("the squatter's session after the owner's confirmation: %d → %q, want logged out", r.status, r.location)
	}

	// The squatter, who knows the password, logs in again and equips the account.
	if r := squatter.login("owner@example.com", testPassword, "/"); r.status != http.StatusSeeOther {
		t.Fatalf("squatter logs in again: %d", r.status)
	}
	token := squatter.createToken("mine", scopeWrite)
	key := publicKeyLine(t, "ed25519")
	addSSHKey(t, squatter, key)
	keys, _ := app.db.ListSSHKeys(context.Background(), id)
	if len(keys) != 1 {
		t.Fatalf("%d keys", len(keys))
	}
	app.addCard(squatter, "4242424242424242")
	secret := app.enrolTOTP(id)
	half := app.client()
	if r := half.login("owner@example.com", testPassword, "/"); r.location != "/login/code" {
		t.Fatalf("half-done login: %d → %q", r.status, r.location)
	}

	// The owner resets the password.
	link := app.resetLink("owner@example.com")
	r := owner.post(link, "/password/reset", url.Values{"token": {mustQuery(t, link, "token")}, "new_password": {"the owner's own password"}})
	if r.status != http.StatusSeeOther || r.location != "/login?next=%2Faccount%23payment-methods" {
		t.Fatalf("reset: %d → %q, want the log-in page leading to the saved cards", r.status, r.location)
	}
	page := owner.get(r.location).body
	mustContain(t, page, "1 API token was revoked.", "SSH keys removed: ssh-ed25519 "+keys[0].Fingerprint,
		"Half-done two-factor log-ins ended: 1.", "Your account still has 1 saved card(s)")
	if api := app.apiCall(http.MethodGet, "/api/v1/ping", token, ""); api.status != http.StatusUnauthorized {
		t.Errorf("the squatter's token after the owner's reset: %d, want 401", api.status)
	}
	if keys, _ := app.db.ListSSHKeys(context.Background(), id); len(keys) != 0 {
		t.Errorf("%d SSH keys after the reset", len(keys))
	}
	if cards := app.savedCards(id); len(cards) != 1 {
		t.Errorf("%d saved cards after the reset, want the one left for the owner to judge", len(cards))
	}
	if r := half.post("/login", "/login/code", url.Values{"code": {app.freshCode(id, secret)}}); r.location != "/login" {
		t.Errorf("the squatter's half-done login completed after the reset")
	}
	mail := app.mailBody("owner@example.com", store.MailAccessRemoved)
	for _, want := range []string{"API tokens revoked: 1", keys[0].Fingerprint, "1 saved card(s)"} {
		if !strings.Contains(mail, want) {
			t.Errorf("the mail does not say %q:\n%s", want, mail)
		}
	}
	requireReconciled(t, app.testApp)
}

// A confirmed address change logs out every other session of the account.
func TestAddressChangeEndsTheOtherSessions(t *testing.T) {
	app := newTestApp(t)
	here, there := app.client(), app.client()
	here.signUp("move@example.com", false)
	there.login("move@example.com", testPassword, "/")
	r := here.post("/account", "/account/email", url.Values{"new_email": {"moved@example.com"}, "email_password": {testPassword}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("ask change: %d\n%s", r.status, r.body)
	}
	if r := here.get(app.mailLink("moved@example.com", store.MailVerifyAddress)); r.status != http.StatusSeeOther || r.location != "/account" {
		t.Fatalf("confirm: %d → %q", r.status, r.location)
	}
	if r := here.get("/account"); r.status != http.StatusOK || !strings.Contains(r.body, "every other session of the account was logged out") {
		t.Fatalf("the confirming browser: %d", r.status)
	}
	if r := there.get("/account"); r.status != http.StatusSeeOther {
		t.Fatalf("the other session after the change: %d, want logged out", r.status)
	}
}

// Links that confirm an address or set a password are shown only to their
// addressee: the admin's outbox shows them redacted, and the demo mailbox
// does not show an account the link confirming an address it does not own.
func TestSecretLinksShownOnlyToTheAddressee(t *testing.T) {
	app := newTestAppWith(t, func(cfg *Config) { cfg.Demo = true })
	ada := app.client()
	ada.signUp("ada@example.com", false)
	admin := app.adminClient("root@example.com")
	reset := app.resetLink("ada@example.com")
	mails, _ := app.db.ListMail(context.Background(), 0, 100)
	var resetID, verifyID int64
	for _, m := range mails {
		if m.To == "ada@example.com" && m.Kind == store.MailPasswordReset {
			resetID = m.ID
		}
	}
	token := mustQuery(t, reset, "token")
	for _, path := range []string{fmt.Sprintf("/admin/mail/%d", resetID), fmt.Sprintf("/mailbox/%d", resetID)} {
		r := admin.get(path)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d", path, r.status)
		}
		mustContain(t, r.body, "[link sent to the addressee]")
		mustNotContain(t, r.body, token, `data-testid="mail-link"`)
	}
	// Ada sees her own reset link.
	mustContain(t, ada.get(fmt.Sprintf("/mailbox/%d", resetID)).body, `data-testid="mail-link"`)

	// Ada asks to move to an address she does not own here: her mailbox
	// does not hand her the link.
	r := ada.post("/account", "/account/email", url.Values{"new_email": {"bob@bigcorp.example"}, "email_password": {testPassword}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("ask change: %d", r.status)
	}
	link := app.mailLink("bob@bigcorp.example", store.MailVerifyAddress)
	mails, _ = app.db.ListMail(context.Background(), 0, 100)
	for _, m := range mails {
		if m.To == "bob@bigcorp.example" {
			verifyID = m.ID
		}
	}
	body := ada.get(fmt.Sprintf("/mailbox/%d", verifyID)).body
	mustContain(t, body, "[link sent to the addressee]")
	mustNotContain(t, body, mustQuery(t, link, "token"))
}

// mailBody is the body of the newest message of kind to the address.
func (a *testApp) mailBody(to, kind string) string {
	a.t.Helper()
	all, err := a.db.ListMail(context.Background(), 0, 1000)
	if err != nil {
		a.t.Fatal(err)
	}
	for _, m := range all {
		if m.To == to && m.Kind == kind {
			return m.Body
		}
	}
	a.t.Fatalf("no %s mail to %s", kind, to)
	return ""
}

// Successful log-ins do not count against the client address: an office
// behind one address logs in more than loginPerAddress times in the
// window; its failures still do, and the per-account limit is kept.
func TestOfficeBehindOneAddressIsNotLockedOut(t *testing.T) {
	app := newTestApp(t)
	for i := 0; i < 4; i++ {
		app.storeUser(fmt.Sprintf("staff%d@example.com", i), false)
	}
	for i := 0; i <= loginPerAddress+5; i++ {
		if r := app.client().login(fmt.Sprintf("staff%d@example.com", i%4), testPassword, "/"); r.status != http.StatusSeeOther {
			t.Fatalf("log-in %d from the office: %d, want 303", i+1, r.status)
		}
	}
	c := app.client()
	for i := 0; i < loginPerAddress; i++ {
		if r := c.login(fmt.Sprintf("nobody%d@example.com", i), "wrong password!", "/"); r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d, want 401", i+1, r.status)
		}
	}
	if r := app.client().login("staff0@example.com", testPassword, "/"); r.status != http.StatusTooManyRequests {
		t.Fatalf("after %d failures from the address: %d, want 429", loginPerAddress, r.status)
	}
}

// Twenty-four simultaneous wrong codes for one account: at most
// codeFailuresPerAccount are checked, the rest refused (429), because
// each attempt is counted in one conditional UPDATE before its check.
func TestSimultaneousWrongCodesStayWithinTheLimit(t *testing.T) {
	app := newTestApp(t)
	u := app.storeUser("racer@example.com", false)
	app.enrolTOTP(u.ID)
	const n = 24
	type half struct {
		c     *client
		token string
	}
	halves := make([]half, n)
	for i := range halves {
		c := app.clientFrom(fmt.Sprintf("127.0.0.%d", 2+i%8)) // spread over addresses: the per-address limit is not the one under test
		if r := c.login("racer@example.com", testPassword, "/"); r.location != "/login/code" {
			t.Fatalf("login %d: %d → %q", i, r.status, r.location)
		}
		halves[i] = half{c, c.csrf("/login/code")}
	}
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i, h := range halves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := h.c.http.PostForm(app.srv.URL+"/login/code", url.Values{"_csrf": {h.token}, "code": {"000000"}})
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	checked := 0
	for _, s := range statuses {
		switch s {
		case http.StatusUnauthorized:
			checked++
		case http.StatusTooManyRequests:
		default:
			t.Errorf("status %d", s)
		}
	}
	if checked > codeFailuresPerAccount {
		t.Fatalf("%d of %d simultaneous wrong codes were checked, want at most %d", checked, n, codeFailuresPerAccount)
	}
}

// JSON bodies with anything after the one value are refused on the agent,
// standing-order and spot routes, as on the others.
func TestTrailingJSONIsRefused(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("trail-host@example.com", true)
	o := app.ownOffer(prov.userID())
	hostToken := createHostToken(t, prov, o.ID, 0)
	buyer := app.client()
	buyer.signUp("trail@example.com", false)
	token := buyer.createToken("ci", scopeWrite)
	for path, body := range map[string]string{"/api/v1/orders": `{} {}`, "/api/v1/spot/bids": `{"offer_id": 1} {"offer_id": 2}`} {
		r := app.apiCall(http.MethodPost, path, token, body)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, "trailing data") {
			t.Errorf("%s with trailing data: %d %s", path, r.status, r.body)
		}
	}
	beat, err := json.Marshal(heartbeatBody(1, 8))
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, app.srv.URL+"/agent/v1/heartbeat", strings.NewReader(string(beat)+` {"seq": 99}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+hostToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := read(t, resp)
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "trailing data") {
		t.Errorf("heartbeat with trailing data: %d %s", r.status, r.body)
	}
}

// A suspension revokes the provider's host tokens, which stay revoked
// after reinstatement, like API tokens.
func TestHostTokensDoNotComeBackAtReinstatement(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("suspended-host@example.com", true)
	o := app.ownOffer(prov.userID())
	hostToken := createHostToken(t, prov, o.ID, 0)
	app.beat(hostToken, heartbeatBody(1, 8))
	id := prov.userID()
	app.suspend(id)
	admin := app.adminClient("reinstater@example.com")
	if r := admin.post("/admin/providers", "/admin/providers/"+itoa(id)+"/reinstate", url.Values{}); r.status != http.StatusSeeOther {
		t.Fatalf("reinstate: %d", r.status)
	}
	if r := app.agentPost(hostToken, "/agent/v1/heartbeat", heartbeatBody(2, 8)); r.status != http.StatusUnauthorized {
		t.Fatalf("the host token after reinstatement: %d, want 401", r.status)
	}
}

// A heartbeat whose seq jumps beyond market.MaxSeqStep (and past the
// fresh-start clock value) is refused and recorded nowhere, so the token
// keeps working; a fresh start at the Unix time in milliseconds is taken.
func TestHeartbeatSeqIsBounded(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("seq-host@example.com", true)
	o := app.ownOffer(prov.userID())
	hostToken := createHostToken(t, prov, o.ID, 0)
	app.beat(hostToken, heartbeatBody(1, 8))
	r := app.agentPost(hostToken, "/agent/v1/heartbeat", heartbeatBody(math.MaxInt64, 8))
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "seq jumps too far") {
		t.Fatalf("seq 2^63-1: %d %s", r.status, r.body)
	}
	if got := app.beat(hostToken, heartbeatBody(2, 8)); !got.Accepted {
		t.Fatal("the next heartbeat after a refused jump is not accepted")
	}
	if got := app.beat(hostToken, heartbeatBody(testNow.UnixMilli(), 8)); !got.Accepted {
		t.Fatal("a fresh state file's start is not accepted")
	}
}
