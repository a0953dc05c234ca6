package web

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

var (
	calendarDayRe = regexp.MustCompile(`data-testid="calendar-day" data-date="([0-9-]+)" data-free="([^"]*)"`)
	quoteOfferRe  = regexp.MustCompile(`href="([^"]+)" data-testid="quote-offer"`)
)

// calendarFree is the free devices the calendar shows per day.
func calendarFree(t *testing.T, body string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range calendarDayRe.FindAllStringSubmatch(body, -1) {
		out[m[1]] = m[2]
	}
	if len(out) != calendarDays {
		t.Fatalf("calendar has %d days, want %d", len(out), calendarDays)
	}
	return out
}

// TestOfferPageCalendarAndQuoteThisOffer: the offer page draws the free
// devices per day on the server, node by node; "Quote this offer" is for a
// signed-in buyer and quotes that offer only, even beside cheaper ones;
// booking from it changes the calendar and the free-now line.
func TestOfferPageCalendarAndQuoteThisOffer(t *testing.T) {
	app := newTestApp(t)
	o := app.listedOffer("nvidia-h100-80gb-sxm", 4, 2, "us-east-va", 219) // two nodes of 4
	cheaper := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 150)
	path := "/offers/" + itoa(o.ID)

	visitor := app.client().get(path)
	if visitor.status != http.StatusOK {
		t.Fatalf("offer page: %d", visitor.status)
	}
	free := calendarFree(t, visitor.body)
	if free["2026-12-01"] != "8" || free["2026-12-28"] != "8" {
		t.Fatalf("calendar before any booking: %v", free)
	}
	mustContain(t, visitor.body, `data-testid="availability-calendar"`, "<caption>Devices free all day (UTC), of 8, over the next 28 days</caption>",
		`<abbr title="Monday">Mon</abbr>`, "Tuesday 1 December: all 8 devices free", "All 8 devices free now",
		`href="/login?next=%2Foffers%2F`+itoa(o.ID)+`" data-testid="quote-offer-login"`)
	mustNotContain(t, visitor.body, `data-testid="quote-offer"`)

	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	page := buyer.get(path).body
	m := quoteOfferRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatal(`no "Quote this offer" for a signed-in buyer`)
	}
	quoteURL := html.UnescapeString(m[1])
	if !strings.Contains(quoteURL, "constraints.offers="+itoa(o.ID)) {
		t.Fatalf("quote link %q is not pinned to the offer", quoteURL)
	}
	quotes := buyer.get(quoteURL)
	if quotes.status != http.StatusOK {
		t.Fatalf("pinned quotes: %d\n%s", quotes.status, quotes.body)
	}
	mustContain(t, quotes.body, `data-testid="pinned-offers"`, `data-testid="pinned-offer" data-offer-id="`+itoa(o.ID)+`">`+html.EscapeString(o.Title)+"<",
		`name="constraints.offers" value="`+itoa(o.ID)+`"`, `data-testid="unpin-offers"`)
	if n := strings.Count(quotes.body, `data-testid="quote"`); n != 1 {
		t.Fatalf("%d quotes from the pinned offer, want 1", n)
	}
	mustNotContain(t, quotes.body, "/offers/"+itoa(cheaper.ID)+`"`)
	// 4 devices (a node) × 24 hours × $2.19 = $210.24, as soon as possible.
	mustContain(t, quotes.body, "$210.24", "As soon as possible")

	// Unpinned, the same request quotes the cheaper offer too.
	unpin := regexp.MustCompile(`href="([^"]+)" data-testid="unpin-offers"`).FindStringSubmatch(quotes.body)
	if unpin == nil || strings.Contains(unpin[1], "constraints.offers") {
		t.Fatalf("unpin link %v", unpin)
	}
	mustContain(t, buyer.get(html.UnescapeString(unpin[1])).body, "/offers/"+itoa(cheaper.ID))

	reqJSON, quoteID := firstQuote(t, quotes.body)
	if !strings.Contains(reqJSON, `"offers": [`) {
		t.Fatalf("the quote's request does not keep the pin: %s", reqJSON)
	}
	r := buyer.post(quoteURL, "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}

	// Booked 4 devices on one node from now (1 Dec 09:00) for 24 hours:
	// 4 free on the 1st and 2nd, all 8 from the 3rd.
	after := buyer.get(path).body
	free = calendarFree(t, after)
	if free["2026-12-01"] != "4" || free["2026-12-02"] != "4" || free["2026-12-03"] != "8" {
		t.Fatalf("calendar after booking: 1st %s, 2nd %s, 3rd %s", free["2026-12-01"], free["2026-12-02"], free["2026-12-03"])
	}
	mustContain(t, after, "4 of 8 devices free now", "Wednesday 2 December: 4 of 8 devices free all day")

	bad := buyer.get("/requests?workload.kind=batch&workload.devices=1&workload.hours=1&constraints.offers=abc")
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.body, `data-testid="error-constraints.offers"`) {
		t.Fatalf("a malformed pin: %d", bad.status)
	}
}

