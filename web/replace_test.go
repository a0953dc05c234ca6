package web

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// TestReplacementFieldsetOnTheBuilder: the builder shows the replacement
// fieldset, keeps what was chosen, refuses a bad premium next to its field,
// and books with the policy in the stored request.
func TestReplacementFieldsetOnTheBuilder(t *testing.T) {
	app := newBillingApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()
	q := trainingQuery()
	q.Set("replacement.policy", "ask")
	q.Set("replacement.max_premium", "0.5x")
	r := c.get("/requests?" + q.Encode())
	mustContain(t, r.body, `data-testid="replacement-fieldset"`, `<option value="ask" selected`, "Premium: ", `id="e-replacement.max_premium"`)
	q.Set("replacement.max_premium", "0.50")
	r = c.get("/requests?" + q.Encode())
	mustContain(t, r.body, `value="0.50"`, `data-testid="on-failure"`, "If a host fails, the market offers you another machine")
	mustNotContain(t, r.body, `id="e-replacement.max_premium"`)
}

// TestAskReplacementConfirmedOnItsPage: a host of an ask-policy rental
// fails; the buyer is offered the replacement, another user cannot see
// it, the buyer confirms it on its page (a form with CSRF, through the
// workflow), the rental moves once, and everything reconciles.
func TestAskReplacementConfirmedOnItsPage(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("repl-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("repl-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "4")
	q.Set("replacement.policy", "ask")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked %+v", p)
	}
	// The other provider's offer is listed after the booking.
	prov2 := app.client()
	prov2.signUp("repl-prov2@example.com", true)
	o2 := app.ownOffer(prov2.userID())

	token := createHostToken(t, prov, o.ID, 0)
	s := p.Start
	app.tick(s)
	for i := range 6 {
		app.clock.set(s.Add(time.Duration(i) * 10 * time.Minute))
		app.beat(token, heartbeatBody(int64(i+1), 8))
	}
	app.tick(s.Add(time.Hour)) // silent 10 minutes: a host failure; offered

	ctx := context.Background()
	reps, err := app.db.ListReplacements(ctx, r.ID)
	if err != nil || len(reps) != 1 || reps[0].State != store.ReplacementOffered {
		t.Fatalf("replacements %+v %v", reps, err)
	}
	path := fmt.Sprintf("/replacements/%d", reps[0].ID)
	other := app.client()
	other.signUp("repl-other@example.com", false)
	if got := other.get(path); got.status != http.StatusNotFound {
		t.Fatalf("another user sees the offer: %d", got.status)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body, `data-testid="replacement-confirm-link"`)
	page := buyer.get(path)
	mustContain(t, page.body, `data-testid="confirm-replacement"`, fmt.Sprintf("8 device(s) on offer #%d", o2.ID), "host failure on node 1")
	done := buyer.post(path, path+"/confirm", url.Values{})
	if done.status != http.StatusSeeOther || done.location != fmt.Sprintf("/reservations/%d", r.ID) {
		t.Fatalf("confirm: %d → %q\n%s", done.status, done.location, done.body)
	}
	again := buyer.post(path, path+"/confirm", url.Values{})
	if again.status != http.StatusConflict {
		t.Fatalf("second confirm: %d", again.status)
	}
	got, err := app.db.FindReservation(ctx, r.ID)
	if err != nil || len(got.Pieces) != 2 || got.Pieces[1].OfferID != o2.ID || !got.Pieces[0].End.Equal(s.Add(time.Hour)) {
		t.Fatalf("pieces %+v %v", got.Pieces, err)
	}
	// Same price, whole hours left: the replacement costs what the 3 hours
	// left were paid, 8 × 3 × 219¢ = 5,256¢; the first hour stays, 1,752¢.
	if got.Pieces[1].AmountCents != 8*3*219 || got.Pieces[0].AmountCents != 8*219 {
		t.Fatalf("amounts %s and %s", got.Pieces[0].AmountCents, got.Pieces[1].AmountCents)
	}
	// The reservation page shows the original and the replacement side by side.
	resPage := buyer.get(fmt.Sprintf("/reservations/%d", r.ID)).body
	mustContain(t, resPage, `data-testid="replacements"`, `data-testid="replacement-state">replaced<`,
		fmt.Sprintf("Offer #%d, 8 device(s)", o2.ID), fmt.Sprintf("settles for $17.52 of the $70.08 paid for it"),
		`data-testid="replacement-difference">none<`)
	app.connectPayouts(prov)
	app.connectPayouts(prov2)
	app.tick(p.End.Add(time.Minute))
	app.tick(p.End.Add(2 * time.Hour))
	// The statement shows them side by side too, with the incident: the
	// outage that ends at the replacement's start, 10 minutes after the
	// last heartbeat (beats 10 minutes apart are outages of their own).
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	var inc store.Incident
	for _, i := range incs {
		if i.End.Equal(s.Add(time.Hour)) {
			inc = i
		}
	}
	if inc.ID == 0 || !inc.Start.Equal(s.Add(50*time.Minute)) {
		t.Fatalf("no incident up to the replacement: %+v", incs)
	}
	st := buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID))
	mustContain(t, st.body, `data-testid="replacements"`, `data-testid="replacement-incident">Incident #`+fmt.Sprint(inc.ID)+": Host failure", "(10 min down)",
		fmt.Sprintf("Offer #%d, 8 device(s)", o2.ID), "settles for $17.52 of the $70.08 paid for it", `data-testid="replacement-difference">none<`)
	requireReconciled(t, app.testApp)
}

