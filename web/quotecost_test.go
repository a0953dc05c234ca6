package web

import (
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/gpumarket/gpumarket/market"
)

// A quote explains every line of its effective cost with the request's and
// the offer's figures, says why it differs from what is charged, and
// writes emissions below a kilogram in grams.
func TestQuoteExplainsItsEffectiveCost(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	q := trainingQuery() // 8 devices × 24 h; checkpoint 60 min, restart 10 min
	q.Set("workload.dataset_gb", "500")
	q.Set("workload.data_region", "us-west-or")
	page := app.client().get("/requests?" + q.Encode()).body
	card := page[strings.Index(page, `data-testid="quote"`):]
	card = card[:strings.Index(card, "</article>")]
	charged := market.Cents(8 * 24 * 219) // instance only: the listing has no storage or egress price
	mustContain(t, card, `data-testid="cost-explained"`,
		"8 devices × 24 hours × $2.19 per device-hour. Charged at booking.",
		"Keeping the 500 GB dataset on each piece", "Moving the 500 GB dataset from US West (Oregon)",
		"10 minutes of provisioning (the provider&#39;s figure)", "half the 60-minute checkpoint interval plus the 10-minute restart",
		"Provisioning again after each expected failure", "You are charged "+charged.String()+" at booking", "it is never charged")
	for _, key := range []string{"instance", "storage", "egress", "overhead", "failed", "restart"} {
		if m := regexp.MustCompile(`data-testid="cost-note-` + key + `">([^<]{20,})</dd>`).FindStringSubmatch(card); m == nil {
			t.Errorf("no explanation of the %s line", key)
		}
	}
	if total := testidText(card, "quote-total"); total == charged.String() {
		t.Errorf("effective cost %s equals the charge: nothing to explain", total)
	}

	// One T4 for an hour in Virginia: 70 W × 1 h × ~360 g/kWh, about 25 g.
	app.listedOffer("nvidia-t4-16gb-pcie", 2, 1, "us-east-va", 30)
	small := url.Values{"workload.kind": {"inference"}, "workload.devices": {"1"}, "workload.hours": {"1"},
		"constraints.families": {"T4"}, "constraints.earliest_start": {"2026-12-01T10:00"}}
	page = app.client().get("/requests?" + small.Encode()).body
	em := testidText(page, "quote-emissions")
	if !regexp.MustCompile(`^\d{1,3} g CO2e`).MatchString(em) || strings.Contains(em, "0.0 kg") {
		t.Errorf("emissions of a T4-hour shown as %q, want grams", em)
	}
}
