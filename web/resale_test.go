package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestResaleThroughThePages: the holder of a paid reservation lists its
// time (422 with the message by the field over the cap; nobody else can
// list it or withdraw the listing; no CSRF token, no listing); another
// buyer finds it, cannot buy without a saved card, buys with one, and
// both see the sale on their reservation pages.
func TestResaleThroughThePages(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	seller := app.client()
	seller.signUp("seller@example.com", false)
	r := app.bookAndPay(seller) // from 1 Dec 10:00, an hour ahead
	path := fmt.Sprintf("/reservations/%d", r.ID)
	mustContain(t, seller.get(path).body, `data-testid="resale-sell"`, path+"/resale")

	other := app.client()
	other.signUp("other@example.com", false)
	if got := other.get(path + "/resale"); got.status != http.StatusNotFound {
		t.Fatalf("another user's sell form: %d, want 404", got.status)
	}
	from := r.Start().Format(time.RFC3339)
	if got := other.post("/resale", path+"/resale", url.Values{"from": {from}, "price": {"10.00"}}); got.status != http.StatusNotFound {
		t.Fatalf("another user listing it: %d, want 404", got.status)
	}

	form := seller.get(path + "/resale")
	if form.status != http.StatusOK {
		t.Fatalf("sell form: %d", form.status)
	}
	mustContain(t, form.body, "At most what you paid for the time sold: "+r.AmountCents.String(), "The platform keeps 10%", "at most what you paid for that time")
	over := (r.AmountCents + 1).Decimal()
	bad := seller.post(path+"/resale", path+"/resale", url.Values{"from": {from}, "price": {over}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("price over the cap: %d, want 422", bad.status)
	}
	mustContain(t, bad.body, "Ask at most "+r.AmountCents.String(), `id="e-price"`, `value="`+over+`"`)
	if got := seller.post(path+"/resale", path+"/resale", url.Values{"from": {from}, "price": {"ten"}}); got.status != http.StatusUnprocessableEntity ||
		!strings.Contains(got.body, "Enter the price in dollars") {
		t.Fatalf("malformed price: %d", got.status)
	}
	seller.get(path + "/resale")
	if got := seller.postRaw(path+"/resale", url.Values{"from": {from}, "price": {"10.00"}}); got.status != http.StatusForbidden {
		t.Fatalf("no CSRF token: %d, want 403", got.status)
	}

	price := r.AmountCents - 1001
	done := seller.post(path+"/resale", path+"/resale", url.Values{"from": {from}, "price": {price.Decimal()}})
	if done.status != http.StatusSeeOther || !strings.HasPrefix(done.location, "/resale/") {
		t.Fatalf("list: %d → %q\n%s", done.status, done.location, done.body)
	}
	listing := done.location
	lid, _ := strconv.ParseInt(strings.TrimPrefix(listing, "/resale/"), 10, 64)
	if got := other.post("/resale", listing+"/withdraw", url.Values{}); got.status != http.StatusNotFound {
		t.Fatalf("another user withdrawing: %d, want 404", got.status)
	}

	// The listing is a "resale" source for a request it answers whole, in
	// the catalogue, and not for a request in another family.
	quotes := other.get("/requests?" + trainingQuery().Encode())
	mustContain(t, quotes.body, `data-testid="resale-sources"`, listing)
	q := trainingQuery()
	q.Set("constraints.families", "A100")
	if got := other.get("/requests?" + q.Encode()).body; strings.Contains(got, `data-testid="resale-sources"`) {
		t.Fatal("an H100 listing offered for an A100 request")
	}
	q = trainingQuery()
	q.Set("workload.devices", "4")
	if got := other.get("/requests?" + q.Encode()).body; strings.Contains(got, `data-testid="resale-sources"`) {
		t.Fatal("an 8-device listing offered for 4 devices")
	}
	mustContain(t, app.client().get("/").body, `data-testid="catalogue-resale"`, listing)

	list := app.client().get("/resale")
	mustContain(t, list.body, `data-testid="resale-card"`, `data-testid="resale-badge"`, price.String(), listing)
	show := other.get(listing)
	mustContain(t, show.body, `data-testid="resale-no-card"`, "Add a payment method", "99.5% uptime guaranteed")
	noCard := other.post(listing, listing+"/buy", url.Values{})
	if noCard.status != http.StatusUnprocessableEntity || !strings.Contains(noCard.body, "payment method") {
		t.Fatalf("buying without a saved card: %d\n%s", noCard.status, noCard.body)
	}

	app.saveTestCard(other.userID(), "4242 4242 4242 4242")
	mustContain(t, other.get(listing).body, `data-testid="resale-buy-button"`, "Visa")
	if got := other.postRaw(listing+"/buy", url.Values{}); got.status != http.StatusForbidden {
		t.Fatalf("buying without a CSRF token: %d, want 403", got.status)
	}
	bought := other.post(listing, listing+"/buy", url.Values{})
	if bought.status != http.StatusSeeOther || !strings.HasPrefix(bought.location, "/reservations/") {
		t.Fatalf("buy: %d → %q\n%s", bought.status, bought.location, bought.body)
	}
	mine := other.get(bought.location)
	mustContain(t, mine.body, `data-testid="resale-bought"`, "You bought this time on resale for "+price.String())
	sellerPage := seller.get(path).body
	fee := (price*1000 + 5000) / 10000 // 10%, to the nearest cent
	mustContain(t, sellerPage, `data-testid="resale-resold"`, "sold", "platform fee "+fee.String(), (price-fee).String()+" refunded to your card")
	if got := app.client().get("/resale").body; strings.Contains(got, listing) {
		t.Fatal("a sold listing is still offered")
	}
	if got := seller.get(path).body; strings.Contains(got, `data-testid="resale-sell"`) {
		t.Fatal("resold time offered for sale again")
	}
	n, err := app.db.ListReservationResales(ctx, r.ID)
	if err != nil || len(n) != 1 || n[0].ID != lid || n[0].State != market.ListingSold || !n[0].CreditDone {
		t.Fatalf("listings = %+v, %v", n, err)
	}
}
