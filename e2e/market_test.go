package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestMarketShowsDemoHistoryAndQuoteEmissions: a visitor opens the market page of a fresh demo
// server and sees index charts drawn from the generated trade history; a quote in the request
// builder shows its estimated emissions, and with a carbon-aware start, what moving it saves.
//
// Whether starting later saves carbon depends on the hour of the day, so the server's clock is
// moved to the next 03:00 UTC (the grid profiles are daily): the test passes at any hour.
func TestMarketShowsDemoHistoryAndQuoteEmissions(t *testing.T) {
	at := time.Now().UTC().Truncate(24 * time.Hour).Add(27 * time.Hour)
	srv := startServer(t, withDemo(), withArgs("-clock-offset", offsetTo(at)))
	page := newPage(t)
	gotoOK(t, page, srv.URL+"/")
	openMenu(t, page, "exchange")
	click(t, page.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Market", Exact: playwright.Bool(true)}), "the Market link")
	expectURL(t, page, srv.URL+"/market")

	charts := page.GetByTestId("index-chart")
	expectVisible(t, charts.First(), "the first index chart")
	// The page is large; count the charts once it has loaded, not while it streams in.
	if err := page.WaitForLoadState(playwright.PageWaitForLoadStateOptions{State: playwright.LoadStateLoad}); err != nil {
		t.Fatalf("the market page did not finish loading: %v", err)
	}
	// Only the classes two demo providers sell (H100 SXM and A100 80GB SXM) can reach the
	// index's threshold of parties; the others show their asks and no chart.
	n, err := charts.Count()
	if err != nil || n != 2 {
		t.Fatalf("%d charts on the demo market page (err %v), want the two classes with two providers", n, err)
	}
	expectText(t, page.GetByTestId("market-threshold"), "at least 3 trades from at least 2 buyers and 2 providers", "the publication rule")
	expectText(t, page.Locator(`[data-testid="market-row"][data-class="nvidia-l40s-48gb-pcie:on-demand"]`), "—", "a one-provider class's withheld index")
	// The H100 SXM on-demand chart carries a point per day whose trades reach the threshold.
	h100 := page.Locator(`[data-testid="index-chart"][data-class="nvidia-h100-80gb-sxm:on-demand"]`)
	expectVisible(t, h100, "the H100 SXM on-demand chart")
	points, err := h100.Locator("svg circle").Count()
	if err != nil || points < 20 {
		t.Fatalf("the H100 chart has %d points (err %v), want a good share of 90 days", points, err)
	}
	bars, err := h100.Locator("svg .volume rect").Count()
	if err != nil || bars != points {
		t.Errorf("%d volume bars for %d index points (err %v)", bars, points, err)
	}
	box, err := h100.Locator("svg").BoundingBox()
	if err != nil || box == nil || box.Width < 300 || box.Height < 100 {
		t.Errorf("the chart is not drawn at a readable size: %+v %v", box, err)
	}
	title, err := h100.Locator("svg title").First().TextContent()
	if err != nil || title != "H100 80GB SXM, on-demand · All regions" {
		t.Errorf("chart title %q (%v)", title, err)
	}
	// The summary lists the class with its last index and current asks.
	row := page.Locator(`[data-testid="market-row"][data-class="nvidia-h100-80gb-sxm:on-demand"]`)
	expectText(t, row, "$2.19", "the H100 ask minimum (the demo's cheapest H100 SXM)")
	// The data-table fallback opens and shows the same number of days.
	click(t, h100.Locator("summary"), "the data table toggle")
	rows, err := h100.GetByTestId("chart-table").Locator("tbody tr").Count()
	if err != nil || rows != points {
		t.Errorf("the data table has %d rows for %d points (%v)", rows, points, err)
	}
	shot(t, page, "market")

	// In Europe every class has one demo provider: its trades count only in all regions.
	gotoOK(t, page, srv.URL+"/market?region=Europe&days=30")
	expectText(t, page.Locator(`[data-testid="market-row"][data-class="nvidia-h100-80gb-sxm:on-demand"]`), "—", "Europe's withheld H100 index")
	if err := expect.Locator(page.GetByTestId("index-chart")).ToHaveCount(0); err != nil {
		t.Errorf("a European chart is published from one provider's trades: %v", err)
	}

	gotoOK(t, page, srv.URL+"/market/methodology")
	expectVisible(t, page.GetByTestId("carbon-profiles"), "the carbon profiles table")
	expectText(t, page.GetByTestId("index-threshold"), "at least 3 trades from at least 2 buyers and 2 providers", "the methodology's rule")
	shot(t, page, "methodology")

	// A quote shows estimated emissions; a carbon-aware start says what it saves and costs.
	gotoOK(t, page, srv.URL+"/requests?workload.kind=training&workload.devices=8&workload.hours=4"+
		"&constraints.families=H100&preferences.cost_weight=100&preferences.carbon_aware_start=1")
	quote := page.GetByTestId("quote").First()
	expectVisible(t, quote, "an H100 quote")
	expectText(t, quote.GetByTestId("quote-emissions"), "kg CO2e", "the quote's emissions")
	emissions, err := quote.GetByTestId("quote-emissions").TextContent()
	if err != nil {
		t.Fatal(err)
	}
	kg, err := strconv.ParseFloat(firstField(emissions), 64)
	if err != nil || kg <= 0 {
		t.Errorf("emissions %q do not start with a positive number of kg", emissions)
	}
	expectText(t, quote.GetByTestId("carbon-shift"), "later saves", "the carbon-aware start in Virginia (PJM profile)")
	shot(t, page, "quote")
}

func firstField(s string) string {
	for i, r := range s {
		if r == ' ' {
			return s[:i]
		}
	}
	return s
}
