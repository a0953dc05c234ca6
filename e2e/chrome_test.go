package e2e

import (
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// TestPhoneNavigationAndLists (issue 31, items 2 and 8): one navigation grouped by area — Rent,
// Exchange, Provide, Account — in <details> menus: a demo provider's top bar on a phone is a couple
// of lines, not 249 px of 14 links, and a demo buyer's fits one line at 1280 px. The provider's
// Hosts page stacks each cell's blocks on a phone, and the buyer's /reservations shows start, end
// and amount on the screen rather than behind a sideways scroll.
func TestPhoneNavigationAndLists(t *testing.T) {
	srv := startServer(t, withDemo())

	const provEmail = "nordic@demo.gpumarket.test"
	prov := newPage(t, narrow)
	logIn(t, prov, srv, provEmail, demoPassword(t, srv, provEmail))
	if h := height(t, prov.Locator("header.topbar"), "the provider's top bar"); h > 130 {
		t.Errorf("the provider's top bar is %.0f px tall on a phone, want at most 130", h)
	}
	noHorizontalOverflow(t, prov, "the provider's page on a phone")
	shot(t, prov, "provider-bar")

	// The Provide menu opens (no script needed: <details>) across the screen and leads to Hosts.
	click(t, prov.GetByTestId("nav-provide").Locator("summary"), "the Provide menu")
	hosts := prov.GetByTestId("nav-provide").GetByRole("link", playwright.LocatorGetByRoleOptions{Name: "Hosts"})
	expectVisible(t, hosts, "the Hosts link in the Provide menu")
	within(t, hosts, "the Hosts link")
	shot(t, prov, "provide-menu")
	click(t, hosts, "Hosts")
	expectURL(t, prov, srv.URL+"/provider/hosts")
	noHorizontalOverflow(t, prov, "the Hosts page on a phone")
	node := prov.GetByTestId("host-node").First()
	expectVisible(t, node, "the first node")
	within(t, node.GetByTestId("host-status"), "the node's status badge")
	// The token cell's note and its button stack, at full width, instead of squeezing side by side.
	tokenCell := node.Locator(`td[data-label="Host token"]`)
	note, button := box(t, tokenCell.Locator("div").First(), "the token note"), box(t, tokenCell.Locator("button").First(), "the token button")
	if button.Y < note.Y+note.Height-1 {
		t.Errorf("the token note (%.0f–%.0f px down) and its button (from %.0f px) sit side by side", note.Y, note.Y+note.Height, button.Y)
	}
	if note.Width < 250 {
		t.Errorf("the token note is %.0f px wide on a %d px phone", note.Width, narrow.Width)
	}
	shot(t, prov, "hosts")

	const buyerEmail = "buyer@demo.gpumarket.test"
	buyer := newPage(t, wide)
	logIn(t, buyer, srv, buyerEmail, demoPassword(t, srv, buyerEmail))
	if h := height(t, buyer.Locator("header.topbar"), "the buyer's top bar"); h > 64 {
		t.Errorf("the demo buyer's top bar is %.0f px tall at %d px (the navigation wraps)", h, wide.Width)
	}
	reserve(t, buyer, srv, 8, 2, time.Now().UTC().Truncate(time.Hour).Add(26*time.Hour))
	click(t, buyer.GetByTestId("nav-rent").Locator("summary"), "the Rent menu")
	click(t, buyer.GetByTestId("nav-rent").GetByRole("link", playwright.LocatorGetByRoleOptions{Name: "Reservations"}), "Reservations")
	expectURL(t, buyer, srv.URL+"/reservations")
	if err := buyer.SetViewportSize(narrow.Width, narrow.Height); err != nil {
		t.Fatal(err)
	}
	noHorizontalOverflow(t, buyer, "/reservations on a phone")
	row := buyer.GetByTestId("reservation-row").First()
	for _, id := range []string{"reservation-window", "reservation-amount"} {
		within(t, row.GetByTestId(id), "the first reservation's "+id)
	}
	res, err := buyer.GetByTestId("reservations").Evaluate(`t => { const w = t.closest('.table-wrap'); return {sw: w.scrollWidth, cw: w.clientWidth} }`, nil)
	if err != nil {
		t.Fatalf("measure the reservations table: %v", err)
	}
	if m := res.(map[string]interface{}); toInt(m["sw"]) > toInt(m["cw"]) {
		t.Errorf("the reservations table scrolls sideways: %d px of content in %d px", toInt(m["sw"]), toInt(m["cw"]))
	}
	shot(t, buyer, "reservations")
}

// box is an element's bounding box, scrolled into view.
func box(t *testing.T, l playwright.Locator, what string) *playwright.Rect {
	t.Helper()
	if err := l.ScrollIntoViewIfNeeded(); err != nil {
		t.Fatalf("scroll to %s: %v", what, err)
	}
	b, err := l.BoundingBox()
	if err != nil || b == nil {
		t.Fatalf("%s has no box: %v", what, err)
	}
	return b
}

// height is an element's height in CSS pixels.
func height(t *testing.T, l playwright.Locator, what string) float64 {
	t.Helper()
	return box(t, l, what).Height
}

// within fails the test when the element sticks out of the page's width.
func within(t *testing.T, l playwright.Locator, what string) {
	t.Helper()
	b := box(t, l, what)
	page, err := l.Page()
	if err != nil {
		t.Fatalf("the page of %s: %v", what, err)
	}
	w := page.ViewportSize().Width
	if b.X < 0 || b.X+b.Width > float64(w)+1 {
		t.Errorf("%s spans %.0f–%.0f px, outside the %d px screen", what, b.X, b.X+b.Width, w)
	}
}
