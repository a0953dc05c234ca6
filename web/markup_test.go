package web

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

var (
	scriptRe = regexp.MustCompile(`(?s)<script\b.*?</script>`)
	anyTagRe = regexp.MustCompile(`<[a-zA-Z][^>]*>`)
	quotedRe = regexp.MustCompile(`"[^"]*"|'[^']*'`)
	// A templ keyword standing as an attribute is a conditional that templ
	// did not read as one (an "else if" among attributes) and wrote as text.
	// (for= is a label's attribute; a bare for is not.)
	keywordAttrRe = regexp.MustCompile(`\s(else|if|switch|case|default)(\s|=|/?>)|\sfor(\s|/?>)`)
)

// strayAttributes returns the tags of body that carry a templ keyword as
// an attribute, e.g. <input id="f-email" … else autocomplete="email">.
func strayAttributes(body string) []string {
	var bad []string
	for _, tag := range anyTagRe.FindAllString(scriptRe.ReplaceAllString(body, ""), -1) {
		if keywordAttrRe.MatchString(quotedRe.ReplaceAllString(tag, `""`)) {
			bad = append(bad, tag)
		}
	}
	return bad
}

func TestStrayAttributesFindsTheBug(t *testing.T) {
	if got := strayAttributes(`<p>if you like, or else</p><label for="f-email">E</label><input id="f-email" value="" else autocomplete="email"><a title="else if">x</a>`); len(got) != 1 || !strings.Contains(got[0], "f-email") {
		t.Fatalf("strayAttributes = %q, want the input only", got)
	}
}

// TestNoPageCarriesStrayAttributes opens the pages with forms — empty, and
// re-rendered with errors and help — as a visitor, a provider and an
// admin, and checks that no tag carries a templ keyword as an attribute.
func TestNoPageCarriesStrayAttributes(t *testing.T) {
	app := newTestApp(t)
	o := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	id := itoa(o.ID)

	visitor := app.client()
	pages := []struct {
		c      *client
		path   string
		status int
	}{
		{visitor, "/", http.StatusOK},
		{visitor, "/?q=" + url.QueryEscape("devices>=8 family=H100"), http.StatusOK},
		{visitor, "/?max_price=abc&min_memory=lots&q=" + url.QueryEscape("devices>=x"), http.StatusUnprocessableEntity},
		{visitor, "/offers/" + id, http.StatusOK},
		{visitor, "/signup", http.StatusOK},
		{visitor, "/login", http.StatusOK},
		{visitor, "/market", http.StatusOK},
		{visitor, "/market/methodology", http.StatusOK},
		{visitor, "/requests", http.StatusOK},
		{visitor, "/requests?workload.kind=training&workload.devices=8&workload.hours=4", http.StatusOK},
	}
	staff := app.client()
	staff.signUp("staff@example.com", true)
	if err := app.makeAdmin(context.Background(), staff.userID(), true); err != nil {
		t.Fatal(err)
	}
	own := staff.createOffer(validOfferForm())
	for _, p := range []string{"/account", "/notifications", "/reservations", "/provider/offers", "/provider/offers/new",
		"/provider/offers/" + itoa(own) + "/edit", "/provider/reservations", "/admin/offers", "/admin/providers",
		"/admin/audit", "/admin/disputes", "/admin/reconciliation"} {
		pages = append(pages, struct {
			c      *client
			path   string
			status int
		}{staff, p, http.StatusOK})
	}
	for _, p := range pages {
		r := p.c.get(p.path)
		if r.status != p.status {
			t.Errorf("GET %s: status %d, want %d", p.path, r.status, p.status)
			continue
		}
		if bad := strayAttributes(r.body); len(bad) > 0 {
			t.Errorf("GET %s: %d tags carry a templ keyword as an attribute, e.g. %s", p.path, len(bad), bad[0])
		}
	}

	// Forms re-rendered with errors next to their fields.
	bad := validOfferForm()
	bad.Set("price", "free")
	bad.Set("title", "")
	r := staff.post("/provider/offers/new", "/provider/offers", bad)
	if r.status != http.StatusUnprocessableEntity && r.status != http.StatusSeeOther {
		t.Fatalf("invalid offer: status %d", r.status)
	}
	if r.status == http.StatusSeeOther {
		r = staff.get(r.location)
	}
	if !strings.Contains(r.body, `aria-invalid="true"`) {
		t.Fatalf("the invalid offer form shows no field in error:\n%s", r.body)
	}
	if s := strayAttributes(r.body); len(s) > 0 {
		t.Errorf("the offer form with errors: %d tags carry a templ keyword as an attribute, e.g. %s", len(s), s[0])
	}
	r = visitor.post("/signup", "/signup", url.Values{"email": {"not an email"}, "password": {"x"}})
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("invalid sign-up: status %d", r.status)
	}
	if s := strayAttributes(r.body); len(s) > 0 {
		t.Errorf("the sign-up form with errors: %d tags carry a templ keyword as an attribute, e.g. %s", len(s), s[0])
	}
}
