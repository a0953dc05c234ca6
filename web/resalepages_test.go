package web

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestResaleReadsRight (issue 31 item 4): a reservation sold whole before
// its start. The buyer of the time sees what they paid (list and page)
// and the resale's own terms, not the original's cancellation and
// rejection terms; the provider's Bookings mark the two bookings and link
// them; the seller is not offered the incident form for hours they sold.
// The provider reports a degradation in the resold hours; after
// settlement the buyer's statement answers (not 404) with the SLA credit,
// and the seller's says what came back to them in all — the sale's
// credit, since the settlement's refund went to the buyer of the hours.
func TestResaleReadsRight(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOffer(prov.userID())
	seller := app.client()
	seller.signUp("seller@example.com", false)
	r := app.bookAndPay(seller)
	path := fmt.Sprintf("/reservations/%d", r.ID)
	price := r.AmountCents - 1001
	done := seller.post(path+"/resale", path+"/resale", url.Values{"from": {r.Start().Format(time.RFC3339)}, "price": {price.Decimal()}})
	if done.status != http.StatusSeeOther {
		t.Fatalf("list: %d\n%s", done.status, done.body)
	}
	other := app.client()
	other.signUp("other@example.com", false)
	app.saveTestCard(other.userID(), "4242 4242 4242 4242")
	bought := other.post(done.location, done.location+"/buy", url.Values{})
	if bought.status != http.StatusSeeOther {
		t.Fatalf("buy: %d\n%s", bought.status, bought.body)
	}
	mine := bought.location
	boughtID := strings.TrimPrefix(mine, "/reservations/")

	list := other.get("/reservations").body
	if got := svFigure(list, "reservation-amount"); got != price.String() {
		t.Errorf("the buyer's list shows amount %q, want the resale price %s", got, price)
	}
	page := other.get(mine).body
	mustContain(t, page, "in the "+price.String()+" resale price", "Bought on resale: cannot be cancelled or rejected.")
	mustNotContain(t, page, `data-testid="piece-amount">$0.00<`, `data-testid="piece-acceptance"`, "Free cancellation")

	bookings := prov.get("/provider/reservations").body
	marks := regexp.MustCompile(`data-testid="booking-resale">.*?</div>`).FindAllString(bookings, -1)
	if len(marks) != 2 || !strings.Contains(strings.Join(marks, " "), `href="/provider/bookings/`+boughtID+`"`) ||
		!strings.Contains(strings.Join(marks, " "), fmt.Sprintf(`href="/provider/bookings/%d"`, r.ID)) {
		t.Errorf("the provider's bookings mark and link the resale: %q", marks)
	}

	// The seller sold all of it: no incident form, and reporting is refused.
	app.tick(r.Start().Add(time.Hour))
	mustNotContain(t, seller.get(path).body, path+"/incidents/new")
	if got := seller.get(path + "/incidents/new"); got.status != http.StatusConflict || !strings.Contains(got.body, "reported by its buyer") {
		t.Errorf("the seller's incident form for sold hours: %d", got.status)
	}

	// The provider reports 2 devices degraded 50% for 6 hours in the resold hours.
	p := r.Pieces[0]
	booking := "/provider/bookings/" + boughtID
	bp, err := app.db.FindReservation(ctx, mustID(t, boughtID))
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"piece": {strconv.FormatInt(bp.Pieces[0].ID, 10)}, "kind": {"network_degradation"}, "degradation": {"50"},
		"start": {p.Start.Add(2 * time.Hour).Format(formTimeLayout)}, "end": {p.Start.Add(8 * time.Hour).Format(formTimeLayout)},
		"devices_affected": {"2"}, "note": {"Uplink flapping."}}
	if res := prov.post(booking+"/incidents/new", booking+"/incidents", form); res.status != http.StatusSeeOther {
		t.Fatalf("provider incident: %d\n%s", res.status, res.body)
	}
	reserved := int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	sla := svHalfAway(r.AmountCents, 2*6*3600*5000, reserved*10000)
	fee := (price*1000 + 5000) / 10000 // 10%, to the nearest cent
	app.tick(r.End().Add(time.Minute))
	app.tick(r.End().Add(2 * time.Minute))

	st := other.get(mine + "/statement")
	if st.status != http.StatusOK {
		t.Fatalf("the resale buyer's statement after settlement: %d", st.status)
	}
	if got := svFigure(st.body, "statement-paid"); got != price.String() {
		t.Errorf("the buyer's statement: paid %q, want %s", got, price)
	}
	if got := svFigure(st.body, "statement-refund"); got != sla.String() {
		t.Errorf("the buyer's statement: refund %q, want the SLA credit %s", got, sla)
	}
	sst := seller.get(path + "/statement").body
	for id, want := range map[string]market.Cents{"statement-refund": 0, "statement-resale-credit": price - fee, "statement-back-in-all": price - fee} {
		if got := svFigure(sst, id); got != want.String() {
			t.Errorf("the seller's statement: %s = %q, want %s", id, got, want)
		}
	}
	if got := svFigure(sst, "statement-resale-sla"); got != "−"+sla.String() {
		t.Errorf("the seller's statement: the resold hours' credit %q, want −%s", got, sla)
	}
	mustContain(t, sst, "came back to you in all")
	mustNotContain(t, sst, "Refund to you<")
	requireReconciled(t, app.testApp)
}

func mustID(t *testing.T, s string) int64 {
	t.Helper()
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
