package web

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// A buyer who bought three reservations' time on resale, and booked one of
// their own: /reservations (the listings read in one query,
// store.ListResalesSoldInto) shows each bought row with its own listing's
// price as the amount and a "bought on resale" mark linking that listing,
// and no mark on the buyer's own booking; each bought reservation's own
// page carries the same mark with the listing's price and start. The
// seller's list and page have no such mark. The provider's page of each
// booking marks it resold and links the other booking. Prices are set here, one per
// listing, so a row showing another's would fail.
func TestBoughtOnResaleMarks(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	seller := app.client()
	seller.signUp("seller@example.com", false)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	app.saveTestCard(buyer.userID(), "4242 4242 4242 4242")

	type sold struct {
		orig    market.Reservation
		listing string // /resale/N
		price   market.Cents
		mine    string // the buyer's /reservations/M
	}
	var sales []sold
	for i := 1; i <= 3; i++ {
		r := app.bookAndPay(seller)
		path := fmt.Sprintf("/reservations/%d", r.ID)
		price := r.AmountCents - market.Cents(1001*i)
		done := seller.post(path+"/resale", path+"/resale", url.Values{"from": {r.Start().Format(time.RFC3339)}, "price": {price.Decimal()}})
		if done.status != http.StatusSeeOther || !strings.HasPrefix(done.location, "/resale/") {
			t.Fatalf("list %d: %d → %q\n%s", i, done.status, done.location, done.body)
		}
		bought := buyer.post(done.location, done.location+"/buy", url.Values{})
		if bought.status != http.StatusSeeOther || !strings.HasPrefix(bought.location, "/reservations/") {
			t.Fatalf("buy %d: %d → %q\n%s", i, bought.status, bought.location, bought.body)
		}
		sales = append(sales, sold{orig: r, listing: done.location, price: price, mine: bought.location})
	}
	own := app.bookAndPay(buyer)

	rows := regexp.MustCompile(`(?s)<tr data-testid="reservation-row">.*?</tr>`).FindAllString(buyer.get("/reservations").body, -1)
	if len(rows) != 4 {
		t.Fatalf("the buyer's list has %d rows, want 4", len(rows))
	}
	byPath := map[string]string{}
	for _, row := range rows {
		m := regexp.MustCompile(`href="(/reservations/\d+)"`).FindStringSubmatch(row)
		if m == nil {
			t.Fatalf("a row without its link: %s", row)
		}
		byPath[m[1]] = row
	}
	for _, s := range sales {
		row, ok := byPath[s.mine]
		if !ok {
			t.Fatalf("%s is not listed", s.mine)
		}
		if got := svFigure(row, "reservation-amount"); got != s.price.String() {
			t.Errorf("%s: amount %q, want its listing's price %s", s.mine, got, s.price)
		}
		mark := textOf(row, "reservation-resale", "div")
		if want := "bought on resale " + s.price.String() + ", listing #" + strings.TrimPrefix(s.listing, "/resale/"); mark != want {
			t.Errorf("%s: mark %q, want %q", s.mine, mark, want)
		}
		mustContain(t, row, `href="`+s.listing+`"`)

		page := buyer.get(s.mine).body
		if got := textOf(page, "reservation-resale-price", "strong"); got != s.price.String() {
			t.Errorf("%s page: resale price %q, want %s", s.mine, got, s.price)
		}
		if got, want := textOf(page, "reservation-resale", "p"), "bought on resale listing #"+strings.TrimPrefix(s.listing, "/resale/")+", price "+s.price.String(); !strings.HasPrefix(got, want) ||
			!strings.Contains(got, "(the time from "+formatTime(s.orig.Start())+")") {
			t.Errorf("%s page: mark %q, want it to start %q and name the time from %s", s.mine, got, want, formatTime(s.orig.Start()))
		}
		mustContain(t, page, `href="`+s.listing+`"`)
		if got := svFigure(page, "reservation-amount"); got != s.price.String() {
			t.Errorf("%s page: amount %q, want %s", s.mine, got, s.price)
		}
	}
	ownPath := fmt.Sprintf("/reservations/%d", own.ID)
	if row := byPath[ownPath]; row == "" || strings.Contains(row, "reservation-resale") || svFigure(row, "reservation-amount") != own.AmountCents.String() {
		t.Errorf("the buyer's own booking: %q", row)
	}
	mustNotContain(t, buyer.get(ownPath).body, `data-testid="reservation-resale"`)

	// The provider's page of each booking links the other, as their
	// Bookings list does; the buyer's own booking has no mark.
	for _, s := range sales {
		mine := strings.TrimPrefix(s.mine, "/reservations/")
		orig := fmt.Sprint(s.orig.ID)
		bought := prov.get("/provider/bookings/" + mine).body
		if got, want := textOf(bought, "booking-resale", "p"), "resold bought on resale from #"+orig; got != want {
			t.Errorf("the provider's booking %s: mark %q, want %q", mine, got, want)
		}
		mustContain(t, bought, `data-label="Amount">paid in #`+orig+`<`)
		page := prov.get("/provider/bookings/" + orig).body
		if got, want := textOf(page, "booking-resale", "p"), "resold from "+formatTime(s.orig.Start())+" to #"+mine; got != want {
			t.Errorf("the provider's booking %s: mark %q, want %q", orig, got, want)
		}
		mustContain(t, page, `href="/provider/bookings/`+mine+`"`)
	}
	mustNotContain(t, prov.get(fmt.Sprintf("/provider/bookings/%d", own.ID)).body, `data-testid="booking-resale"`)

	mustNotContain(t, seller.get("/reservations").body, `data-testid="reservation-resale"`)
	mustNotContain(t, seller.get(fmt.Sprintf("/reservations/%d", sales[0].orig.ID)).body, `data-testid="reservation-resale"`)
	requireReconciled(t, app.testApp)
}

// textOf is the text of the first element tag with the test id, tags
// removed and spaces joined.
func textOf(page, testID, tag string) string {
	m := regexp.MustCompile(`(?s)data-testid="` + regexp.QuoteMeta(testID) + `"[^>]*>(.*?)</` + tag + `>`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return strings.Join(strings.Fields(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(m[1], "")), " ")
}
