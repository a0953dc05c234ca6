package e2e

import (
	"testing"
)

// TestMeteredTopUpStartStopStatement: a provider allows metered rentals on one of their offers;
// the buyer tops up 20.00 on the test payment page, starts one device now from the offer page
// (which states the metered SLA), stops it from the reservation page and reads the statement.
// No agent runs on the demo's hosts, so the machine never became usable: nothing is drawn and
// the balance is still 20.00 — "you don't pay for what you can't use".
func TestMeteredTopUpStartStopStatement(t *testing.T) {
	srv := startServer(t, withDemo())
	const provEmail, buyerEmail = "nordic@demo.gpumarket.test", "buyer@demo.gpumarket.test"
	prov := newPage(t)
	logIn(t, prov, srv, provEmail, demoPassword(t, srv, provEmail))
	gotoOK(t, prov, srv.URL+"/provider/offers")
	id, err := prov.GetByTestId("provider-offer-row").First().GetAttribute("data-offer-id")
	if err != nil || id == "" {
		t.Fatalf("no offer row on the provider's page: %v", err)
	}
	gotoOK(t, prov, srv.URL+"/offers/"+id)
	fill(t, prov.GetByTestId("metered-notice-input"), "30")
	click(t, prov.GetByTestId("metered-allow"), "Allow metered rentals")
	expectText(t, prov.GetByTestId("flash"), "Metered rentals of this offer are allowed.", "the opt-in's flash")

	buyer := newPage(t)
	logIn(t, buyer, srv, buyerEmail, demoPassword(t, srv, buyerEmail))
	gotoOK(t, buyer, srv.URL+"/balance")
	fill(t, buyer.GetByTestId("checkout-amount"), "20.00")
	click(t, buyer.GetByTestId("checkout-submit"), "Top up on the payment page")
	expectVisible(t, buyer.GetByTestId("test-mode"), "the test payment page")
	click(t, buyer.GetByTestId("pay-simulated"), "Pay (simulated)")
	expectText(t, buyer.GetByTestId("flash"), "Your balance is topped up by $20.00", "the top-up's flash")
	expectText(t, buyer.GetByTestId("balance-amount"), "$20.00", "the balance after the top-up")
	shot(t, buyer, "balance-topped-up")

	gotoOK(t, buyer, srv.URL+"/offers/"+id)
	expectText(t, buyer.GetByTestId("metered-sla"), "You don't pay for what you can't use", "the metered SLA on the offer")
	fill(t, buyer.GetByTestId("metered-devices"), "1")
	click(t, buyer.GetByTestId("metered-submit"), "Start now, metered")
	expectText(t, buyer.GetByTestId("metered-panel-state"), "running", "the rental's state")
	expectText(t, buyer.GetByTestId("metered-panel-clock"), "The clock starts when the machine is usable", "the clock not started")
	shot(t, buyer, "metered-running")
	click(t, buyer.GetByTestId("metered-stop"), "Stop this rental")
	expectText(t, buyer.GetByTestId("flash"), "Your metered rental is stopped", "the stop's flash")
	expectText(t, buyer.GetByTestId("metered-panel-state"), "stopped by you", "the state after stopping")

	gotoOK(t, buyer, srv.URL+"/balance")
	expectText(t, buyer.GetByTestId("balance-entry").First(), "Top-up", "the statement's top-up")
	expectText(t, buyer.GetByTestId("metered-state").First(), "stopped by you", "the rental on the balance page")
	expectText(t, buyer.GetByTestId("metered-drawn").First(), "$0.00", "nothing drawn: the machine was never usable")
	expectText(t, buyer.GetByTestId("balance-amount"), "$20.00", "the balance after the rental")
	noHorizontalOverflow(t, buyer, "the balance page")
	shot(t, buyer, "balance-statement")
	srv.reconcile(t)
}
