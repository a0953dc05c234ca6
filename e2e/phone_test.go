package e2e

import (
	"testing"

	"github.com/playwright-community/playwright-go"
)

// TestPhoneResultsFirst is a buyer on a phone: after "Get quotes" the quotes come first — the first
// one starts on the first screen, above the form, with a link back to the form — and the
// reservation's pieces show price, amount and cancellation without scrolling sideways.
func TestPhoneResultsFirst(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t, narrow)
	const email = "buyer@demo.gpumarket.test"
	logIn(t, page, srv, email, demoPassword(t, srv, email))

	gotoOK(t, page, srv.URL+"/requests")
	selectOption(t, field(page, "Kind"), "Batch (loosely coupled, may be split)")
	fill(t, field(page, "Devices"), "12")
	fill(t, field(page, "Smallest piece (split jobs)"), "4")
	fill(t, field(page, "Duration (hours)"), "24")
	click(t, page.GetByTestId("get-quotes"), "Get quotes")

	first := page.GetByTestId("quote").First()
	expectVisible(t, first, "the first quote")
	quoteTop := top(t, first, "the first quote")
	if quoteTop >= float64(narrow.Height) {
		t.Errorf("the first quote starts %.0f px down, below the first %d px screen", quoteTop, narrow.Height)
	}
	if formTop := top(t, page.GetByTestId("request-form"), "the request form"); formTop <= quoteTop {
		t.Errorf("the request form (%.0f px) comes before the first quote (%.0f px)", formTop, quoteTop)
	}
	noHorizontalOverflow(t, page, "quotes on a phone")
	shot(t, page, "quotes-first")

	// The way back to the request is at the top of the quotes.
	change := page.GetByTestId("change-request")
	expectVisible(t, change, "the link to change the request")
	click(t, change, "Change the request")
	if err := expect.Locator(page.GetByTestId("request-form")).ToBeInViewport(); err != nil {
		t.Errorf("the link does not bring the form into view: %v", err)
	}

	click(t, first.GetByTestId("reserve"), "Reserve")
	expectText(t, page.GetByTestId("reservation-state"), "held", "state after reserving")
	pieces := page.GetByTestId("reservation-piece")
	expectVisible(t, pieces.First(), "the reservation's first piece")
	noHorizontalOverflow(t, page, "reservation on a phone")
	res, err := page.GetByTestId("reservation-pieces").Evaluate(`t => { const w = t.closest('.table-wrap'); return {sw: w.scrollWidth, cw: w.clientWidth} }`, nil)
	if err != nil {
		t.Fatalf("measure the pieces table: %v", err)
	}
	if m := res.(map[string]interface{}); toInt(m["sw"]) > toInt(m["cw"]) {
		t.Errorf("the pieces table scrolls sideways: %d px of content in %d px", toInt(m["sw"]), toInt(m["cw"]))
	}
	n, err := pieces.Count()
	if err != nil || n == 0 {
		t.Fatalf("count pieces: %d, %v", n, err)
	}
	for i := 0; i < n; i++ {
		for _, id := range []string{"piece-price", "piece-amount", "piece-cancellation"} {
			cell := pieces.Nth(i).GetByTestId(id)
			if err := expect.Locator(cell).ToBeInViewport(playwright.LocatorAssertionsToBeInViewportOptions{Ratio: playwright.Float(1)}); err != nil {
				if err := cell.ScrollIntoViewIfNeeded(); err != nil {
					t.Fatalf("scroll to %s: %v", id, err)
				}
			}
			box, err := cell.BoundingBox()
			if err != nil || box == nil {
				t.Fatalf("piece %d's %s has no box: %v", i+1, id, err)
			}
			if box.X < 0 || box.X+box.Width > float64(narrow.Width)+1 {
				t.Errorf("piece %d's %s spans %.0f–%.0f px, outside the %d px screen", i+1, id, box.X, box.X+box.Width, narrow.Width)
			}
		}
	}
	expectText(t, pieces.First().GetByTestId("piece-price"), "/device-hour", "the first piece's price")
	expectText(t, pieces.First().GetByTestId("piece-amount"), "$", "the first piece's amount")
	shot(t, page, "reservation-pieces")
}

// top is where an element starts, in CSS pixels from the top of the page.
func top(t *testing.T, l playwright.Locator, what string) float64 {
	t.Helper()
	v, err := l.Evaluate(`e => e.getBoundingClientRect().top + window.scrollY`, nil)
	if err != nil {
		t.Fatalf("measure %s: %v", what, err)
	}
	switch f := v.(type) {
	case float64:
		return f
	case int:
		return float64(f)
	}
	t.Fatalf("measure %s: %v", what, v)
	return 0
}