// TestCatalogueShowsFreeAndFilters: cards say what is free now, or from
// when, read from the current commitments; "available from … for … hours"
// keeps the offers free then, node by node, as the form or a query.
func TestCatalogueShowsFreeAndFilters(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	busy := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	idle := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-or", 259)
	buyer, err := app.db.CreateUser(ctx, market.User{Email: "b@example.com", DisplayName: "B", IsBuyer: true}, []byte("x"), testNow)
	if err != nil {
		t.Fatal(err)
	}

	cardFree := func(body string, id int64) string {
		t.Helper()
		i := strings.Index(body, `data-offer-id="`+itoa(id)+`"`)
		if i < 0 {
			t.Fatalf("no card for offer %d", id)
		}
		card := body[i:]
		card = card[:strings.Index(card, "</article>")]
		m := regexp.MustCompile(`data-testid="card-free">\s*([^<]*?)\s*<`).FindStringSubmatch(card)
		if m == nil {
			t.Fatalf("card %d has no free line", id)
		}
		return m[1]
	}
	page := app.client().get("/").body
	if got := cardFree(page, busy.ID); got != "All 8 devices free now" {
		t.Fatalf("before booking: %q", got)
	}

	// 6 devices from now (09:00) for 9 hours, then the other 2 for 3 hours.
	_, err = app.handler.wf.Book(ctx, buyer.ID, []market.ReservationPiece{{OfferID: busy.ID, Devices: 6,
		Start: testNow, End: testNow.Add(9 * time.Hour), PriceCents: 219, AmountCents: 6 * 9 * 219}}, `{"version":1}`, holdDuration)
	if err != nil {
		t.Fatal(err)
	}
	page = app.client().get("/").body
	if got := cardFree(page, busy.ID); got != "2 of 8 devices free now" {
		t.Fatalf("after booking 6: %q", got)
	}
	_, err = app.handler.wf.Book(ctx, buyer.ID, []market.ReservationPiece{{OfferID: busy.ID, Devices: 2,
		Start: testNow, End: testNow.Add(3 * time.Hour), PriceCents: 219, AmountCents: 2 * 3 * 219}}, `{"version":1}`, holdDuration)
	if err != nil {
		t.Fatal(err)
	}
	page = app.client().get("/").body
	// Free for its one-hour minimum rental: at 12:00, when the 2 are released.
	if got := cardFree(page, busy.ID); got != "Fully booked now · free from 1 Dec 2026 12:00 UTC" {
		t.Fatalf("fully booked: %q", got)
	}
	if got := cardFree(page, idle.ID); got != "All 8 devices free now" {
		t.Fatalf("the other offer: %q", got)
	}

	ids := func(body string) []string {
		var out []string
		for _, m := range regexp.MustCompile(`data-testid="offer-card" data-offer-id="(\d+)"`).FindAllStringSubmatch(body, -1) {
			out = append(out, m[1])
		}
		return out
	}
	// 13:00 for 4 hours meets the 6 devices (to 18:00): with 4 devices asked, only the idle offer.
	form := url.Values{"free_from": {"2026-12-01T13:00"}, "free_hours": {"4"}, "min_devices": {"4"}}
	r := app.client().get("/?" + form.Encode())
	if r.status != http.StatusOK || fmt.Sprint(ids(r.body)) != fmt.Sprint([]string{itoa(idle.ID)}) {
		t.Fatalf("free 13:00 for 4 h, 4 devices: %d %v", r.status, ids(r.body))
	}
	mustContain(t, r.body, "8 of 8 devices free from 1 Dec 2026 13:00 UTC for 4 hours", `data-testid="results-count">1 offer<`,
		html.EscapeString(`available="2026-12-01T13:00"`))
	// Two devices are free then on the busy offer: asked for any, both show.
	form.Del("min_devices")
	r = app.client().get("/?" + form.Encode())
	if got := ids(r.body); len(got) != 2 {
		t.Fatalf("free 13:00 for 4 h, any devices: %v", got)
	}
	mustContain(t, r.body, "2 of 8 devices free from 1 Dec 2026 13:00 UTC for 4 hours")
	// The same as a query, and after the bookings.
	q := app.client().get("/?" + url.Values{"q": {`devices>=4 available="2026-12-01 13:00" for=4h`}}.Encode())
	if fmt.Sprint(ids(q.body)) != fmt.Sprint([]string{itoa(idle.ID)}) {
		t.Fatalf("the query: %v", ids(q.body))
	}
	q = app.client().get("/?" + url.Values{"q": {`devices>=8 available="2026-12-01 18:00" for=4h`}}.Encode())
	if len(ids(q.body)) != 2 {
		t.Fatalf("after the bookings: %v", ids(q.body))
	}
	bad := app.client().get("/?free_hours=1.5")
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.body, "whole number of hours") {
		t.Fatalf("1.5 hours: %d", bad.status)
	}
}
