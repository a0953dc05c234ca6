package e2e

import (
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestBookPayIncidentSettle: a buyer books through the request builder and pays on the test
// processor's page; the provider connects payouts and, while the booking runs, reports a host
// failure; when the booking has ended the background loop settles it. The buyer's refund and the
// provider's payout are exactly what the offer's terms give for that incident, computed here
// (settlementOf), on the statements, in the notifications and in the payout list; then
// `gpumarket reconcile` finds no difference. Time passes by restarting the server on the same
// database with a larger -clock-offset; -tick 1s makes settlement quick.
func TestBookPayIncidentSettle(t *testing.T) {
	srv := startServer(t, withArgs(moneyArgs...))

	// A provider lists 4 H100s in Québec under the terms the test states; an admin approves them.
	provider := newPage(t)
	signUp(t, provider, srv, "hana@settle.test", "Hana Settle", "Settle Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	fillTerms(t, provider)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")

	srv.createAdmin(t, "ops@settle.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@settle.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// The provider connects payouts through the simulated onboarding.
	gotoOK(t, provider, srv.URL+"/provider/reservations")
	expectText(t, provider.GetByTestId("onboarding-state"), "not connected", "onboarding state before connecting")
	click(t, provider.GetByTestId("connect-payouts"), "Connect payouts")
	expectVisible(t, provider.GetByTestId("test-mode"), "the test-mode notice on onboarding")
	click(t, provider.GetByTestId("onboard-simulated"), "Complete onboarding")
	expectText(t, provider.GetByTestId("onboarding-state"), "connected — payouts enabled", "onboarding state after connecting")

	// A buyer asks for 4 H100s for 4 hours, starting within the next hours, reserves and pays on
	// the test processor's page, which says plainly that no money moves.
	const devices, hours, lostDeviceMinutes = 4, 4, 1 * 30 // 1 device down for 30 minutes
	want := settlementOf(devices, hours, lostDeviceMinutes)
	buyer := newPage(t)
	signUp(t, buyer, srv, "ben@settle.test", "Ben Buyer", "", true, false)
	start := time.Now().UTC().Truncate(time.Hour).Add(2 * time.Hour)
	resID := reserve(t, buyer, srv, devices, hours, start)
	expectAmount(t, buyer.GetByTestId("reservation-amount"), usd(want.paid), "the reservation's amount (devices × hours × price)")
	click(t, buyer.GetByTestId("pay"), "Pay")
	expectVisible(t, buyer.GetByTestId("test-mode"), "the test-mode notice")
	expectText(t, buyer.GetByTestId("test-mode"), "TEST MODE — simulated payment, no money moves", "test-mode notice")
	expectAmount(t, buyer.GetByTestId("pay-amount"), usd(want.paid), "the amount to pay")
	shot(t, buyer, "pay")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("reservation-state"), "confirmed", "state after paying")
	expectText(t, buyer.GetByTestId("payment-status"), "Paid", "payment status")

	// While the booking runs (the server restarted an hour into it), the provider reports a host
	// failure of 1 of the 4 devices for 30 minutes.
	srv = restartAt(t, srv, start.Add(time.Hour))
	reportHostFailure(t, provider, srv, resID, start.Add(time.Hour), start.Add(90*time.Minute), 1)

	// After the end the background loop settles the booking.
	srv = restartAt(t, srv, start.Add(5*time.Hour))
	waitFor(t, buyer, srv.URL+"/reservations/"+resID, "settled")
	click(t, buyer.GetByTestId("statement-link"), "Settlement statement")
	expectText(t, buyer.GetByTestId("settlement-state"), "settled", "settlement state")
	expectText(t, buyer.GetByTestId("statement-clause").First(), "Host failure, 1 of 4 devices", "host failure clause")
	expectText(t, buyer.GetByTestId("statement-delivered"), "15.50 of 16.00", "delivered device-hours")
	expectAmount(t, buyer.GetByTestId("statement-uptime"), "96.87%", "uptime (delivered ÷ promised, rounded down)")
	expectSummary(t, buyer, want, "the buyer's statement")
	fitsPhone(t, buyer, "the buyer's statement")
	shot(t, buyer, "statement")
	expectNotification(t, buyer, srv, fmt.Sprintf("A refund of %s for reservation #%s", usd(want.refund), resID), "the buyer's refund")

	gotoOK(t, provider, srv.URL+"/provider/reservations")
	row := provider.GetByTestId("provider-settlement-row").Filter(playwright.LocatorFilterOptions{HasText: "#" + resID})
	expectText(t, row, "Settled", "the provider's settlement row")
	expectAmount(t, row.GetByTestId("provider-payout"), usd(want.payout), "the provider's payout in the list")
	gotoOK(t, provider, srv.URL+"/provider/bookings/"+resID+"/statement")
	expectAmount(t, provider.GetByTestId("payout-state"), fmt.Sprintf("Payout of %s paid to your connected account.", usd(want.payout)), "payout state")
	expectSummary(t, provider, want, "the provider's statement")
	fitsPhone(t, provider, "the provider's statement")
	shot(t, provider, "provider-statement")
	expectNotification(t, provider, srv, fmt.Sprintf("Payout of %s for booking #%s sent to your connected account.", usd(want.payout), resID), "the provider's payout")

	srv.reconcile(t)
}

// moneyArgs are the flags of every server in the tests that move money: a platform fee stated
// here rather than the default, and a background loop that ticks every second.
var moneyArgs = []string{"-tick", "1s", "-platform-fee-bp", strconv.Itoa(platformFeeBP)}

// The settlement terms the money tests' provider types into the offer form (fillTerms), in
// numbers, so that every refund and payout the tests expect is computed from terms they state.
const (
	priceCents    = 317  // quebecH100.Price: $3.17 per device-hour
	capBP         = 5000 // SLA credits are capped at 50% of the amount paid
	platformFeeBP = 1200 // the platform keeps 12% of what a provider keeps after credits
)

// creditSchedule is the offer's credit schedule: below BelowBP uptime, CreditBP of the amount.
var creditSchedule = []struct{ belowBP, creditBP int64 }{{9950, 1000}, {9900, 2500}, {9500, 10000}}

// fillTerms types the settlement terms above into the offer form.
func fillTerms(t *testing.T, page playwright.Page) {
	t.Helper()
	selectOption(t, field(page, "Billing basis"), "Wall-clock (pay for the reserved block)")
	fill(t, field(page, "Uptime guarantee (%)"), "99.5")
	fill(t, field(page, "Credit schedule (uptime below % : credit %)"), "99.5:10, 99:25, 95:100")
	fill(t, field(page, "Credit cap (% of amount paid)"), "50")
}

// settlement is what the tests expect of a one-provider reservation's settlement, in cents.
type settlement struct {
	paid   int64 // what the buyer paid
	refund int64 // everything returned to the buyer: SLA credits and dispute credits
	kept   int64 // what the provider keeps: paid − refund
	fee    int64 // the platform's fee on what the provider keeps
	payout int64 // what is transferred to the provider: kept − fee
}

// settlementOf is the settlement of a wall-clock booking of devices for hours at priceCents
// with outages (host failures) of lostDeviceMinutes in all, by the rules of docs/payments.md:
//   - the amount paid is devices × hours × the price per device-hour;
//   - uptime is delivered ÷ reserved device-time, in basis points rounded down;
//   - the SLA credits are the pro-rata refund of the device-time lost plus the largest credit of
//     the schedule's tiers the uptime is below, rounded once (half away from zero), and capped
//     at capBP of the amount; they are refunded to the buyer;
//   - the platform fee is platformFeeBP of what the provider keeps, rounded half away from zero;
//     the provider is paid the rest.
func settlementOf(devices, hours, lostDeviceMinutes int64) settlement {
	paid := devices * hours * priceCents
	reserved := devices * hours * 60
	uptimeBP := (reserved - lostDeviceMinutes) * 10000 / reserved
	var tierBP int64
	for _, tier := range creditSchedule {
		if uptimeBP < tier.belowBP && tier.creditBP > tierBP {
			tierBP = tier.creditBP
		}
	}
	credits := roundHalfAway(paid*(lostDeviceMinutes*10000+tierBP*reserved), reserved*10000)
	refund := min(credits, roundHalfAway(paid*capBP, 10000))
	return settlement{paid: paid, refund: refund}.withFee()
}

// afterCredit is the settlement after a dispute credit granted while the payout is still held,
// by the rule in market.DisputeCredit: the credit is refunded to the buyer and taken from what the
// provider keeps (the platform bears what it cannot take), and the fee is recomputed on what the
// provider keeps after it.
func (s settlement) afterCredit(credit int64) settlement {
	return settlement{paid: s.paid, refund: s.refund + min(credit, s.kept)}.withFee()
}

func (s settlement) withFee() settlement {
	s.kept = s.paid - s.refund
	s.fee = roundHalfAway(s.kept*platformFeeBP, 10000)
	s.payout = s.kept - s.fee
	return s
}

// roundHalfAway is num ÷ den for non-negative num and positive den, rounded half away from zero.
func roundHalfAway(num, den int64) int64 {
	return (2*num + den) / (2 * den)
}

// usd writes cents as the pages do: "$1,234.56".
func usd(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	whole := strconv.FormatInt(cents/100, 10)
	for i := len(whole) - 3; i > 0; i -= 3 {
		whole = whole[:i] + "," + whole[i:]
	}
	return fmt.Sprintf("%s$%s.%02d", sign, whole, cents%100)
}

// expectAmount checks that l's whole text is want (not merely contains it: $9.98 is not $19.98).
func expectAmount(t *testing.T, l playwright.Locator, want, what string) {
	t.Helper()
	if err := expect.Locator(l).ToHaveText(want); err != nil {
		t.Errorf("%s is not %q: %v", what, want, err)
	}
}

// fitsPhone checks a page at the phone's width (390 px): neither the page nor any table in its
// box (.table-wrap, which scrolls sideways rather than widen the page) is wider than the window.
func fitsPhone(t *testing.T, page playwright.Page, what string) {
	t.Helper()
	orig := page.ViewportSize()
	if err := page.SetViewportSize(narrow.Width, narrow.Height); err != nil {
		t.Fatalf("%s: resize to %d px: %v", what, narrow.Width, err)
	}
	defer page.SetViewportSize(orig.Width, orig.Height)
	noHorizontalOverflow(t, page, what)
	res, err := page.Evaluate(`() => [...document.querySelectorAll('.table-wrap')]
		.filter(w => w.scrollWidth > w.clientWidth)
		.map(w => (w.querySelector('table')?.dataset.testid || w.closest('[data-testid]')?.dataset.testid || 'a table') + ': ' + w.scrollWidth + ' px in ' + w.clientWidth)`)
	if err != nil {
		t.Fatalf("%s: measure the tables: %v", what, err)
	}
	if wide, _ := res.([]interface{}); len(wide) > 0 {
		t.Errorf("%s: tables scroll sideways at %d px: %v", what, narrow.Width, wide)
	}
}

// expectSummary checks a statement's summary against the settlement the test computed: the
// paid amount, the refund to the buyer, the fee and the payout, which add up to what was paid.
func expectSummary(t *testing.T, page playwright.Page, want settlement, what string) {
	t.Helper()
	if want.refund+want.fee+want.payout != want.paid {
		t.Fatalf("the test's own settlement does not add up: %+v", want)
	}
	expectAmount(t, page.GetByTestId("statement-paid"), usd(want.paid), what+": paid")
	expectAmount(t, page.GetByTestId("statement-refund"), usd(want.refund), what+": refund to the buyer")
	expectAmount(t, page.GetByTestId("statement-fee"), usd(want.fee), what+": platform fee")
	expectAmount(t, page.GetByTestId("statement-payout"), usd(want.payout), what+": payout to the provider")
}

// expectNotification checks that the page's user has a notification saying text.
func expectNotification(t *testing.T, page playwright.Page, srv *server, text, what string) {
	t.Helper()
	gotoOK(t, page, srv.URL+"/notifications")
	n := page.GetByTestId("notification").Filter(playwright.LocatorFilterOptions{HasText: text})
	if err := expect.Locator(n).ToHaveCount(1); err != nil {
		all, _ := page.GetByTestId("notification").AllInnerTexts()
		t.Errorf("%s: want one notification saying %q: %v\nnotifications: %q", what, text, err, all)
	}
}

// reserve asks the request builder for devices H100s for hours, starting at start, reserves
// the first quote and returns the reservation's id; the page is left on the reservation.
func reserve(t *testing.T, buyer playwright.Page, srv *server, devices, hours int, start time.Time) string {
	t.Helper()
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {strconv.Itoa(devices)}, "workload.hours": {strconv.Itoa(hours)},
		"workload.checkpoint_mins": {"60"}, "workload.restart_mins": {"10"}, "constraints.families": {"H100"},
		"constraints.earliest_start": {start.Format("2006-01-02T15:04")}, "constraints.deadline": {start.Add(48 * time.Hour).Format("2006-01-02T15:04")},
		"preferences.cost_weight": {"100"},
	}
	gotoOK(t, buyer, srv.URL+"/requests?"+q.Encode())
	click(t, buyer.GetByTestId("quote").First().GetByTestId("reserve"), "Reserve")
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "state after reserving")
	id := regexp.MustCompile(`/reservations/(\d+)$`).FindStringSubmatch(buyer.URL())
	if id == nil {
		t.Fatalf("not on a reservation page: %s", buyer.URL())
	}
	return id[1]
}

