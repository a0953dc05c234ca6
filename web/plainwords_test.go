package web

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	// hiddenRe removes what a person does not read as the page's text:
	// scripts, styles, and code samples (shown as code on purpose).
	hiddenRe  = regexp.MustCompile(`(?is)<(script|style|code|pre|kbd|samp|textarea)\b.*?</(script|style|code|pre|kbd|samp|textarea)>`)
	textTagRe = regexp.MustCompile(`<[^>]*>`)
	// rawCodeRe is a snake_case token: how the market's enums are spelled in
	// the database and the API (wall_clock, figure_above_catalogue, …).
	rawCodeRe = regexp.MustCompile(`\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b`)
)

// visibleText is the text of an HTML page as a person reads it: tags,
// attributes, scripts and code samples removed, entities decoded.
func visibleText(body string) string {
	s := hiddenRe.ReplaceAllString(body, " ")
	s = textTagRe.ReplaceAllString(s, " ")
	return html.UnescapeString(s)
}

// rawCodes returns the snake_case tokens a page shows as text.
func rawCodes(body string) []string {
	return rawCodeRe.FindAllString(visibleText(body), -1)
}

func TestRawCodesFindsTheBug(t *testing.T) {
	page := `<p title="wall_clock">Billing basis: wall_clock</p><code>gpu_name</code><script>var a_b = 1</script><option value="x_y">Wall clock</option>`
	if got := rawCodes(page); len(got) != 1 || got[0] != "wall_clock" {
		t.Fatalf("rawCodes = %q, want [wall_clock]", got)
	}
}

