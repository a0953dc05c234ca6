package web

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestTokenCreationSurvivesRefresh: creating an API token redirects (post,
// redirect, get), so refreshing the page that shows the token shows the
// account again and creates nothing; the token is shown on that one page
// only, and the cookie that carries it there does not hold it readably.
func TestTokenCreationSurvivesRefresh(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("tokens@example.com", false)
	ctx := context.Background()

	r := c.post("/account", "/account/tokens", url.Values{"token_name": {"ci"}, "token_scope": {"write"}})
	if r.status != http.StatusSeeOther || r.location != "/account#tok-h" {
		t.Fatalf("create: %d → %q, want 303 to the account's tokens", r.status, r.location)
	}
	u, _ := url.Parse(app.srv.URL + "/account")
	cookies := c.http.Jar.Cookies(u)
	shown := c.get(r.location)
	m := newTokenRe.FindStringSubmatch(shown.body)
	if shown.status != http.StatusOK || m == nil {
		t.Fatalf("the page after creating shows no token: %d", shown.status)
	}
	raw := strings.TrimSpace(m[1])
	mustContain(t, shown.body, "Token “ci” created. Copy it now under API tokens: it is shown only once.")
	// A signed cookie is base64(time|base64(value)|mac): the value must not hold the token.
	for _, ck := range cookies {
		outer, _ := base64.URLEncoding.DecodeString(ck.Value)
		if parts := bytes.SplitN(outer, []byte("|"), 3); len(parts) == 3 {
			inner, _ := base64.URLEncoding.DecodeString(string(parts[1]))
			if bytes.Contains(inner, []byte(raw)) {
				t.Fatalf("cookie %s carries the token readably", ck.Name)
			}
		}
	}
	if _, _, err := app.db.FindAPIToken(ctx, raw); err != nil {
		t.Fatalf("the token shown does not work: %v", err)
	}

	// The refresh is a GET of /account: no second token, and the token is not shown again.
	again := c.get("/account")
	if again.status != http.StatusOK || strings.Contains(again.body, raw) || strings.Contains(again.body, `data-testid="new-token"`) {
		t.Fatalf("the refreshed page: %d, token shown again: %v", again.status, strings.Contains(again.body, raw))
	}
	tokens, err := app.db.ListAPITokens(ctx, c.userID())
	if err != nil || len(tokens) != 1 {
		t.Fatalf("%d tokens after creating one and refreshing (%v)", len(tokens), err)
	}

	// Invalid input is re-rendered with 422 at the POST address and creates nothing.
	bad := c.post("/account", "/account/tokens", url.Values{"token_name": {""}, "token_scope": {"write"}})
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.body, "Name the token") {
		t.Fatalf("a nameless token: %d", bad.status)
	}
	if tokens, _ := app.db.ListAPITokens(ctx, c.userID()); len(tokens) != 1 {
		t.Fatalf("%d tokens after an invalid creation", len(tokens))
	}
}

// TestOfferFormErrorRepeatsHarmlessly: the offer form's error page is the
// form re-rendered with 422 at the POST address (as every form's is), so
// the browser's refresh re-submits it; a refresh of an invalid submission
// is validated again and creates nothing, and the valid one redirects.
func TestOfferFormErrorRepeatsHarmlessly(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("host@example.com", true)
	form := validOfferForm()
	form.Set("price", "two dollars")
	for i := 0; i < 2; i++ { // the submission and its refresh
		r := c.post("/provider/offers/new", "/provider/offers", form)
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `value="two dollars"`) {
			t.Fatalf("submission %d: %d, want 422 with the input kept", i+1, r.status)
		}
	}
	offers, err := app.db.ListProviderOffers(context.Background(), c.userID())
	if err != nil || len(offers) != 0 {
		t.Fatalf("%d offers after two invalid submissions (%v)", len(offers), err)
	}
	form.Set("price", "2.49")
	if r := c.post("/provider/offers/new", "/provider/offers", form); r.status != http.StatusSeeOther || r.location != "/provider/offers" {
		t.Fatalf("valid submission: %d → %q", r.status, r.location)
	}
}
