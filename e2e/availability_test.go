package e2e

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/playwright-community/playwright-go"
)

// Issue 17, "see what is free, and book from where you are": an offer's page draws its free
// devices per day on the server and quotes that offer for a signed-in buyer.

// calendarDays reads the offer page's calendar: free devices per day ("—" outside the offer's
// window), by date.
func calendarDays(t *testing.T, page playwright.Page) map[string]string {
	t.Helper()
	cells := page.GetByTestId("calendar-day")
	n, err := cells.Count()
	if err != nil || n != 28 {
		t.Fatalf("the calendar has %d days (%v), want 28", n, err)
	}
	out := map[string]string{}
	for i := range n {
		date, err1 := cells.Nth(i).GetAttribute("data-date")
		free, err2 := cells.Nth(i).GetAttribute("data-free")
		text, err3 := cells.Nth(i).Locator(".cal-free").TextContent()
		if err1 != nil || err2 != nil || err3 != nil {
			t.Fatalf("read calendar day %d: %v %v %v", i, err1, err2, err3)
		}
		if strings.TrimSpace(text) != free {
			t.Fatalf("day %s shows %q but says %q", date, text, free)
		}
		out[date] = free
	}
	return out
}

// reservedSpan reads "Reserved from … to …" from the flash.
func reservedSpan(t *testing.T, page playwright.Page) (time.Time, time.Time) {
	t.Helper()
	flash, err := page.GetByTestId("flash").TextContent()
	if err != nil {
		t.Fatalf("read the flash: %v", err)
	}
	m := regexp.MustCompile(`Reserved from (\d+ \w+ \d{4} \d\d:\d\d) UTC to (\d+ \w+ \d{4} \d\d:\d\d) UTC`).FindStringSubmatch(flash)
	if m == nil {
		t.Fatalf("the flash %q does not say the start and end", flash)
	}
	start, err1 := time.Parse("2 Jan 2006 15:04", m[1])
	end, err2 := time.Parse("2 Jan 2006 15:04", m[2])
	if err1 != nil || err2 != nil {
		t.Fatalf("the flash's times: %v %v", err1, err2)
	}
	return start, end
}

