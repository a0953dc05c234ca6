package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

func TestQuoteEmissionsAndCarbonAwareStart(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-west-ca", 219)
	q := url.Values{
		"workload.kind": {"training"}, "workload.devices": {"8"}, "workload.hours": {"4"},
		"constraints.families":       {"H100"},
		"constraints.earliest_start": {"2026-12-01T10:00"}, "constraints.deadline": {"2026-12-03T10:00"},
		"preferences.cost_weight": {"100"},
	}
	c := app.client()
	r := c.get("/requests?" + q.Encode())
	mustContain(t, r.body, `data-testid="quote-emissions"`, "kg CO2e", "each hour it runs")
	mustNotContain(t, r.body, `data-testid="carbon-shift"`)

	q.Set("preferences.carbon_aware_start", "1")
	r = c.get("/requests?" + q.Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	// California is cleanest in the evening UTC (solar): 10:00 → 18:00–22:00.
	mustContain(t, r.body, `data-testid="carbon-shift"`, "Starting 8 h later saves", "and costs $0.00 more.", "1 Dec 2026 18:00 UTC – 1 Dec 2026 22:00 UTC", `name="preferences.carbon_aware_start" value="1" checked`)

	// The shifted quote books as shown.
	c.signUp("buyer@example.com", false)
	r = c.get("/requests?" + q.Encode())
	reqJSON, pieces := firstQuote(t, r.body)
	if !strings.Contains(reqJSON, `"carbon_aware_start": true`) {
		t.Fatalf("request JSON lost the preference: %s", reqJSON)
	}
	res := c.post("/requests?"+q.Encode(), "/reservations", url.Values{"request": {reqJSON}, "quote_id": {pieces}})
	if res.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d %s", res.status, res.body[:min(len(res.body), 400)])
	}
}

func TestWorkReportsAndMeasuredFigures(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	o := app.listedOffer("nvidia-l4-24gb-pcie", 2, 1, "eu-west-fr", 50)
	c := app.client()
	c.signUp("buyer@example.com", false)
	buyer := c.userID()
	past := market.Reservation{BuyerID: buyer, State: market.ReservationCompleted, RequestJSON: `{"version":1}`,
		CreatedAt: testNow.Add(-48 * time.Hour), UpdatedAt: testNow.Add(-20 * time.Hour),
		Pieces: []market.ReservationPiece{{OfferID: o.ID, Devices: 2, Start: testNow.Add(-30 * time.Hour), End: testNow.Add(-20 * time.Hour), PriceCents: 50, AmountCents: 1000}}}
	if err := app.db.ImportPastReservations(ctx, []market.Reservation{past}, testNow); err != nil {
		t.Fatal(err)
	}
	rs, err := app.db.ListBuyerReservations(ctx, buyer)
	if err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
	page := "/reservations/" + itoa(rs[0].ID)
	r := c.get(page)
	mustContain(t, r.body, `data-testid="work-report-form"`, o.Title)

	// Invalid: 422 with the message by the field, input kept.
	form := url.Values{"offer": {itoa(o.ID)}, "metric": {"tokens_per_sec"}, "latency_percentile": {"95"}, "workload": {"Llama 3.1 8B, vLLM"},
		"value": {"3600"}, "observed_minutes": {"600"}, "lost_minutes": {"700"}}
	bad := c.post(page, page+"/work", form)
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.body, `data-testid="error-lost_minutes"`) || !strings.Contains(bad.body, `value="3600"`) {
		t.Fatalf("invalid report: %d", bad.status)
	}
	form.Set("lost_minutes", "60")
	ok := c.post(page, page+"/work", form)
	if ok.status != http.StatusSeeOther {
		t.Fatalf("report: %d", ok.status)
	}
	mustContain(t, c.get(page).body, "3,600 tokens/s at p95 latency", "60 of 600 minutes lost")

	// The offer page shows the measured figure: 3,600 × 540/600 / 2 = 1,620 tok/s per device;
	// $0.50 / (1,620 × 3,600) × 10⁶ = $0.09 per million tokens.
	off := app.client().get("/offers/" + itoa(o.ID))
	mustContain(t, off.body, `data-testid="offer-measured"`, "1,620 tokens/s at p95 latency per device", "1 report", "10% of time lost", "$0.09 per million tokens")

	reports, err := app.db.ListWorkReports(ctx, store.WorkReportFilter{OfferIDs: []int64{o.ID}})
	if err != nil || len(reports) != 1 || reports[0].ReporterID != buyer {
		t.Fatalf("reports %+v %v", reports, err)
	}
	// Another buyer cannot report on it.
	other := app.client()
	other.signUp("other@example.com", false)
	if r := other.post("/market", page+"/work", form); r.status != http.StatusNotFound {
		t.Errorf("stranger's report: %d", r.status)
	}
}

