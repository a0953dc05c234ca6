package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"
)

// TestCatalogueQueryLanguage: a power user types one line into the catalogue's query box; the
// URL holds it, the cards match it, and it combines with the filter form, whose own filter is shown
// as a query. Mistyped queries say where and what was expected, on a laptop and on a phone.
func TestCatalogueQueryLanguage(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t)
	gotoOK(t, page, srv.URL+"/")

	box := page.GetByTestId("query-input")
	cards := page.GetByTestId("offer-card")
	expectVisible(t, box, "the query box")

	// The demo lists two H100 offers with at least 16 devices: 2 × 8 in Virginia, 4 × 8 in Sweden.
	fill(t, box, "devices>=16 gpu_name=H100 dph<2.5")
	press(t, page, "Enter")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`[?&]q=devices%3E%3D16\+gpu_name%3DH100\+dph%3C2\.5(&|$)`)); err != nil {
		t.Errorf("the query is not in the URL: %v", err)
	}
	if err := expect.Locator(cards).ToHaveCount(2); err != nil {
		t.Fatalf("devices>=16 gpu_name=H100 dph<2.5: %v", err)
	}
	for _, want := range []string{"16 × H100 80GB SXM", "32 × H100 80GB SXM"} {
		expectText(t, page.GetByTestId("catalogue"), want, "the matching offers")
	}
	if err := expect.Locator(box).ToHaveValue("devices>=16 gpu_name=H100 dph<2.5"); err != nil {
		t.Errorf("the query box lost the query: %v", err)
	}

	// A list and units: H200 and B200 nodes have 141 GB or more per device and no inter-node network
	// (single node); the H200 pair runs InfiniBand.
	fill(t, box, `family in (H200, B200) memory>=0.14TB network>=400Gbps`)
	click(t, page.GetByTestId("query-submit"), "Search")
	if err := expect.Locator(cards).ToHaveCount(1); err != nil {
		t.Fatalf("the H200 pair on InfiniBand: %v", err)
	}
	expectText(t, cards.First(), "H200", "the H200 card")

	// The filter form is the same language: its filter is shown as a query that runs as one.
	gotoOK(t, page, srv.URL+"/")
	filters := page.GetByTestId("filters")
	selectOption(t, filters.GetByLabel("Family", playwright.LocatorGetByLabelOptions{Exact: playwright.Bool(true)}), "H100")
	fill(t, filters.GetByLabel("Max price per device-hour ($)"), "2.50")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	if err := expect.Locator(cards).ToHaveCount(2); err != nil {
		t.Fatalf("family H100 under $2.50 by the form: %v", err)
	}
	formCards, _ := cards.AllInnerTexts()
	formURL := page.URL()
	expectText(t, page.GetByTestId("form-query"), "family=H100 price<=2.50", "the form's filter as a query")
	click(t, page.GetByTestId("form-query").GetByRole("link"), "search with it")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`\?q=family%3DH100\+price%3C%3D2\.50$`)); err != nil {
		t.Errorf("the form's query link: %v", err)
	}
	if err := expect.Locator(cards).ToHaveCount(2); err != nil {
		t.Fatalf("the form's filter as a query: %v", err)
	}
	if queryCards, _ := cards.AllInnerTexts(); strings.Join(queryCards, "|") != strings.Join(formCards, "|") {
		t.Errorf("the query finds other offers than the form:\n%v\n%v", queryCards, formCards)
	}
	// Combined: the query keeps the form's fields and the form keeps the query.
	gotoOK(t, page, formURL)
	fill(t, box, "country!=US")
	press(t, page, "Enter")
	if err := expect.Locator(cards).ToHaveCount(1); err != nil {
		t.Fatalf("the query with the form's family: %v", err)
	}
	expectText(t, cards.First(), "Sweden", "the Swedish H100")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`[?&]family=H100&.*q=country%21%3DUS`)); err != nil {
		t.Errorf("the combined filter is not in the URL: %v", err)
	}
	if err := expect.Locator(page.GetByTestId("filters").Locator(`input[type=hidden][name=q]`)).ToHaveValue("country!=US"); err != nil {
		t.Errorf("the filter form does not carry the query: %v", err)
	}
	shot(t, page, "good-query")

	// Mistakes name the character, the token and what was expected, and no offers are shown.
	bad := []struct{ query, message string }{
		{"devices>=8 famly=H100", "At character 12, “famly”: expected a field name: model, family, vendor, memory"},
		{"memory>=80GiB", "At character 9, “80GiB”: expected an amount of memory, e.g. 80 or 80GB."},
		{"price<cheap", "At character 7, “cheap”: expected a price in dollars per device-hour"},
		{"family in (H100 H200)", "At character 17, “H200”: expected “,” and another value, or “)”"},
		{"H100", "At character 1, “H100”: expected a field name before the value, e.g. family=H100"},
	}
	for _, b := range bad {
		gotoOK(t, page, srv.URL+"/")
		fill(t, box, b.query)
		press(t, page, "Enter")
		expectText(t, page.GetByTestId("error-q"), b.message, "the error for "+b.query)
		expectText(t, page.GetByTestId("results-count"), "Filter not applied", "the results for "+b.query)
		if err := expect.Locator(cards).ToHaveCount(0); err != nil {
			t.Errorf("%s: offers shown beside the mistake: %v", b.query, err)
		}
		if err := expect.Locator(box).ToHaveValue(b.query); err != nil {
			t.Errorf("%s: the query box lost what was typed: %v", b.query, err)
		}
		if err := expect.Locator(box).ToHaveAttribute("aria-invalid", "true"); err != nil {
			t.Errorf("%s: the box is not marked invalid: %v", b.query, err)
		}
	}
	shot(t, page, "bad-query")

	// An unknown value in the form's own fields says so too.
	gotoOK(t, page, srv.URL+"/")
	fill(t, page.GetByTestId("filters").GetByLabel("Max price per device-hour ($)"), "cheap")
	click(t, page.GetByTestId("filter-submit"), "Apply")
	expectText(t, page.GetByTestId("error-max_price"), "Expected a price in dollars per device-hour, e.g. 2.50 or $2.50, not “cheap”.", "the price field's error")
	expectText(t, page.GetByTestId("filter-not-applied"), "Max price: Expected a price", "the summary above the results")

	// On a phone the query box comes before the results, in the first screen, and fits.
	phone := newPage(t, narrow)
	gotoOK(t, phone, srv.URL+"/?q=family%3DH100")
	pbox := phone.GetByTestId("query-input")
	expectVisible(t, pbox, "the query box on a phone")
	if bb, err := pbox.BoundingBox(); err != nil || bb == nil || bb.Y+bb.Height > float64(narrow.Height) || bb.Width < 200 {
		t.Errorf("the query box on a phone is at %+v (%v), want in the first screen and wide enough to type in", bb, err)
	}
	if err := expect.Locator(phone.GetByTestId("offer-card")).ToHaveCount(3); err != nil {
		t.Errorf("family=H100 on a phone: %v", err)
	}
	noHorizontalOverflow(t, phone, "the catalogue with a query on a phone")
	fill(t, pbox, "devices>=")
	press(t, phone, "Enter")
	expectText(t, phone.GetByTestId("error-q"), "At character 10, the end of the query: expected a number of devices", "the error on a phone")
	noHorizontalOverflow(t, phone, "the catalogue with a query error on a phone")
}