// TestOfferPageAndQuoteSayWhatHappensOnFailure: the offer page says in
// one sentence what a host failure does under its cap, and the API's
// quote says it under the request's replacement terms.
func TestOfferPageAndQuoteSayWhatHappensOnFailure(t *testing.T) {
	app := newTestApp(t)
	o := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	page := app.client().get(fmt.Sprintf("/offers/%d", o.ID))
	mustContain(t, page.body, `data-testid="offer-on-failure">If a host fails, the rental stays where it is and the SLA credit applies (at most `+
		market.FormatPercentBP(o.CreditCapBP)+"% of the piece")
	c := app.client()
	c.signUp("quote-bot@example.com", false)
	tok := c.createToken("ci", "read")
	for body, want := range map[string]string{
		apiTrainingRequest: "the rental stays where it is",
		strings.Replace(apiTrainingRequest, `"version":1,`, `"version":1,"replacement":{"policy":"auto","max_premium_cents":50},`, 1): "paying at most $0.50 more per reference device-hour",
	} {
		r := app.apiCall("POST", "/api/v1/quotes", tok, body)
		var q apiQuotes
		if err := json.Unmarshal([]byte(r.body), &q); r.status != http.StatusOK || err != nil || !strings.Contains(q.OnFailure, want) {
			t.Fatalf("quote: %d %v on_failure %q, want %q", r.status, err, q.OnFailure, want)
		}
	}
}

