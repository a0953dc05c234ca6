package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestDispute follows two paid bookings of a provider who has not connected payouts, on one server:
//
//   - A: a host failure during the booking gives the buyer the SLA credits (capped by the terms);
//     the buyer's dispute (hardware not as listed) is answered by the provider; after the booking
//     ends the settlement refunds the buyer and the payout waits, frozen and held; the admin reads
//     the timeline and grants a small credit. When the provider finishes payout onboarding the
//     payout is transferred: the provider's notification, statement and ledger all show the
//     amount actually transferred, the held payout less the credit with the fee recomputed.
//   - B: the admin grants the largest credit the form allows (what was paid, less refunds), more
//     than the held payout: the payout becomes $0.00, the settlement completes at once, and no
//     transfer is made, not even at onboarding.
//
// Every figure is computed here from the offer's terms (settlementOf, afterCredit), and the test
// ends with `gpumarket reconcile` clean. Time passes by restarting the server on the same
// database with a larger -clock-offset, as in the billing test.
func TestDispute(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))

	provider := newPage(t)
	signUp(t, provider, srv, "pia@dispute.test", "Pia Provider", "Dispute Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")

	srv.createAdmin(t, "ops@dispute.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@dispute.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// The buyer books 2 of the 4 H100s for 4 hours twice (A and B) and pays for both.
	const devices, hours = 2, 4
	buyer := newPage(t)
	signUp(t, buyer, srv, "bo@dispute.test", "Bo Buyer", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	var ids [2]string
	for i := range ids {
		ids[i] = reserve(t, buyer, srv, devices, hours, start)
		click(t, buyer.GetByTestId("pay"), "Pay")
		click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
		expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	}
	resA, resB := ids[0], ids[1]

	// An hour into the bookings the provider reports a host failure on A: 1 of the 2 devices for
	// 30 minutes, so uptime falls below the last tier and the SLA credits reach the cap.
	const lostDeviceMinutes = 1 * 30
	settledA, settledB := settlementOf(devices, hours, lostDeviceMinutes), settlementOf(devices, hours, 0)
	if settledA.refund != roundHalfAway(settledA.paid*capBP, 10000) {
		t.Fatalf("the test means A's SLA credits to reach the cap: %+v", settledA)
	}
	srv = restartAt(t, srv, start.Add(time.Hour))
	reportHostFailure(t, provider, srv, resA, start.Add(time.Hour), start.Add(90*time.Minute), 1)

	// The buyer opens a dispute on each with a statement; the provider is notified and answers A's.
	disputeA := openDispute(t, buyer, srv, resA, "One of the two devices reports as an A100 40GB in nvidia-smi; log attached to ticket BB-7.")
	disputeB := openDispute(t, buyer, srv, resB, "Both devices report as A100 40GB in nvidia-smi for the whole booking; ticket BB-8.")
	gotoOK(t, provider, srv.URL+"/notifications")
	click(t, provider.GetByTestId("notification").Filter(playwright.LocatorFilterOptions{HasText: "opened a dispute on reservation #" + resA + ":"}).GetByRole("link"), "the dispute notification")
	expectURL(t, provider, srv.URL+disputeA)
	fill(t, provider.Locator("#f-statement"), "Both devices were H100 SXM; one was misreported by an old driver, fixed within the hour.")
	click(t, provider.GetByTestId("dispute-answer"), "Add statement")
	expectText(t, provider.GetByTestId("dispute-statement").Last(), "misreported by an old driver", "the provider's answer")

	// After the bookings end they are settled: the buyer is refunded A's SLA credits and the
	// payouts wait on the disputes (and on onboarding).
	srv = restartAt(t, srv, start.Add(5*time.Hour))
	for _, id := range ids {
		waitFor(t, buyer, srv.URL+"/reservations/"+id, "completed")
		waitForStatement(t, buyer, srv.URL+"/reservations/"+id)
	}
	gotoOK(t, buyer, srv.URL+"/reservations/"+resA+"/statement")
	expectSummary(t, buyer, settledA, "A's statement before the dispute is decided")

	// The admin reads A's whole timeline and grants a small credit.
	const creditA = 689
	wantA := settledA.afterCredit(creditA)
	gotoOK(t, admin, srv.URL+"/admin/disputes")
	click(t, admin.GetByTestId("admin-dispute-row").Filter(playwright.LocatorFilterOptions{HasText: "#" + resA}).GetByTestId("open-dispute"), "A's dispute")
	expectURL(t, admin, srv.URL+"/admin"+disputeA)
	for _, kind := range []string{"booking", "payment", "dispute", "statement", "ledger", "settlement"} {
		expectVisible(t, admin.Locator(`[data-testid="timeline-event"][data-kind="`+kind+`"]`).First(), "a "+kind+" event on the timeline")
	}
	decide(t, admin, creditA, "Partly substantiated: the misreporting cost the buyer the first hour of one device.")
	expectText(t, admin.GetByTestId("flash"), "Credit of "+usd(creditA)+" granted and refunded", "flash after granting")
	expectText(t, admin.GetByTestId("dispute-status"), "granted", "dispute status after granting")

	// Both parties see the outcome and the reason; the buyer's refund is made.
	gotoOK(t, provider, srv.URL+disputeA)
	expectText(t, provider.GetByTestId("dispute-outcome"), "a credit of "+usd(creditA), "the provider sees the outcome")
	gotoOK(t, buyer, srv.URL+disputeA)
	expectText(t, buyer.GetByTestId("dispute-outcome"), "the misreporting cost the buyer", "the buyer sees the reason")
	expectText(t, buyer.GetByTestId("dispute-refund"), "Refunded "+usd(creditA), "the buyer sees the refund")
	expectNotification(t, buyer, srv, fmt.Sprintf("A refund of %s for reservation #%s", usd(creditA), resA), "the buyer's dispute refund")

	// The credit is on the buyer's statement and in the ledger, and the summary adds it up.
	gotoOK(t, buyer, srv.URL+"/reservations/"+resA+"/statement")
	expectAmount(t, buyer.GetByTestId("adjustment-amount"), usd(creditA), "the dispute credit on the buyer's statement")
	expectSummary(t, buyer, wantA, "A's buyer statement after the credit")
	refund := buyer.Locator(`[data-testid="ledger-row"][data-kind="refund"]`).Filter(playwright.LocatorFilterOptions{HasText: usd(creditA)})
	expectVisible(t, refund, "the dispute refund in the ledger")
	if text, _ := refund.TextContent(); !strings.Contains(text, "Refund to your card") {
		t.Errorf("the ledger refund row does not say the money went to the buyer's card: %q", text)
	}
	fitsPhone(t, buyer, "A's buyer statement with its dispute credit")
	shot(t, buyer, "statement")

	// The provider's statement shows the held payout after the credit.
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+resA+"/statement")
	expectSummary(t, provider, wantA, "A's provider statement after the credit")
	fitsPhone(t, provider, "A's provider statement with its dispute credit")
	shot(t, provider, "provider-statement")
	expectAmount(t, provider.GetByTestId("payout-state"), fmt.Sprintf("Payout of %s held until you connect payouts.", usd(wantA.payout)), "A's payout state before onboarding")

	// On B the admin first asks for a cent more than the form allows, then grants the most it allows:
	// everything paid (B had no SLA refund), more than the held payout.
	creditB := settledB.paid - settledB.refund
	wantB := settledB.afterCredit(creditB)
	if creditB <= settledB.payout || wantB.payout != 0 {
		t.Fatalf("the test means B's credit to exceed the held payout and leave nothing to pay: %+v → %+v", settledB, wantB)
	}
	gotoOK(t, admin, srv.URL+"/admin"+disputeB)
	decideRejected(t, admin, creditB+1, usd(creditB))
	decide(t, admin, creditB, "Substantiated: neither device was the hardware listed.")
	expectText(t, admin.GetByTestId("flash"), "Credit of "+usd(creditB)+" granted and refunded", "flash after granting B's credit")

	// B is settled at once, with nothing to pay the provider.
	waitFor(t, buyer, srv.URL+"/reservations/"+resB, "settled")
	gotoOK(t, buyer, srv.URL+"/reservations/"+resB+"/statement")
	expectText(t, buyer.GetByTestId("settlement-state"), "settled", "B's settlement state")
	expectSummary(t, buyer, wantB, "B's buyer statement after the credit")
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+resB+"/statement")
	expectSummary(t, provider, wantB, "B's provider statement after the credit")
	expectAmount(t, provider.GetByTestId("payout-state"), "No payout: nothing is left to pay you.", "B's payout state")

	// The provider finishes payout onboarding: A's held payout is transferred at once.
	gotoOK(t, provider, srv.URL+"/provider/reservations")
	expectText(t, provider.GetByTestId("onboarding-state"), "not connected", "onboarding state before connecting")
	click(t, provider.GetByTestId("connect-payouts"), "Connect payouts")
	click(t, provider.GetByTestId("onboard-simulated"), "Complete onboarding")
	expectText(t, provider.GetByTestId("onboarding-state"), "connected — payouts enabled", "onboarding state after connecting")
	waitFor(t, buyer, srv.URL+"/reservations/"+resA, "settled")

	// The provider's notification, payout list, statement and ledger show the amount transferred.
	transferred := usd(wantA.payout)
	expectNotification(t, provider, srv, fmt.Sprintf("Payout of %s for booking #%s sent to your connected account.", transferred, resA), "A's payout")
	if n, _ := provider.GetByTestId("notification").Filter(playwright.LocatorFilterOptions{HasText: "for booking #" + resB + " sent"}).Count(); n != 0 {
		t.Errorf("the provider was told of %d payout(s) for B, whose payout is $0.00", n)
	}
	gotoOK(t, provider, srv.URL+"/provider/reservations")
	for id, want := range map[string]string{resA: transferred, resB: usd(0)} {
		row := provider.GetByTestId("provider-settlement-row").Filter(playwright.LocatorFilterOptions{HasText: "#" + id})
		expectText(t, row, "Settled", "the provider's settlement row of #"+id)
		expectAmount(t, row.GetByTestId("provider-payout"), want, "the payout of #"+id+" in the provider's list")
	}
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+resA+"/statement")
	expectText(t, provider.GetByTestId("settlement-state"), "settled", "A's settlement state")
	expectAmount(t, provider.GetByTestId("payout-state"), fmt.Sprintf("Payout of %s paid to your connected account.", transferred), "A's payout state")
	expectSummary(t, provider, wantA, "A's provider statement after the transfer")
	expectAmount(t, provider.GetByTestId("adjustment-amount"), usd(creditA), "the dispute credit on the provider's statement")
	shot(t, provider, "provider-statement")

	ledgerA := providerLedger(t, admin, srv, resA)
	if want := []int64{wantA.payout}; fmt.Sprint(ledgerA.transfers) != fmt.Sprint(want) {
		t.Errorf("A's ledger transfers to the provider: %v, want %v", ledgerA.transfers, want)
	}
	if ledgerA.balance != 0 {
		t.Errorf("the provider's account for A is left at %s, want $0.00 once paid", usd(ledgerA.balance))
	}
	ledgerB := providerLedger(t, admin, srv, resB)
	if len(ledgerB.transfers) != 0 || ledgerB.balance != 0 {
		t.Errorf("B's ledger: transfers %v and the provider's account at %s; want no transfer and $0.00", ledgerB.transfers, usd(ledgerB.balance))
	}

	srv.reconcile(t)
}

