package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
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
	bins := buildBinaries(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "m.db")
	srv := startServer(t, bins, db, freeAddr(t), 0)
	const priceCents = 317

	provider := newBrowser(t, srv.URL)
	provider.signUp(db, "metered@agent.test", true)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	provider.mustPost("/provider/offers/new", "/provider/offers", url.Values{
		"title": {"8 H100 SXM, metered agent test"}, "accelerator": {"nvidia-h100-80gb-sxm"}, "memory_gb": {"80"},
		"devices_per_node": {"8"}, "nodes": {"1"}, "interconnect": {"nvlink"}, "network": {"none"},
		"cpu_cores": {"96"}, "ram_gb": {"1024"}, "storage_gb": {"8000"},
		"driver_version": {"550.90"}, "cuda_version": {"12.4"}, "os_image": {"Ubuntu 22.04"}, "container_runtime": {"Docker 26"},
		"region": {"us-west-or"}, "carbon": {""},
		"available_from": {today.Format("2006-01-02T15:04")}, "available_until": {today.AddDate(0, 2, 0).Format("2006-01-02T15:04")},
		"min_rental_hours": {"1"}, "max_rental_hours": {"720"}, "provisioning_mins": {"10"},
		"price": {"3.17"}, "storage_price": {"0.08"}, "egress_price": {"0.05"},
		"billing_basis": {"wall_clock"}, "uptime": {"99.5"}, "credit_schedule": {"99.5:10, 99:25"},
		"credit_cap": {"100"}, "free_cancel_hours": {"24"}, "cancel_fee": {"25"},
	}, http.StatusSeeOther)
	srv.createAdmin(t, "ops@metered.test")
	admin := newBrowser(t, srv.URL)
	admin.logIn("ops@metered.test")
	admin.setUpTwoFactor()
	m := regexp.MustCompile(`/admin/offers/(\d+)/review`).FindStringSubmatch(admin.get("/admin/offers").body)
	if m == nil {
		t.Fatal("the offer is not in the review queue")
	}
	offerID := m[1]
	admin.mustPost("/admin/offers", "/admin/offers/"+offerID+"/review", url.Values{"decision": {"approved"}}, http.StatusSeeOther)
	provider.mustPost("/offers/"+offerID, "/provider/offers/"+offerID+"/metered", url.Values{"allow": {"1"}, "notice_minutes": {"30"}}, http.StatusSeeOther)
	r := provider.mustPost("/provider/reservations", "/provider/payouts/connect", url.Values{}, http.StatusSeeOther)
	onboard := provider.path(r.location)
	provider.mustPost(onboard, onboard, url.Values{}, http.StatusSeeOther)
	provider.mustPost("/provider/hosts", "/provider/hosts/tokens", url.Values{"offer_id": {offerID}, "node": {"0"}}, http.StatusSeeOther)
	token := regexp.MustCompile(`gph_[A-Za-z0-9_-]{43}`).FindString(provider.get("/provider/hosts").body)
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	buyer := newBrowser(t, srv.URL)
	buyer.signUp(db, "grace@metered.test", false)
	buyerKey := newPublicKey(t, "grace@laptop")
	buyer.mustPost("/account", "/account/ssh-keys", url.Values{"public_key": {buyerKey}}, http.StatusSeeOther)
	buyer.mustPost("/account", "/account/tokens", url.Values{"token_name": {"ci"}, "token_scope": {"write"}}, http.StatusSeeOther)
	apiToken := regexp.MustCompile(`gpm_[A-Za-z0-9_-]+`).FindString(buyer.get("/account").body)
	r = buyer.mustPost("/balance", "/balance/top-up/checkout", url.Values{"amount": {"20.00"}}, http.StatusSeeOther)
	checkout := buyer.path(r.location)
	buyer.mustPost(checkout, checkout, url.Values{"outcome": {"pay"}}, http.StatusSeeOther)
	if got := testidText(buyer.get("/balance").body, "balance-amount"); got != "$20.00" {
		t.Fatalf("balance after the top-up %q", got)
	}

	keysFile := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(keysFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"-server", srv.URL, "-token-file", tokenFile, "-state", filepath.Join(dir, "state.json"),
		"-interval", "2s", "-simulate", "H100 80GB SXM x8", "-authorized-keys", keysFile,
		"-host", "203.0.113.8", "-port", "2222", "-ssh-user", "gpu"}
	var started struct {
		ReservationID int64 `json:"reservation_id"`
	}
	srv.api(t, apiToken, "POST", "/api/v1/offers/"+offerID+"/metered", `{"devices":1}`, http.StatusCreated, &started)
	// The agent comes up a little after the booking: the clock waits for it.
	time.Sleep(2 * time.Second)
	startAgent(t, bins, args)
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