// TestAdminTriggersReplacementFromBuyersReport: a buyer's report of a host
// failure never moves the rental by itself; an admin triggers the
// replacement from the incident on the admin reservation page (a form
// with CSRF, through the workflow), the auto policy books it once, a
// second trigger is refused, and everything reconciles.
func TestAdminTriggersReplacementFromBuyersReport(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("adm-repl-prov@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("adm-repl-buyer@example.com", false)
	q := trainingQuery()
	q.Set("workload.hours", "4")
	q.Set("replacement.policy", "auto")
	r := app.bookAndPayQuery(buyer, q)
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked %+v", p)
	}
	prov2 := app.client()
	prov2.signUp("adm-repl-prov2@example.com", true)
	o2 := app.ownOffer(prov2.userID())

	now := p.Start.Add(time.Hour)
	app.tick(now)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"host_failure"},
		"start": {p.Start.Add(50 * time.Minute).Format(formTimeLayout)}, "end": {now.Format(formTimeLayout)},
		"devices_affected": {"8"}, "note": {"the machine does not answer ssh since 10:50"}}
	if res := buyer.post(resPath+"/incidents/new", resPath+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("buyer incident: %d\n%s", res.status, res.body)
	}
	app.tick(now.Add(time.Minute))
	ctx := context.Background()
	if reps, _ := app.db.ListReplacements(ctx, r.ID); len(reps) != 0 {
		t.Fatalf("a buyer's report alone triggered %+v", reps)
	}
	incs, err := app.db.ListIncidents(ctx, r.ID)
	if err != nil || len(incs) != 1 {
		t.Fatalf("incidents %+v %v", incs, err)
	}
	admin := app.adminClient("adm-repl-ops@example.com")
	adminPath := fmt.Sprintf("/admin/reservations/%d", r.ID)
	page := admin.get(adminPath)
	action := fmt.Sprintf("%s/incidents/%d/replace", adminPath, incs[0].ID)
	mustContain(t, page.body, `data-testid="admin-replaceable"`, `action="`+action+`"`, "Node 1 of offer #")
	// Neither the buyer nor a provider (with a CSRF token of their own) may trigger it.
	if res := buyer.post(resPath, action, url.Values{"node": {"0"}}); res.status != http.StatusForbidden && res.status != http.StatusNotFound {
		t.Fatalf("a buyer triggered it: %d", res.status)
	}
	if res := prov.post("/provider/bookings", action, url.Values{"node": {"0"}}); res.status != http.StatusForbidden && res.status != http.StatusNotFound {
		t.Fatalf("a provider triggered it: %d", res.status)
	}
	triggers := func() []store.AuditEntry {
		t.Helper()
		es, _, err := app.db.ListAudit(ctx, store.AuditFilter{Action: store.AuditReplacementTrigger})
		if err != nil {
			t.Fatal(err)
		}
		return es
	}
	if reps, _ := app.db.ListReplacements(ctx, r.ID); len(reps) != 0 || len(triggers()) != 0 {
		t.Fatalf("refused triggers recorded %+v / %+v", reps, triggers())
	}
	res := admin.post(adminPath, action, url.Values{"node": {"0"}})
	if res.status != http.StatusSeeOther || res.location != adminPath {
		t.Fatalf("trigger: %d → %q\n%s", res.status, res.location, res.body)
	}
	adminPage := admin.get(adminPath).body
	mustContain(t, adminPage, "Replacement decided: booked.")
	reps, err := app.db.ListReplacements(ctx, r.ID)
	if err != nil || len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].IncidentID != incs[0].ID || reps[0].OutageID != 0 ||
		reps[0].TriggeredBy != admin.userID() {
		t.Fatalf("replacements %+v %v", reps, err)
	}
	// The admin's trigger is in the audit trail: who, which rental, what
	// was decided, shown on the audit page and the reservation's timeline.
	es := triggers()
	if len(es) != 1 || es[0].ActorID != admin.userID() || es[0].SubjectKind != store.AuditSubjectReservation || es[0].SubjectID != r.ID {
		t.Fatalf("audit entries %+v", es)
	}
	var after struct {
		ReplacementID int64  `json:"replacement_id"`
		IncidentID    int64  `json:"incident_id"`
		Node          int    `json:"node"`
		State         string `json:"state"`
	}
	if err := json.Unmarshal([]byte(es[0].After), &after); err != nil || after.ReplacementID != reps[0].ID || after.IncidentID != incs[0].ID ||
		after.Node != 0 || after.State != store.ReplacementBooked {
		t.Fatalf("audit after %q: %+v %v", es[0].After, after, err)
	}
	note := fmt.Sprintf("Replacement #%d of reservation #%d triggered from incident #%d (host failure on node 1): booked.", reps[0].ID, r.ID, incs[0].ID)
	if es[0].Note != note {
		t.Fatalf("audit note %q, want %q", es[0].Note, note)
	}
	auditPage := admin.get("/admin/audit?action=" + url.QueryEscape(store.AuditReplacementTrigger)).body
	mustContain(t, auditPage, `data-action="replacement.trigger"`, "Replacement triggered by an admin", note,
		fmt.Sprintf("adm-repl-ops@example.com (#%d)", admin.userID()), fmt.Sprintf("reservation #%d", r.ID), "1 entry")
	mustContain(t, adminPage, "Replacement triggered by an admin: "+note)
	mustContain(t, admin.get("/admin/audit").body, `<option value="replacement.trigger"`)
	got, err := app.db.FindReservation(ctx, r.ID)
	if err != nil || len(got.Pieces) != 2 || got.Pieces[1].OfferID != o2.ID || !got.Pieces[0].End.Equal(app.clock.now()) {
		t.Fatalf("pieces %+v %v", got.Pieces, err)
	}
	again := admin.post(adminPath, action, url.Values{"node": {"0"}})
	if again.status != http.StatusSeeOther {
		t.Fatalf("second trigger: %d", again.status)
	}
	if reps, _ := app.db.ListReplacements(ctx, r.ID); len(reps) != 1 || len(triggers()) != 1 {
		t.Fatalf("%d replacements, %d audited triggers after a second trigger", len(reps), len(triggers()))
	}
	mustContain(t, buyer.get("/notifications").body, "your rental runs on 8 device(s) on offer #")
	app.connectPayouts(prov)
	app.connectPayouts(prov2)
	app.tick(p.End.Add(time.Minute))
	app.tick(p.End.Add(2 * time.Hour))
	requireReconciled(t, app.testApp)
}