// openDispute has the buyer open a dispute (hardware not as listed) on the reservation and
// returns the dispute's path (the port changes when the server restarts).
func openDispute(t *testing.T, buyer playwright.Page, srv *server, resID, statement string) string {
	t.Helper()
	gotoOK(t, buyer, srv.URL+"/reservations/"+resID)
	click(t, buyer.GetByTestId("open-dispute-link"), "Open a dispute")
	selectOption(t, field(buyer, "What is the dispute about?"), "Hardware not as listed")
	fill(t, buyer.Locator("#f-statement"), statement)
	click(t, buyer.GetByTestId("submit-dispute"), "Open the dispute")
	expectText(t, buyer.GetByTestId("dispute-status"), "open", "dispute status")
	if err := expect.Page(buyer).ToHaveURL(regexp.MustCompile(`/disputes/\d+$`)); err != nil {
		t.Fatalf("not on the dispute's page: %v", err)
	}
	return strings.TrimPrefix(buyer.URL(), srv.URL)
}

// decide fills the admin's decision form on the open dispute page and grants credit.
func decide(t *testing.T, admin playwright.Page, credit int64, reason string) {
	t.Helper()
	fill(t, field(admin, "Credit to the buyer (US$; 0 or empty to reject)"), strings.TrimPrefix(usd(credit), "$"))
	fill(t, admin.Locator("#f-reason"), reason)
	click(t, admin.GetByTestId("grant-credit"), "Grant the credit")
}