// reportHostFailure has the provider report a host failure of devices on the booking from from to to.
func reportHostFailure(t *testing.T, provider playwright.Page, srv *server, resID string, from, to time.Time, devices int) {
	t.Helper()
	waitFor(t, provider, srv.URL+"/provider/bookings/"+resID, "active")
	click(t, provider.GetByTestId("report-incident"), "Report an incident")
	selectOption(t, field(provider, "What happened"), "Host failure — Pro-rata refund for the device-hours not delivered.")
	fill(t, field(provider, "Started (UTC)"), from.Format("2006-01-02T15:04"))
	fill(t, field(provider, "Ended (UTC)"), to.Format("2006-01-02T15:04"))
	fill(t, field(provider, "Devices affected"), strconv.Itoa(devices))
	fill(t, provider.Locator("#f-note"), "Node lost power supply; ticket HF-1209.")
	click(t, provider.GetByTestId("submit-incident"), "Report incident")
	expectText(t, provider.GetByTestId("flash"), "applies at once", "flash after reporting")
	expectText(t, provider.GetByTestId("incident-status").First(), "Applies", "incident status")
}

// restartAt stops the server and starts it again on the same database with its clock at at.
func restartAt(t *testing.T, srv *server, at time.Time) *server {
	t.Helper()
	srv.stop(t)
	srv.reported = true
	return startServer(t, withDB(srv.DB), withArgs(append(append([]string(nil), moneyArgs...), "-clock-offset", offsetTo(at))...))
}

// offsetTo is the -clock-offset that makes the server's clock read at (now).
func offsetTo(at time.Time) string {
	return fmt.Sprintf("%ds", int64(time.Until(at)/time.Second))
}

// waitFor reloads url until its reservation state says want (the background loop ticks every second).
func waitFor(t *testing.T, page playwright.Page, url, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		gotoOK(t, page, url)
		text, _ := page.GetByTestId("reservation-state").TextContent()
		if strings.Contains(text, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still says %q, want %q", url, text, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