// TestQuoteThisOfferAndCalendarAfterBooking: a provider lists one node of 4 H100s; a visitor's
// offer page shows the calendar (all 4 free on each day of the window) and asks them to sign in
// to quote it; a buyer clicks "Quote this offer", lands on the request builder pinned to it,
// asks for 2 devices, gets quotes from that offer only and reserves one. Back on the offer page
// the calendar — drawn by the server, no script involved — shows 2 free on exactly the days the
// booking touches, the others unchanged; at 390 px it fits without sideways scrolling.
func TestQuoteThisOfferAndCalendarAfterBooking(t *testing.T) {
	srv := startServer(t)
	provider := newPage(t)
	signUp(t, provider, srv, "pia@free.test", "Pia Provider", "Free Compute", false, true)
	gotoOK(t, provider, srv.URL+"/provider/offers/new")
	o := quebecH100
	o.Title = "Calendar H100s"
	o.MemoryGB = "80"
	fillOffer(t, provider, o)
	click(t, provider.GetByTestId("offer-submit"), "submit the offer")
	expectText(t, provider.GetByTestId("flash"), "pending review", "flash after submitting")
	srv.createAdmin(t, "ops@free.test", "an admin password 123")
	admin := newPage(t)
	logIn(t, admin, srv, "ops@free.test", "an admin password 123")
	gotoOK(t, admin, srv.URL+"/admin/offers")
	click(t, admin.GetByTestId("review-row").Filter(playwright.LocatorFilterOptions{HasText: o.Title}).GetByTestId("approve"), "approve")

	// A visitor finds it in the catalogue and opens it.
	visitor := newPage(t)
	gotoOK(t, visitor, srv.URL+"/")
	card := visitor.GetByTestId("offer-card").Filter(playwright.LocatorFilterOptions{HasText: o.Title})
	expectVisible(t, card.GetByTestId("card-free"), "the card's free devices")
	click(t, card.GetByRole("link", playwright.LocatorGetByRoleOptions{Name: o.Title}), "the offer's title")
	expectVisible(t, visitor.GetByTestId("availability-calendar"), "the calendar")
	offerURL := visitor.URL()
	before := calendarDays(t, visitor)
	open := 0
	for date, free := range before {
		switch free {
		case "4":
			open++
		case "—":
		default:
			t.Fatalf("before any booking, %s shows %q free", date, free)
		}
	}
	if open < 27 {
		t.Fatalf("only %d of 28 days are in the offer's three-month window", open)
	}
	expectVisible(t, visitor.GetByTestId("quote-offer-login"), "Sign in to quote this offer")
	if n, _ := visitor.GetByTestId("quote-offer").Count(); n != 0 {
		t.Fatal(`a visitor is offered "Quote this offer"`)
	}

	buyer := newPage(t)
	signUp(t, buyer, srv, "bo@free.test", "Bo Buyer", "", true, false)
	gotoOK(t, buyer, offerURL)
	click(t, buyer.GetByTestId("quote-offer"), "Quote this offer")
	expectText(t, buyer.GetByTestId("pinned-offers"), "Quoting only "+o.Title, "the pinned notice")
	fill(t, field(buyer, "Devices"), "2")
	fill(t, field(buyer, "Duration (hours)"), "24")
	click(t, buyer.GetByTestId("get-quotes"), "Get quotes")
	quotes := buyer.GetByTestId("quote")
	expectVisible(t, quotes.First(), "the first quote")
	n, err := quotes.Count()
	if err != nil || n != 1 {
		t.Fatalf("%d quotes (%v), want 1 from the one offer", n, err)
	}
	// 2 devices × 24 hours × $3.17.
	expectText(t, quotes.First(), usd(2*24*priceCents), "the quote's amount")
	expectText(t, buyer.GetByTestId("pinned-offers"), o.Title, "the pinned notice with the quotes")
	shot(t, buyer, "pinned-quote")
	click(t, quotes.First().GetByTestId("reserve"), "Reserve")
	expectText(t, buyer.GetByTestId("reservation-state"), "held", "state after reserving")
	start, end := reservedSpan(t, buyer)
	if end.Sub(start) != 24*time.Hour {
		t.Fatalf("reserved %s – %s, want 24 hours", start, end)
	}

	// The held booking takes 2 of the node's 4 devices on every day it touches.
	gotoOK(t, visitor, offerURL)
	after := calendarDays(t, visitor)
	changed := 0
	for date, was := range before {
		d, _ := time.Parse("2006-01-02", date)
		touched := start.Before(d.AddDate(0, 0, 1)) && end.After(d)
		want := was
		if touched && was != "—" {
			n, _ := strconv.Atoi(was)
			want = strconv.Itoa(n - 2)
			changed++
		}
		if after[date] != want {
			t.Errorf("%s: %q free after the booking (was %q), want %q", date, after[date], was, want)
		}
	}
	if changed < 1 || changed > 2 {
		t.Errorf("the booking changed %d days, want the one or two it touches", changed)
	}
	label, _ := visitor.GetByTestId("calendar-day").Filter(playwright.LocatorFilterOptions{HasText: "2 of 4 devices free all day"}).First().GetAttribute("title")
	if !strings.Contains(label, "2 of 4 devices free all day") {
		t.Errorf("a booked day's label is %q", label)
	}
	shot(t, visitor, "calendar-after")

	phone := newPage(t, narrow)
	gotoOK(t, phone, offerURL)
	expectVisible(t, phone.GetByTestId("availability-calendar"), "the calendar on a phone")
	noHorizontalOverflow(t, phone, "the offer page on a phone")
	gotoOK(t, phone, srv.URL+"/")
	noHorizontalOverflow(t, phone, "the catalogue on a phone")
}
