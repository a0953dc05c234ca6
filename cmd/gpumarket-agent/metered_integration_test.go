package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// TestMeteredRentalWithTheAgent runs the real server and the real agent:
// the provider allows metered rentals of a one-node offer; the buyer tops
// up 20.00 on the test processor's payment page and starts one device now
// through the API. The clock starts when the agent has handed the key
// over and its acceptance test is in — not at the start. Ten minutes later
// (the server restarted with its clock there) the buyer stops it; the
// agent removes the key; the last draw is made once the stop is two
// minutes past. The draws equal the whole minutes from the agent's
// reports to the stop at the offer's price, derived here from the
// agent's rows alone, and `gpumarket reconcile` finds no difference.
func TestMeteredRentalWithTheAgent(t *testing.T) {
	const priceCents = 317 // the harness's itOfferForm
	mk := newMarket(t, "metered", url.Values{"title": {"8 H100 SXM, metered agent test"}})
	srv, db, provider, buyer := mk.srv, mk.db, mk.provider, mk.buyer
	offerID, buyerKey, apiToken := mk.offerID, mk.buyerKey, mk.apiToken
	provider.mustPost("/offers/"+offerID, "/provider/offers/"+offerID+"/metered", url.Values{"allow": {"1"}, "notice_minutes": {"30"}}, http.StatusSeeOther)
	host := mk.host(0, "203.0.113.8", "")
	keysFile := host.keys

	r := buyer.mustPost("/balance", "/balance/top-up/checkout", url.Values{"amount": {"20.00"}}, http.StatusSeeOther)
	checkout := buyer.path(r.location)
	buyer.mustPost(checkout, checkout, url.Values{"outcome": {"pay"}}, http.StatusSeeOther)
	if got := testidText(buyer.get("/balance").body, "balance-amount"); got != "$20.00" {
		t.Fatalf("balance after the top-up %q", got)
	}

	var started struct {
		ReservationID int64 `json:"reservation_id"`
	}
	srv.api(t, apiToken, "POST", "/api/v1/offers/"+offerID+"/metered", `{"devices":1}`, http.StatusCreated, &started)
	// The agent comes up a little after the booking: the clock waits for it.
	time.Sleep(2 * time.Second)
	mk.start(host)
	waitUntil(t, 20*time.Second, "the hosts page shows node 0 online", func() bool {
		return strings.Contains(provider.get("/provider/hosts").body, `data-testid="host-status">online<`)
	})

	waitUntil(t, 30*time.Second, "the buyer's key is in authorized_keys", func() bool {
		return strings.Contains(readFile(t, keysFile), buyerKey)
	})
	resPath := fmt.Sprintf("/reservations/%d", started.ReservationID)
	waitUntil(t, 30*time.Second, "the reservation page shows the clock started", func() bool {
		return strings.Contains(testidText(buyer.get(resPath).body, "metered-panel-clock"), "Clock started")
	})

	// Ten minutes on (the server's clock), the buyer stops it.
	srv = srv.restartAt(t, time.Now().Add(10*time.Minute))
	time.Sleep(3 * time.Second) // a few rounds draw on the way
	var stopped struct {
		StopAt time.Time `json:"stopped_at"`
	}
	srv.api(t, apiToken, "POST", fmt.Sprintf("/api/v1/reservations/%d/stop", started.ReservationID), "", http.StatusOK, &stopped)
	waitUntil(t, 30*time.Second, "the buyer's key is gone from authorized_keys", func() bool {
		return !strings.Contains(readFile(t, keysFile), buyerKey)
	})
	// Past the stop's lag the last draw and the provider's payout are made.
	srv = srv.restartAt(t, stopped.StopAt.Add(3*time.Minute))
	var bal struct {
		DrawsCents int64 `json:"draws_cents"`
	}
	time.Sleep(4 * time.Second)
	srv.api(t, apiToken, "GET", "/api/v1/balance", "", http.StatusOK, &bal)
	srv.stop(t)

	// The books, from the agent's own rows: the clock started at the later
	// of the key's installation and the acceptance result.
	books, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer books.Close()
	ctx := context.Background()
	rental, err := books.FindMeteredRental(ctx, started.ReservationID)
	if err != nil {
		t.Fatal(err)
	}
	access, err := books.ListReservationAccess(ctx, rental.BuyerID, started.ReservationID)
	if err != nil || len(access) != 1 || !access[0].Access.Installed() || !access[0].Access.Removed() {
		t.Fatalf("access %+v %v, want node 0 installed and removed", access, err)
	}
	acc, err := books.ListReservationAcceptance(ctx, started.ReservationID)
	if err != nil || len(acc) != 1 || acc[0].Result.Error != "" {
		t.Fatalf("acceptance %+v %v, want one passed", acc, err)
	}
	usable := access[0].Access.InstalledAt
	if acc[0].CreatedAt.After(usable) {
		usable = acc[0].CreatedAt
	}
	if incs, err := books.ListIncidents(ctx, started.ReservationID); err != nil || len(incs) != 0 {
		t.Fatalf("incidents %+v %v, want none (the restarts are the market's, not the host's)", incs, err)
	}
	if !rental.ClockStart.Equal(usable) || !rental.ClockStart.After(rental.CreatedAt) {
		t.Fatalf("clock started %s, want the agent's handover %s (booked %s)", rental.ClockStart, usable, rental.CreatedAt)
	}
	stop := stopped.StopAt.Truncate(time.Second)
	if access[0].Access.RemovedAt.Before(stop) {
		stop = access[0].Access.RemovedAt
	}
	minutes := int64(stop.Sub(usable) / time.Minute)
	cents := minutes * priceCents / 60
	if minutes < 9 || !rental.Final || rental.DrawnMinutes != minutes || int64(rental.DrawnCents) != cents || bal.DrawsCents != cents || rental.TransferRef == "" {
		t.Fatalf("rental %+v (balance draws %d), want %d minutes for %d¢, final and paid out", rental, bal.DrawsCents, minutes, cents)
	}
	t.Logf("clock %s → %s: %d minutes, %d¢ (fee %s, payout %s)", usable.Format(time.TimeOnly), stop.Format(time.TimeOnly), minutes, cents, rental.Fee, rental.Payout)
	if fee := roundHalfAway(cents*1200, 10000); int64(rental.Fee) != fee || int64(rental.Payout) != cents-fee {
		t.Fatalf("fee %s payout %s, want %d and %d (12 %% of %d¢)", rental.Fee, rental.Payout, fee, cents-fee, cents)
	}
	srv.reconcile(t)
}
