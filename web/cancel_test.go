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
	"github.com/gpumarket/gpumarket/store"
)

// The cancellation terms of the offer in these tests: free until 48 hours
// before the start, then a third of the amount (33.33%).
const (
	cancelFreeHours = 48
	cancelFeeBP     = 3333
)

// testidValue is the text of the element with the data-testid, when it has
// no markup inside.
func testidValue(t *testing.T, body, id string) string {
	t.Helper()
	m := regexp.MustCompile(`data-testid="` + regexp.QuoteMeta(id) + `"[^>]*>([^<]*)<`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %q on the page", id)
	}
	return strings.TrimSpace(m[1])
}

// cancelApp lists the provider's offer (8 H100s at $2.19) with the
// cancellation terms above and returns a signed-up buyer.
func cancelApp(t *testing.T) (*billingApp, *client) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("host@example.com", true)
	app.ownOfferTerms(prov.userID(), func(o *market.Offer) { o.FreeCancelHours, o.CancelFeeBP = cancelFreeHours, cancelFeeBP })
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)
	return app, buyer
}

// TestCancellationScheduleOnQuoteAndHold: the quote, the held page and the
// paid page state this booking's schedule in money and dates; a held page
// never says cancelling is free without saying what applies once paid.
func TestCancellationScheduleOnQuoteAndHold(t *testing.T) {
	app, buyer := cancelApp(t)
	amount := market.Cents(8 * 24 * 219)
	fee := shareHalfAway(amount, cancelFeeBP) // $420.48 × 33.33% = $140.145 → $140.15
	if fee != 14015 {
		t.Fatalf("the test's arithmetic: fee %s", fee)
	}
	money := func(c market.Cents) string { return fmt.Sprintf("$%d.%02d", c/100, c%100) }

	// Starting in three days: free until two days before, then the fee.
	q := trainingQuery()
	q.Set("constraints.earliest_start", "2026-12-04T10:00")
	q.Set("constraints.deadline", "2026-12-10T10:00")
	free := "Free to cancel until 2 Dec 2026 10:00 UTC, then " + money(fee) + "."
	page := buyer.get("/requests?" + q.Encode()).body
	if got := testidValue(t, page, "quote-cancellation"); got != free+" Until you pay, cancelling is free." {
		t.Fatalf("the quote says %q", got)
	}
	reqJSON, quoteID := firstQuote(t, page)
	r := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d", r.status)
	}
	held := buyer.get(r.location).body
	if got := testidValue(t, held, "cancel-summary"); got != free+" Until you pay, cancelling is free." {
		t.Fatalf("the held page says %q", got)
	}
	mustContain(t, held, "Once paid, cancelling costs:",
		"<td>Until 2 Dec 2026 10:00 UTC</td><td class=\"num\">Free</td><td class=\"num\">"+money(amount)+"</td>",
		"<td>After 2 Dec 2026 10:00 UTC, until the start</td><td class=\"num\">"+money(fee)+"</td><td class=\"num\">"+money(amount-fee)+"</td>",
		"From the start (4 Dec 2026 10:00 UTC) it can no longer be cancelled.")
	mustNotContain(t, held, "Cancelling now is free")

	// The case: it starts in an hour, inside the 48 free hours, so
	// the fee is due from the moment it is paid — and every page says so.
	q.Set("constraints.earliest_start", "2026-12-01T10:00")
	page = buyer.get("/requests?" + q.Encode()).body
	soon := "Free to cancel until you pay; once paid, cancelling costs " + money(fee) + " of " + money(amount) + "."
	if got := testidValue(t, page, "quote-cancellation"); got != soon {
		t.Fatalf("the quote inside the fee period says %q", got)
	}
	r2 := app.bookAndPayQuery(buyer, q)
	paid := buyer.get(fmt.Sprintf("/reservations/%d", r2.ID)).body
	if got := testidValue(t, paid, "cancel-summary"); got != "Cancelling costs "+money(fee)+" of "+money(amount)+"." {
		t.Fatalf("the paid page says %q", got)
	}
}

