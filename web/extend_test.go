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

// TestExtendRunningReservation: a running reservation offers an extension
// as long as its nodes are free after it; the confirmation page prices it
// as a new booking; booking it holds a new reservation to pay, once;
// a changed price is shown again, not charged.
func TestExtendRunningReservation(t *testing.T) {
	app := newBillingApp(t)
	ctx := context.Background()
	prov := app.client()
	prov.signUp("host@example.com", true)
	o := app.ownOffer(prov.userID())
	app.connectPayouts(prov)
	buyer := app.client()
	buyer.signUp("buyer@example.com", false)

	r := app.bookAndPay(buyer) // 8 devices, 1 Dec 10:00 to 2 Dec 10:00, at $2.19
	path := fmt.Sprintf("/reservations/%d", r.ID)
	confirmed := buyer.get(path + "/extend?hours=2")
	if confirmed.status != http.StatusConflict || !strings.Contains(confirmed.body, "Only a running reservation can be extended") {
		t.Fatalf("extending a confirmed reservation: %d", confirmed.status)
	}

	app.tick(testNow.Add(2 * time.Hour))
	// Someone else holds the offer's devices from 6 hours after the end.
	other, err := app.db.CreateUser(ctx, market.User{Email: "o@example.com", DisplayName: "O", IsBuyer: true}, []byte("x"), testNow)
	if err != nil {
		t.Fatal(err)
	}
	later := r.End().Add(6 * time.Hour)
	if _, err := app.handler.wf.Book(ctx, other.ID, []market.ReservationPiece{{OfferID: o.ID, Devices: 1,
		Start: later, End: later.Add(2 * time.Hour), PriceCents: 219, AmountCents: 2 * 219}}, `{"version":1}`, holdDuration); err != nil {
		t.Fatal(err)
	}

	page := buyer.get(path).body
	mustContain(t, page, `data-testid="extend"`, "The same devices are free after it for 6 hours; it can be extended by 1 to 6 hours.")
	too := buyer.get(path + "/extend?hours=7")
	if too.status != http.StatusUnprocessableEntity || !strings.Contains(too.body, "free after it for 1 to 6 hours") {
		t.Fatalf("7 hours: %d", too.status)
	}
	conf := buyer.get(path + "/extend?hours=4")
	if conf.status != http.StatusOK {
		t.Fatalf("confirmation: %d\n%s", conf.status, conf.body)
	}
	want := market.Cents(8 * 4 * 219) // no dataset in the request: instance time only
	if got := testidValue(t, conf.body, "extend-amount"); got != want.String() {
		t.Fatalf("extension amount %q, want %s", got, want)
	}
	mustContain(t, conf.body, "2 Dec 2026 10:00 UTC", "2 Dec 2026 14:00 UTC", "8 × 4 hours × $2.19", "The same nodes: node 0 (8 devices)")

	// A price that is not the one now is shown again, not booked.
	stale := buyer.post(path+"/extend?hours=4", path+"/extend", url.Values{"hours": {"4"}, "amount": {strconv.FormatInt(int64(want)-1, 10)}})
	if stale.status != http.StatusConflict || !strings.Contains(stale.body, "Check it and confirm again") || !strings.Contains(stale.body, `data-testid="extend-confirm-button"`) {
		t.Fatalf("stale price: %d", stale.status)
	}
	done := buyer.post(path+"/extend?hours=4", path+"/extend", url.Values{"hours": {"4"}, "amount": {strconv.FormatInt(int64(want), 10)}})
	if done.status != http.StatusSeeOther || done.location == path {
		t.Fatalf("book the extension: %d → %q\n%s", done.status, done.location, done.body)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(done.location, "/reservations/"), 10, 64)
	ext, err := app.db.FindReservation(ctx, id)
	if err != nil || ext.ExtendsID != r.ID || ext.State != market.ReservationHeld || ext.AmountCents != want ||
		!ext.Start().Equal(r.End()) || !ext.End().Equal(r.End().Add(4*time.Hour)) {
		t.Fatalf("extension %+v, %v", ext, err)
	}
	mustContain(t, buyer.get(done.location).body, "This reservation continues", `href="`+path+`"`)
	mustContain(t, buyer.get(path).body, `data-testid="extension-link"`, fmt.Sprintf("#%d, held", id))
	again := buyer.post(path+"/extend?hours=4", path+"/extend", url.Values{"hours": {"4"}, "amount": {strconv.FormatInt(int64(want), 10)}})
	if again.status != http.StatusConflict || !strings.Contains(again.body, "already continues") {
		t.Fatalf("a second extension: %d", again.status)
	}

	// Paying it settles like any booking; the ledger matches the processor.
	pay := buyer.post(done.location, done.location+"/pay", url.Values{})
	if pay.status != http.StatusSeeOther {
		t.Fatalf("pay: %d", pay.status)
	}
	if paid := buyer.post(pay.location, pay.location, url.Values{"outcome": {"pay"}}); paid.status != http.StatusSeeOther {
		t.Fatalf("simulated payment: %d", paid.status)
	}
	if ext, err = app.db.FindReservation(ctx, id); err != nil || ext.State != market.ReservationConfirmed {
		t.Fatalf("paid extension %+v, %v", ext, err)
	}
	if charged := sumKind(app.ledger(id), "charge"); charged != want {
		t.Fatalf("charged %s, want %s", charged, want)
	}
	requireReconciled(t, app.testApp)
}