func TestProviderCarbonProfile(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("prov@example.com", true)
	id := c.createOffer(validOfferForm())
	page := "/provider/offers/" + itoa(id) + "/carbon"
	r := c.get(page)
	mustContain(t, r.body, `data-testid="carbon-profile-form"`, "regional default")
	bad := c.post(page, page, url.Values{"hourly_g": {"1,2,3"}, "source": {"meter"}})
	if bad.status != http.StatusUnprocessableEntity || !strings.Contains(bad.body, "found 3") {
		t.Fatalf("bad profile: %d", bad.status)
	}
	if r := c.post(page, page, url.Values{"hourly_g": {"12"}, "source": {"Hydro PPA 2025"}}); r.status != http.StatusSeeOther {
		t.Fatalf("save: %d", r.status)
	}
	mustContain(t, c.get("/offers/"+itoa(id)).body, "the provider&#39;s own figures: Hydro PPA 2025", "12–12")
	stranger := app.client()
	stranger.signUp("prov2@example.com", true)
	if r := stranger.get(page); r.status != http.StatusNotFound {
		t.Errorf("stranger sees the form: %d", r.status)
	}
}

// TestQuoteCardsShowMeasuredWork: on the builder's quotes, an offer with
// reports shows its own figure, and one without shows its model's across
// offers — read once for the page, not per piece — each with the cost per
// unit of work at that piece's price.
func TestQuoteCardsShowMeasuredWork(t *testing.T) {
	app := newTestApp(t)
	ctx := context.Background()
	reported := app.listedOffer("nvidia-l4-24gb-pcie", 2, 1, "eu-west-fr", 50)
	silent := app.listedOffer("nvidia-l4-24gb-pcie", 2, 1, "eu-west-fr", 100)
	c := app.client()
	c.signUp("buyer@example.com", false)
	buyer := c.userID()
	past := market.Reservation{BuyerID: buyer, State: market.ReservationCompleted, RequestJSON: `{"version":1}`,
		CreatedAt: testNow.Add(-48 * time.Hour), UpdatedAt: testNow.Add(-20 * time.Hour),
		Pieces: []market.ReservationPiece{{OfferID: reported.ID, Devices: 2, Start: testNow.Add(-30 * time.Hour), End: testNow.Add(-20 * time.Hour), PriceCents: 50, AmountCents: 1000}}}
	if err := app.db.ImportPastReservations(ctx, []market.Reservation{past}, testNow); err != nil {
		t.Fatal(err)
	}
	rs, err := app.db.ListBuyerReservations(ctx, buyer)
	if err != nil || len(rs) != 1 {
		t.Fatal(rs, err)
	}
	if _, err := app.db.CreateWorkReport(ctx, market.WorkReport{ReservationID: rs[0].ID, OfferID: reported.ID, ReporterID: buyer,
		Metric: market.MetricTokensPerSec, LatencyPercentile: 95, Workload: "Llama 3.1 8B, vLLM", Value: 3600, ObservedMinutes: 600, LostMinutes: 60}, testNow); err != nil {
		t.Fatal(err)
	}
	q := url.Values{"workload.kind": {"inference"}, "workload.devices": {"2"}, "workload.hours": {"2"},
		"constraints.regions": {"eu-west-fr"}, "preferences.cost_weight": {"100"}}
	r := c.get("/requests?" + q.Encode())
	if r.status != http.StatusOK {
		t.Fatalf("status %d", r.status)
	}
	// 3,600 × 540/600 / 2 = 1,620 tokens/s per device, on both cards: the
	// first (50 ¢/device-hour) on this offer, $0.50 / (1,620 × 3,600) × 10⁶
	// = $0.09 per million tokens; the second (100 ¢) on the model, $1.00 /
	// (1,620 × 3,600) × 10⁶ = $0.17.
	cards := strings.Split(r.body, `data-testid="quote"`)
	if len(cards) != 3 {
		t.Fatalf("%d quote cards, want 2", len(cards)-1)
	}
	first, second := cards[1], cards[2]
	if !strings.Contains(first, "/offers/"+itoa(reported.ID)+`"`) || !strings.Contains(second, "/offers/"+itoa(silent.ID)+`"`) {
		t.Fatalf("want the reported offer's card first, then the silent one's:\n%s", r.body)
	}
	mustContain(t, first, "Measured on this offer", "1,620 tokens/s at p95 latency per device", "$0.09 per million tokens")
	mustNotContain(t, first, "Measured on all")
	mustContain(t, second, "Measured on all L4 24GB PCIe offers", "1,620 tokens/s at p95 latency per device", "$0.17 per million tokens")
	if n := strings.Count(r.body, `data-testid="quote-measured"`); n != 2 {
		t.Errorf("%d measured lines, want one on each of the 2 cards", n)
	}
}
