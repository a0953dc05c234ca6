package web

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// calendarDays is how far ahead an offer's availability calendar looks.
const calendarDays = 28

// calendarView is an offer's free devices on each of the next
// calendarDays days from today (UTC), counted node by node
// (market.FreeByDay), in weeks from Monday.
func calendarView(o market.Offer, cs []market.Commitment, now time.Time) views.AvailabilityCalendar {
	day0 := now.Truncate(24 * time.Hour)
	total := o.Devices()
	v := views.AvailabilityCalendar{
		Caption: fmt.Sprintf("Devices free all day (UTC), of %d, over the next %d days", total, calendarDays),
	}
	v.FreeNow, v.Level = freeNowLine(o, cs, now)
	for i := range 7 {
		d := time.Date(2024, 1, 1+i, 0, 0, 0, 0, time.UTC) // a Monday
		v.Weekdays = append(v.Weekdays, views.Weekday{Short: d.Format("Mon"), Long: d.Format("Monday")})
	}
	lead := (int(day0.Weekday()) + 6) % 7 // days since Monday
	week := make([]views.CalendarDay, lead)
	for i, a := range market.FreeByDay(o, cs, day0, calendarDays) {
		d := day0.AddDate(0, 0, i)
		cell := views.CalendarDay{Date: d.Format("2006-01-02"), Day: strconv.Itoa(d.Day()), Free: strconv.Itoa(a.Spread)}
		if i == 0 || d.Day() == 1 {
			cell.Day = d.Format("2 Jan")
		}
		open := d.AddDate(0, 0, 1).After(o.AvailableFrom) && d.Before(o.AvailableUntil)
		switch {
		case !open:
			cell.Level, cell.Free = "closed", "—"
			cell.Label = d.Format("Monday 2 January") + ": outside the offer's window"
		case a.Spread == total:
			cell.Level = "all"
			cell.Label = fmt.Sprintf("%s: all %d devices free", d.Format("Monday 2 January"), total)
		case a.Spread == 0:
			cell.Level = "none"
			cell.Label = d.Format("Monday 2 January") + ": fully booked"
		default:
			cell.Level = "some"
			cell.Label = fmt.Sprintf("%s: %d of %d devices free all day", d.Format("Monday 2 January"), a.Spread, total)
			if a.Gang < a.Spread {
				cell.Label += fmt.Sprintf(", at most %d on one node", a.Gang)
			}
		}
		week = append(week, cell)
		if len(week) == 7 {
			v.Weeks, week = append(v.Weeks, week), nil
		}
	}
	if len(week) > 0 {
		v.Weeks = append(v.Weeks, append(week, make([]views.CalendarDay, 7-len(week))...))
	}
	return v
}

// freeNowLine says what an offer has free now for its shortest rental
// (market.FreeNow), or from when it has some, with its level for styling:
// "all", "some", "none", or "later" before the offer's window opens.
func freeNowLine(o market.Offer, cs []market.Commitment, now time.Time) (string, string) {
	total := o.Devices()
	a := market.FreeNow(o, cs, now)
	switch {
	case a.Spread == total && total == 1:
		return "Its one device is free now", "all"
	case a.Spread == total:
		return fmt.Sprintf("All %d devices free now", total), "all"
	case a.Spread > 0:
		s := fmt.Sprintf("%d of %d devices free now", a.Spread, total)
		if a.Gang < a.Spread {
			s += fmt.Sprintf(" (at most %d on one node)", a.Gang)
		}
		return s, "some"
	}
	at, ok := market.NextFree(o, cs, now)
	switch {
	case !ok:
		return "Fully booked for the rest of its window", "none"
	case now.Before(o.AvailableFrom) && at.Equal(o.AvailableFrom):
		return "Available from " + formatTime(at), "later"
	}
	return "Fully booked now · free from " + formatTime(at), "none"
}

// freeWindowLine says what an offer has free in the catalogue filter's
// window, or "" without one.
func freeWindowLine(o market.Offer, cs []market.Commitment, w *market.FreeWindow, now time.Time) string {
	if w == nil {
		return ""
	}
	a, ok := market.FreeFor(o, cs, *w, now)
	from := w.From
	if from.Before(now) {
		from = now
	}
	hours := w.Hours
	if hours == 0 {
		hours = max(o.MinRentalHours, 1)
	}
	if !ok {
		return fmt.Sprintf("Not bookable from %s for %s", formatTime(from), plural(hours, "hour"))
	}
	return fmt.Sprintf("%d of %d devices free from %s for %s", a.Spread, o.Devices(), formatTime(from), plural(hours, "hour"))
}

// quoteOfferLink is "Quote this offer": the request builder pinned to the
// offer (market.Constraints.OfferIDs), asking for a node's devices as
// soon as possible for a day (within the offer's rental limits), so the
// quotes show at once and the buyer can change the rest.
func quoteOfferLink(o market.Offer, signedIn bool, now time.Time) views.OfferQuoteLink {
	v := defaultRequestValues(now)
	hours := max(24, o.MinRentalHours)
	if o.MaxRentalHours > 0 {
		hours = min(hours, o.MaxRentalHours)
	}
	v.Devices, v.MinPiece, v.Hours = strconv.Itoa(o.DevicesPerNode), "1", strconv.Itoa(hours)
	v.EarliestStart, v.Deadline = "", ""
	v.Offers = []string{strconv.FormatInt(o.ID, 10)}
	self := fmt.Sprintf("/offers/%d", o.ID)
	return views.OfferQuoteLink{SignedIn: signedIn, QuoteURL: "/requests?" + requestQuery(v), LoginURL: "/login?next=" + url.QueryEscape(self)}
}

// pinnedView names the offers a pinned request quotes, and the same
// request for any offer.
func (h *Handler) pinnedView(ctx context.Context, v *views.RequestBuilderView) {
	if len(v.Values.Offers) == 0 {
		return
	}
	for _, s := range v.Values.Offers {
		p := views.PinnedOffer{ID: s, Title: "offer " + s, URL: "/offers/" + s}
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			if l, err := h.db.FindOfferByID(ctx, id); err == nil && l.Offer.Listed() && !l.ProviderSuspended {
				p.Title = l.Offer.Title
			}
		} else {
			p.URL = "/"
		}
		v.Pinned = append(v.Pinned, p)
	}
	all := v.Values
	all.Offers = nil
	v.UnpinURL = "/requests?" + requestQuery(all)
}

// offerCommitments reads the commitments of a page of offers at once, so
// each card shows what its offer has free as booked now.
func (h *Handler) offerCommitments(ctx context.Context, ls []store.OfferListing, now time.Time) (map[int64][]market.Commitment, error) {
	ids := make([]int64, len(ls))
	for i, l := range ls {
		ids[i] = l.Offer.ID
	}
	return h.db.ListCommitmentsOfOffers(ctx, ids, now)
}