// decideRejected asks for credit and expects the form back with the limit next to the field.
func decideRejected(t *testing.T, admin playwright.Page, credit int64, limit string) {
	t.Helper()
	decide(t, admin, credit, "More than the form allows.")
	expectText(t, admin.GetByTestId("error-credit"), "at most "+limit, "the credit field's error")
	expectText(t, admin.GetByTestId("dispute-status"), "open", "the dispute after a refused credit")
}

// waitForStatement reloads the reservation page until it links to a settlement statement.
func waitForStatement(t *testing.T, page playwright.Page, url string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		gotoOK(t, page, url)
		if n, _ := page.GetByTestId("statement-link").Count(); n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no settlement statement after the booking ended", url)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ledgerView is the provider's side of a reservation's ledger as the admin's timeline shows it.
type ledgerView struct {
	transfers []int64 // the transfer entries to the provider, in cents
	balance   int64   // what the ledger still owes the provider: credits less debits
}

var ledgerEvent = regexp.MustCompile(`(\w+) \$([\d,]+)\.(\d\d): debit (\S+), credit (\S+) \(`)

// providerLedger reads the ledger entries on the admin's timeline of the reservation (its only
// provider's account is the one named provider:…).
func providerLedger(t *testing.T, admin playwright.Page, srv *server, resID string) ledgerView {
	t.Helper()
	gotoOK(t, admin, srv.URL+"/admin/reservations/"+resID)
	events := admin.Locator(`[data-testid="timeline-event"][data-kind="ledger"]`)
	expectVisible(t, events.First(), "a ledger event on #"+resID+"'s timeline")
	// Each event's entry as recorded (debit, credit, key) sits in a closed <details>: its text content.
	texts, err := events.Locator(`[data-testid="timeline-record"]`).AllTextContents()
	if err != nil {
		t.Fatalf("read #%s's ledger: %v", resID, err)
	}
	var v ledgerView
	for _, text := range texts {
		m := ledgerEvent.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("unreadable ledger event on #%s's timeline: %q", resID, text)
		}
		whole, _ := strconv.ParseInt(strings.ReplaceAll(m[2], ",", ""), 10, 64)
		frac, _ := strconv.ParseInt(m[3], 10, 64)
		amount := whole*100 + frac
		if strings.HasPrefix(m[5], "provider:") {
			v.balance += amount
		}
		if strings.HasPrefix(m[4], "provider:") {
			v.balance -= amount
			if m[1] == "transfer" {
				v.transfers = append(v.transfers, amount)
			}
		}
	}
	return v
}