// TestStatementsShowTheFailingProviderTheReplacement: the failing
// provider's statement shows their piece and its replacement side by side,
// with the incident, what moved off their piece and their share under the
// SLA cap, and never who the other provider is; figures worked out by hand:
//
// The buyer books 8 H100 for 4 h at 219¢ = 7,008¢ (credit cap 20 %, auto
// replacement, maximum premium 50¢ per reference device-hour) and saves a
// card. After 1 h the host fails; the provider reports it and an admin
// triggers the replacement. 3 of 4 hours remain: Remaining = 7,008 × 3 / 4
// = 5,256¢, Delivered = 1,752¢.
//
// Dearer: the other provider's offer at 349¢ costs 8 × 3 × 349 = 8,376¢,
// dearer by 3,120¢. The failing provider bears the least of that, the cap
// (20 % of 7,008 = 1,401.6, so 1,402¢) and the 1,752¢ delivered: 1,402¢;
// the piece settles for 1,752 − 1,402 = 350¢. The buyer pays 3,120 − 1,402
// = 1,718¢, within 50¢ × 8 × 3 h × 3.170 = 3,804¢. So 7,008 = 350 + 5,256 +
// 1,402 and 8,376 = 5,256 + 1,402 + 1,718.
//
// Cheaper: at 199¢ it costs 8 × 3 × 199 = 4,776¢; the piece settles for
// the 1,752¢ delivered and 5,256 − 4,776 = 480¢ is refunded to the buyer:
// 7,008 = 1,752 + 5,256 and 5,256 = 4,776 + 480.
//
// Each rental settles and reconciles.
func TestStatementsShowTheFailingProviderTheReplacement(t *testing.T) {
	for _, tc := range []struct {
		name    string
		price   market.Cents
		split   market.ReplacementSplit
		lines   map[string]string // data-testid → text; "" must be absent
		settles string
		also    string
	}{
		{name: "dearer", price: 349, split: market.ReplacementSplit{Remaining: 5256, Delivered: 1752, Cost: 8376, ProviderShare: 1402, BuyerShare: 1718},
			lines: map[string]string{
				"repl-paid": "$70.08", "repl-moved": "−$52.56", "repl-your-share": "−$14.02", "repl-settles": "$3.50",
				"repl-cost": "$83.76", "repl-from-moved": "$52.56", "repl-borne": "$14.02", "repl-buyer-share": "$17.18", "repl-refund": "",
				"provider-replacement-check": "$70.08 paid = $3.50 your piece settles for + $52.56 moved off it + $14.02 your share; the replacement's $83.76 = $52.56 + $14.02 + $17.18 from the buyer.",
			},
			settles: "$3.50", also: "the least of the extra $31.20, your SLA credit cap (20% of $70.08 = $14.02) and the $17.52 delivered"},
		{name: "cheaper", price: 199, split: market.ReplacementSplit{Remaining: 5256, Delivered: 1752, Cost: 4776, Refund: 480},
			lines: map[string]string{
				"repl-paid": "$70.08", "repl-moved": "−$52.56", "repl-your-share": "", "repl-settles": "$17.52",
				"repl-cost": "$47.76", "repl-from-moved": "$47.76", "repl-borne": "", "repl-buyer-share": "", "repl-refund": "$4.80",
				"provider-replacement-check": "$70.08 paid = $17.52 your piece settles for + $52.56 moved off it; the $52.56 moved = $47.76 for the replacement + $4.80 refunded to the buyer.",
			},
			settles: "$17.52", also: "The rest of that time, refunded to the buyer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := newBillingApp(t)
			prov := app.client()
			prov.signUp("stmt-repl-prov@example.com", true)
			o := app.ownOfferTerms(prov.userID(), func(o *market.Offer) { o.CreditCapBP = 2000 })
			buyer := app.client()
			buyer.signUp("stmt-repl-buyer@example.com", false)
			app.addCard(buyer, "4242 4242 4242 4242")
			q := trainingQuery()
			q.Set("workload.hours", "4")
			q.Set("replacement.policy", "auto")
			q.Set("replacement.max_premium", "0.50")
			r := app.bookAndPayQuery(buyer, q)
			p := r.Pieces[0]
			if p.OfferID != o.ID || p.AmountCents != 7008 || p.End.Sub(p.Start) != 4*time.Hour {
				t.Fatalf("booked %+v", p)
			}
			prov2 := app.client()
			prov2.signUp("stmt-repl-rival@example.com", true)
			o2 := app.ownOfferTerms(prov2.userID(), func(o *market.Offer) {
				o.PriceCentsPerDeviceHour, o.Title = tc.price, "Rival's H100 hall"
			})

			now := p.Start.Add(time.Hour)
			app.tick(now)
			bookingPath := fmt.Sprintf("/provider/bookings/%d", r.ID)
			form := url.Values{"piece": {strconv.FormatInt(p.ID, 10)}, "kind": {"host_failure"},
				"start": {p.Start.Add(50 * time.Minute).Format(formTimeLayout)}, "end": {now.Format(formTimeLayout)},
				"devices_affected": {"8"}, "note": {"power supply failed"}}
			if res := prov.post(bookingPath+"/incidents/new", bookingPath+"/incidents", form); res.status != http.StatusSeeOther {
				t.Fatalf("provider incident: %d\n%s", res.status, res.body)
			}
			ctx := context.Background()
			incs, err := app.db.ListIncidents(ctx, r.ID)
			if err != nil || len(incs) != 1 {
				t.Fatalf("incidents %+v %v", incs, err)
			}
			admin := app.adminClient("stmt-repl-ops@example.com")
			adminPath := fmt.Sprintf("/admin/reservations/%d", r.ID)
			if res := admin.post(adminPath, fmt.Sprintf("%s/incidents/%d/replace", adminPath, incs[0].ID), url.Values{"node": {"0"}}); res.status != http.StatusSeeOther {
				t.Fatalf("trigger: %d", res.status)
			}
			reps, err := app.db.ListReplacements(ctx, r.ID)
			if err != nil || len(reps) != 1 || reps[0].State != store.ReplacementBooked || reps[0].Split != tc.split {
				t.Fatalf("replacements %+v %v, want split %+v", reps, err, tc.split)
			}
			app.connectPayouts(prov)
			app.connectPayouts(prov2)
			app.tick(p.End.Add(time.Minute))
			app.tick(p.End.Add(2 * time.Hour))

			page := prov.get(bookingPath + "/statement")
			if page.status != http.StatusOK {
				t.Fatalf("statement: %d", page.status)
			}
			body := html.UnescapeString(page.body)
			if n := strings.Count(body, `data-testid="provider-replacement"`); n != 1 {
				t.Fatalf("%d replacement rows on the provider's statement\n%s", n, body)
			}
			text := func(id string) string { return html.UnescapeString(testidText(page.body, id)) }
			want := map[string]string{
				"provider-replacement-what": fmt.Sprintf("Host failure on node 1 of your offer #%d, measured %s.", o.ID, formatTime(now)),
				"provider-replacement-original": fmt.Sprintf("Your offer #%d, 8 device(s), booked %s; ran until %s", o.ID,
					market.FormatSpan(p.Start, p.End), formatTime(now)),
				"provider-replacement-new": fmt.Sprintf("Another provider's offer, 8 device(s), %s, %s", market.FormatSpan(now, p.End), tc.split.Cost),
			}
			for id, w := range tc.lines {
				want[id] = w
			}
			for id, w := range want {
				if got := text(id); got != w {
					t.Errorf("%s = %q, want %q", id, got, w)
				}
			}
			mustContain(t, body, tc.also)
			if got := text("provider-replacement-incident"); !strings.HasPrefix(got, fmt.Sprintf("Incident #%d: Host failure", incs[0].ID)) || !strings.Contains(got, "(10 min down)") {
				t.Errorf("incident %q", got)
			}
			// The piece's own section says it was paid what the table says it settles for.
			if n := strings.Count(body, `data-testid="statement-piece"`); n != 1 || !strings.Contains(body, "paid "+tc.settles) {
				t.Errorf("%d pieces on the provider's statement, or not paid %s", n, tc.settles)
			}
			// Nothing names the other provider or their offer.
			mustNotContain(t, body, "stmt-repl-rival", "Rival's H100 hall", fmt.Sprintf("offer #%d", o2.ID), fmt.Sprintf("Offer #%d", o2.ID))
			// The replacing provider's statement has no such panel; nor the buyer's.
			rival := prov2.get(bookingPath + "/statement")
			if rival.status != http.StatusOK {
				t.Fatalf("the replacing provider's statement: %d", rival.status)
			}
			if strings.Contains(rival.body, `data-testid="provider-replacements"`) {
				t.Error("the replacing provider's statement shows the failing provider's panel")
			}
			// It marks the replacement's piece with the incident's kind and when it began (the
			// provider's report: 50 minutes in), naming neither the failing provider nor their offer.
			wantMark := "A replacement for another provider's failed piece: host failure, began " + formatTime(p.Start.Add(50*time.Minute)) + "."
			if n := strings.Count(rival.body, `data-testid="statement-replacement-for"`); n != 1 {
				t.Errorf("%d replacement marks on the replacing provider's statement, want 1", n)
			}
			if got := html.UnescapeString(testidText(rival.body, "statement-replacement-for")); got != wantMark {
				t.Errorf("the replacing provider's mark = %q, want %q", got, wantMark)
			}
			mustNotContain(t, html.UnescapeString(rival.body), "stmt-repl-prov", fmt.Sprintf("offer #%d", o.ID), fmt.Sprintf("Offer #%d", o.ID))
			// The failing provider's own piece and the buyer's statement carry no such mark.
			mustNotContain(t, body, `data-testid="statement-replacement-for"`)
			mustNotContain(t, buyer.get(fmt.Sprintf("/reservations/%d/statement", r.ID)).body, `data-testid="provider-replacements"`, `data-testid="statement-replacement-for"`)
			requireReconciled(t, app.testApp)
		})
	}
}