// plainWordsWorld books, pays, reports incidents on and disputes a
// reservation, cancels a paid one, settles, lists an offer whose figure is
// above the catalogue, and returns the pages each role reads.
func plainWordsWorld(t *testing.T) (app *billingApp, pages map[string][]string, clients map[string]*client) {
	t.Helper()
	app = newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	admin := app.adminClient("moderator@example.com")

	// An offer with a figure above the catalogue: flagged for the admin.
	form := validOfferForm()
	form.Set("title", "Fast claims")
	form.Set("figure_allreduce_busbw_method", "nccl-tests all-reduce") // the provider's own words
	form.Set("figure_bf16_tflops_value", "5000")
	form.Set("figure_bf16_tflops_basis", "estimated")
	form.Set("figure_bf16_tflops_method", "our own benchmark")
	form.Set("figure_rel_throughput_value", "900") // percent of an A100
	form.Set("figure_rel_throughput_basis", "estimated")
	form.Set("figure_rel_throughput_method", "our own benchmark")
	form.Set("figures_confirmed", "1")
	flagged := prov.createOffer(form)

	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	// A second booking, paid then cancelled inside the fee period.
	q := trainingQuery()
	q.Set("constraints.earliest_start", "2026-12-05T10:00")
	cancelled := app.bookAndPayQuery(buyer, q)
	cancelPath := fmt.Sprintf("/reservations/%d/cancel", cancelled.ID)
	if res := buyer.post(cancelPath, cancelPath, url.Values{}); res.status != http.StatusSeeOther {
		t.Fatalf("cancel: %d\n%s", res.status, res.body)
	}

	app.tick(p.Start.Add(time.Hour))
	booking := fmt.Sprintf("/provider/bookings/%d", r.ID)
	inc := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"network_degradation"}, "degradation": {"50"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(8 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"2"}, "note": {"Uplink flapping; ticket 77."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", inc); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	inc = url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"host_failure"},
		"start": {p.Start.Add(9 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(10 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"8"}, "note": {"All devices gone for an hour."}}
	if res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", inc); res.status != http.StatusSeeOther {
		t.Fatalf("buyer incident: %d\n%s", res.status, res.body)
	}
	app.tick(r.End().Add(time.Minute))
	incs, err := app.db.ListIncidents(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range incs {
		app.tick(i.CreatedAt.Add(73 * time.Hour))
	}
	svDispute(t, app, buyer, r.ID, 5000)

	ids := func(s string, id int64) string { return fmt.Sprintf(s, id) }
	pages = map[string][]string{
		"buyer": {"/offers/" + itoa(o.ID), "/requests?" + trainingQuery().Encode(), "/reservations", resPath, resPath + "/statement",
			ids("/reservations/%d", cancelled.ID), ids("/reservations/%d/statement", cancelled.ID), resPath + "/incidents/new",
			"/notifications", "/account", "/market"},
		"provider": {"/provider/offers", "/provider/offers/new", ids("/provider/offers/%d/edit", flagged), "/provider/reservations",
			booking, booking + "/statement", ids("/provider/bookings/%d/statement", cancelled.ID), booking + "/incidents/new", "/notifications", "/account"},
		"admin": {"/admin/offers", "/admin/providers", "/admin/audit", "/admin/disputes", "/admin/reconciliation",
			ids("/admin/reservations/%d", r.ID), ids("/admin/reservations/%d", cancelled.ID), "/notifications"},
	}
	ds, err := app.db.ListReservationDisputes(context.Background(), r.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range ds {
		pages["buyer"] = append(pages["buyer"], ids("/disputes/%d", d.ID))
		pages["provider"] = append(pages["provider"], ids("/disputes/%d", d.ID))
		pages["admin"] = append(pages["admin"], ids("/admin/disputes/%d", d.ID))
	}
	return app, pages, map[string]*client{"buyer": buyer, "provider": prov, "admin": admin}
}

// monthFirstRe and isoTimeRe are date formats other than the one every
// page uses ("1 Dec 2026 12:00 UTC").
var (
	monthFirstRe = regexp.MustCompile(`\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{1,2} \d{2}:\d{2}`)
	isoTimeRe    = regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}`)
)

// No page shows a raw code — a snake_case token of the market's enums —
// where a person expects words, another date format, or thousandths.
func TestPagesShowNoRawCodes(t *testing.T) {
	_, pages, clients := plainWordsWorld(t)
	dump := os.Getenv("GPM_DUMP_PAGES")
	for role, paths := range pages {
		for _, path := range paths {
			res := clients[role].get(path)
			if res.status != http.StatusOK {
				t.Errorf("%s %s: status %d", role, path, res.status)
				continue
			}
			text := visibleText(res.body)
			if d := monthFirstRe.FindString(text) + isoTimeRe.FindString(text); d != "" {
				t.Errorf("%s %s writes a date as %q", role, path, d)
			}
			if strings.Contains(text, "‰") {
				t.Errorf("%s %s shows thousandths (‰)", role, path)
			}
			if dump != "" {
				name := role + strings.NewReplacer("/", "_", "?", "_").Replace(path)
				if len(name) > 80 {
					name = name[:80]
				}
				os.WriteFile(filepath.Join(dump, name+".html"), []byte(res.body), 0o644)
			}
			if codes := rawCodes(res.body); len(codes) > 0 {
				t.Errorf("%s %s shows raw codes %q", role, path, codes)
			}
		}
	}
}

// Each party reads their own side in the second person, and a statement's
// state in words: the buyer's refund is made while the provider's payout
// is frozen by a dispute.
func TestStatementsSpeakToTheirReader(t *testing.T) {
	_, pages, clients := plainWordsWorld(t)
	buyer, prov := clients["buyer"], clients["provider"]
	resPath, booking := pages["buyer"][3], pages["provider"][4] // the disputed reservation, as each sees it
	if !strings.HasPrefix(resPath, "/reservations/") || !strings.HasPrefix(booking, "/provider/bookings/") {
		t.Fatalf("pages moved: %q, %q", resPath, booking)
	}
	stmt := buyer.get(resPath + "/statement").body
	if got := testidText(stmt, "settlement-state"); got != "refunded" {
		t.Errorf("buyer's statement state %q, want refunded", got)
	}
	mustContain(t, stmt, "Refund to you", "Refund to your card", "Credit from the provider&#39;s takings to you", "<code>local_re_")
	mustNotContain(t, visibleText(stmt), "buyer:", "provider:", "wall_clock")
	pst := prov.get(booking + "/statement").body
	if got := testidText(pst, "settlement-state"); got != "payout frozen" {
		t.Errorf("provider's statement state %q, want payout frozen", got)
	}
	mustContain(t, pst, "Your payout", "Your payout is frozen while a dispute is open", "Paid by the buyer, owed to you", "Platform fee given back to you")
	mustNotContain(t, visibleText(pst), "The provider's payout", "fee_reversal")
	list := prov.get("/provider/reservations").body
	mustContain(t, list, "Your payout is frozen")
	mustNotContain(t, list, "The provider&#39;s payout")
	incidents := prov.get(booking).body
	mustContain(t, incidents, "<td>you</td>", "<td>the buyer</td>")
}