// TestCancelAsksFirst: cancelling is a confirmation page (no JavaScript)
// stating the fee and refund, then a POST; a fee that rose while the page
// was open is shown again instead of charged; the money moves as stated.
func TestCancelAsksFirst(t *testing.T) {
	app, buyer := cancelApp(t)
	ctx := context.Background()
	q := trainingQuery()
	q.Set("constraints.earliest_start", "2026-12-04T10:00")
	q.Set("constraints.deadline", "2026-12-10T10:00")
	r := app.bookAndPayQuery(buyer, q)
	amount := market.Cents(8 * 24 * 219)
	fee := shareHalfAway(amount, cancelFeeBP)
	resPath := "/reservations/" + strconv.FormatInt(r.ID, 10)

	// The reservation page links to the confirmation; the confirmation is free now.
	mustContain(t, buyer.get(resPath).body, `href="`+resPath+`/cancel" data-testid="cancel-reservation"`)
	confirm := buyer.get(resPath + "/cancel")
	if confirm.status != http.StatusOK {
		t.Fatalf("confirmation page: %d", confirm.status)
	}
	if testidValue(t, confirm.body, "cancel-paid") != amount.String() || testidValue(t, confirm.body, "cancel-fee") != "$0.00" ||
		testidValue(t, confirm.body, "cancel-refund") != amount.String() {
		t.Fatalf("free confirmation: paid %q fee %q refund %q", testidValue(t, confirm.body, "cancel-paid"),
			testidValue(t, confirm.body, "cancel-fee"), testidValue(t, confirm.body, "cancel-refund"))
	}
	mustContain(t, confirm.body, `name="fee" value="0"`)

	// The free period ends while the page is open: the POST shows the new fee and cancels nothing.
	app.clock.set(time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC))
	res := buyer.post(resPath+"/cancel", resPath+"/cancel", url.Values{"fee": {"0"}})
	if res.status != http.StatusConflict {
		t.Fatalf("cancel at a stale fee: %d", res.status)
	}
	mustContain(t, res.body, "The fee is now "+fee.String(), `name="fee" value="`+strconv.FormatInt(int64(fee), 10)+`"`, "Cancel and pay the "+fee.String()+" fee")
	if got, err := app.db.FindReservation(ctx, r.ID); err != nil || got.State != market.ReservationConfirmed {
		t.Fatalf("after the refused cancel: %v %s", err, got.State)
	}
	if testidValue(t, res.body, "cancel-fee") != fee.String() || testidValue(t, res.body, "cancel-refund") != (amount-fee).String() {
		t.Fatalf("the confirmation after the deadline: fee %q refund %q", testidValue(t, res.body, "cancel-fee"), testidValue(t, res.body, "cancel-refund"))
	}

	// Confirmed at that fee: cancelled, told the fee and the refund, refunded exactly.
	res = buyer.post(resPath+"/cancel", resPath+"/cancel", url.Values{"fee": {strconv.FormatInt(int64(fee), 10)}})
	if res.status != http.StatusSeeOther || res.location != resPath {
		t.Fatalf("cancel: %d → %q", res.status, res.location)
	}
	mustContain(t, buyer.get(resPath).body, "A "+fee.String()+" cancellation fee applies", "; "+(amount-fee).String()+" is refunded to you.")
	s, err := app.db.FindSettlement(ctx, r.ID)
	if err != nil || s.State != store.SettlementDone || s.RefundCents != amount-fee {
		t.Fatalf("settlement %v %+v, want a refund of %s", err, s, amount-fee)
	}
	// A cancelled reservation has no confirmation page.
	if res := buyer.get(resPath + "/cancel"); res.status != http.StatusConflict {
		t.Fatalf("confirmation of a cancelled reservation: %d", res.status)
	}
	requireReconciled(t, app.testApp)

	// An unpaid hold: nothing to pay, nothing refunded.
	reqJSON, quoteID := firstQuote(t, buyer.get("/requests?"+q.Encode()).body)
	held := buyer.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {quoteID}})
	if held.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d", held.status)
	}
	confirm = buyer.get(held.location + "/cancel")
	mustContain(t, confirm.body, `data-testid="cancel-free"`, "Nothing has been paid, so cancelling is free")
	mustNotContain(t, confirm.body, `data-testid="cancel-fee"`)
	if res := buyer.post(held.location+"/cancel", held.location+"/cancel", url.Values{"fee": {"0"}}); res.status != http.StatusSeeOther {
		t.Fatalf("cancel the hold: %d", res.status)
	}
	mustContain(t, buyer.get(held.location).body, "Reservation cancelled; the capacity is released.")
}
