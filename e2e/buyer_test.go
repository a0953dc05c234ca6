package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/playwright-community/playwright-go"
)

// demoPassword returns the password the demo server printed for email.
func demoPassword(t *testing.T, srv *server, email string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(email) + `\s+password: (\S+)`).FindStringSubmatch(srv.output.String())
	if m == nil {
		t.Fatalf("the demo server did not print a password for %s; output:\n%s", email, srv.output)
	}
	return m[1]
}

// TestBuyerBuildsRequestRelaxesAndBooks is a buyer's whole path: build a request, read a quote's
// breakdown, tighten the price until nothing fits, apply a suggested relaxation with one click,
// reserve, and find the reservation held on its page and in the list.
func TestBuyerBuildsRequestRelaxesAndBooks(t *testing.T) {
	srv := startServer(t, withDemo())
	page := newPage(t)
	const email = "buyer@demo.gpumarket.test"
	logIn(t, page, srv, email, demoPassword(t, srv, email))

	gotoOK(t, page, srv.URL+"/requests")
	form := page.GetByTestId("request-form")
	expectVisible(t, form.GetByText("Must have", playwright.LocatorGetByTextOptions{Exact: playwright.Bool(true)}), "the must-have group")
	expectVisible(t, form.GetByText("Prefer (weights 0–100)"), "the preferences group")
	selectOption(t, field(page, "Kind"), "Training (tightly coupled, one gang)")
	fill(t, field(page, "Devices"), "2")
	fill(t, field(page, "Duration (hours)"), "12")
	click(t, page.GetByTestId("get-quotes"), "Get quotes")

	quotes := page.GetByTestId("quote")
	first := quotes.First()
	expectVisible(t, first, "the first quote")
	breakdown := first.GetByTestId("breakdown")
	for _, item := range []string{"Instance", "Storage", "Egress", "Expected failed work", "Restarts"} {
		expectText(t, breakdown, item, "the first quote's breakdown")
	}
	expectText(t, first.GetByTestId("quote-emissions"), " CO2e", "the first quote's emissions (grams below a kilogram)")
	expectText(t, first.GetByTestId("quote-total"), "$", "the first quote's effective cost")
	if err := expect.Locator(first.GetByTestId("quote-piece")).ToContainText([]string{"2 ×"}); err != nil {
		t.Errorf("the first quote's piece is not for 2 devices: %v", err)
	}
	shot(t, page, "quotes")

	// No demo offer costs one cent per device-hour.
	fill(t, field(page, "Max price per device-hour ($)"), "0.01")
	click(t, page.GetByTestId("get-quotes"), "Get quotes")
	nothing := page.GetByTestId("no-quotes")
	expectText(t, nothing, "Nothing fits", "the empty quotes")
	expectText(t, nothing.GetByTestId("explanation"), "price", "the explanation")
	relax := nothing.GetByTestId("relaxation")
	expectVisible(t, relax.First(), "a suggested relaxation")
	if err := expect.Locator(quotes).ToHaveCount(0); err != nil {
		t.Errorf("quotes shown although nothing fits: %v", err)
	}
	shot(t, page, "nothing-fits")

	priceRelax := relax.Filter(playwright.LocatorFilterOptions{HasText: "price"}).First()
	suggestion, err := priceRelax.InnerText()
	if err != nil {
		t.Fatalf("read the price relaxation: %v", err)
	}
	click(t, priceRelax, "the price relaxation")
	expectVisible(t, quotes.First(), "a quote after relaxing the price")
	if v, err := field(page, "Max price per device-hour ($)").InputValue(); err != nil || v == "0.01" {
		t.Errorf("after %q the max price is %q (%v); want it raised", suggestion, v, err)
	}

	total, err := quotes.First().GetByTestId("quote-total").InnerText()
	if err != nil {
		t.Fatalf("read the quote's total: %v", err)
	}
	click(t, quotes.First().GetByTestId("reserve"), "Reserve")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`/reservations/\d+$`)); err != nil {
		t.Fatalf("not on the reservation's page after Reserve: %v", err)
	}
	expectText(t, page.GetByTestId("reservation-state"), "held", "the reservation's state")
	expectVisible(t, page.GetByTestId("hold-notice"), "the hold notice")
	expectVisible(t, page.GetByTestId("reservation-pieces"), "the reservation's pieces")
	if !strings.HasPrefix(total, "$") {
		t.Errorf("the quote's total %q is not in dollars", total)
	}
	shot(t, page, "reservation")

	gotoOK(t, page, srv.URL+"/reservations")
	row := page.GetByTestId("reservation-row")
	if err := expect.Locator(row).ToHaveCount(1); err != nil {
		t.Fatalf("reservations list: %v", err)
	}
	expectText(t, row.GetByTestId("reservation-state"), "held", "the listed reservation's state")
	shot(t, page, "reservations")
}

// TestBuyerBuilderWithoutJavaScript submits the builder as a plain form, with scripts off, and
// uses it on a phone without horizontal scrolling.
func TestBuyerBuilderWithoutJavaScript(t *testing.T) {
	srv := startServer(t, withDemo())
	bctx, err := env.browser.NewContext(playwright.BrowserNewContextOptions{
		JavaScriptEnabled: playwright.Bool(false),
		Viewport:          &playwright.Size{Width: wide.Width, Height: wide.Height},
		Locale:            playwright.String("en-GB"),
	})
	if err != nil {
		t.Fatalf("new browser context: %v", err)
	}
	defer bctx.Close()
	bctx.SetDefaultTimeout(defaultTimeout)
	page, err := bctx.NewPage()
	if err != nil {
		t.Fatalf("new page: %v", err)
	}
	gotoOK(t, page, srv.URL+"/requests")
	fill(t, field(page, "Devices"), "4")
	fill(t, field(page, "Duration (hours)"), "24")
	click(t, page.GetByTestId("get-quotes"), "Get quotes")
	if err := expect.Page(page).ToHaveURL(regexp.MustCompile(`/requests\?.*workload\.devices=4`)); err != nil {
		t.Errorf("the plain submit did not put the request in the URL: %v", err)
	}
	expectVisible(t, page.GetByTestId("quote").First(), "a quote without JavaScript")
	expectText(t, page.GetByTestId("quote").First().GetByTestId("breakdown"), "Expected failed work", "the breakdown without JavaScript")
	// Not signed in: booking asks to log in.
	expectVisible(t, page.GetByRole("link", playwright.PageGetByRoleOptions{Name: "Log in to reserve"}).First(), "the log-in link on a quote")
	shot(t, page, "no-js")

	phone := newPage(t, narrow)
	gotoOK(t, phone, srv.URL+"/requests")
	noHorizontalOverflow(t, phone, "request builder")
	fill(t, field(phone, "Devices"), "4")
	click(t, phone.GetByTestId("get-quotes"), "Get quotes")
	expectVisible(t, phone.GetByTestId("quote").First(), "a quote on a phone")
	noHorizontalOverflow(t, phone, "quotes on a phone")
	fill(t, field(phone, "Max price per device-hour ($)"), "0.01")
	click(t, phone.GetByTestId("get-quotes"), "Get quotes")
	expectVisible(t, phone.GetByTestId("no-quotes"), "nothing fits on a phone")
	noHorizontalOverflow(t, phone, "nothing fits on a phone")
}
