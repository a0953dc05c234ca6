package market

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// FreeWindow is "available from … for … hours" of a catalogue search: an
// offer passes when it can be booked from From for Hours with devices free
// on its nodes throughout.
type FreeWindow struct {
	// From is when the devices are wanted; zero means now, and a time
	// before now counts from now.
	From time.Time
	// Hours is for how long; 0 means each offer's shortest rental (at
	// least an hour), as FreeNow counts.
	Hours int

	// fromSet and hoursSet say which of the two a search named, so each is
	// named once.
	fromSet, hoursSet bool
}

// window is the interval w asks of offer at now, and whether the offer
// rents for that long.
func (w FreeWindow) window(o Offer, now time.Time) (from, to time.Time, ok bool) {
	from = w.From
	if from.Before(now) {
		from = now
	}
	h := w.Hours
	if h == 0 {
		h = max(o.MinRentalHours, 1)
	}
	rents := h >= o.MinRentalHours && (o.MaxRentalHours <= 0 || h <= o.MaxRentalHours)
	return from, from.Add(time.Duration(h) * time.Hour), rents
}

// FreeFor is what offer has free throughout w at now beside the
// commitments cs, node by node (FreeDevices), and false when the offer
// cannot be booked for that window at all: outside its availability
// window, or shorter or longer than it rents for.
func FreeFor(o Offer, cs []Commitment, w FreeWindow, now time.Time) (Availability, bool) {
	from, to, rents := w.window(o, now)
	a := FreeDevices(o, cs, from, to)
	if !rents || from.Before(o.AvailableFrom) || to.After(o.AvailableUntil) {
		return a, false
	}
	return a, true
}

// FreeAdmits reports whether offer, with the commitments cs, passes the
// search's free window at now: it can be booked for the window and has
// devices free on its nodes throughout it, at least the search's minimum
// devices (devices>=8 with a window asks for 8 free), and at least one.
// A search without a window admits every offer.
func (s OfferSearch) FreeAdmits(o Offer, cs []Commitment, now time.Time) bool {
	if s.Free == nil {
		return true
	}
	a, ok := FreeFor(o, cs, *s.Free, now)
	return ok && int64(a.Spread) >= max(s.Devices.Min, 1)
}

// NextFree is the earliest start, at or after now, from which offer has at
// least one device free for its shortest rental (FreeNow's window), and
// false when there is none left in its availability window. As in the
// matcher, only the lower bound (now, or the window's opening) and the
// ends of commitments are candidates: moving a start back to the previous
// such point adds no commitment.
func NextFree(o Offer, cs []Commitment, now time.Time) (time.Time, bool) {
	d := time.Duration(max(o.MinRentalHours, 1)) * time.Hour
	lo := now
	if lo.Before(o.AvailableFrom) {
		lo = o.AvailableFrom
	}
	starts := []time.Time{lo}
	for _, c := range cs {
		if c.OfferID == o.ID && c.End.After(lo) {
			starts = append(starts, c.End)
		}
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for _, t := range starts {
		if t.Add(d).After(o.AvailableUntil) {
			break
		}
		if FreeDevices(o, cs, t, t.Add(d)).Spread > 0 {
			return t, true
		}
	}
	return time.Time{}, false
}

// freeFromLayouts are the ways a query or the filter form writes when
// devices are wanted, all UTC.
var freeFromLayouts = []string{"2006-01-02", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02T15:04:05",
	"2006-01-02 15:04:05", time.RFC3339}

// applyFree narrows the search by "available = when" or "hours = how long".
func (s *OfferSearch) applyFree(f queryField, c Condition) error {
	if c.Op.Text != "=" {
		return queryErr(c.Op, "an operator for "+c.Field.Text+": "+f.ops())
	}
	v := c.Values[0]
	w := FreeWindow{}
	if s.Free != nil {
		w = *s.Free
	}
	if f.kind == kindFreeFrom {
		if w.fromSet {
			return queryErr(v, "one time for "+f.name+" (it is named twice)")
		}
		text := strings.TrimSpace(v.Text)
		if !strings.EqualFold(text, "now") {
			var t time.Time
			var err error
			for _, layout := range freeFromLayouts {
				if t, err = time.ParseInLocation(layout, text, time.UTC); err == nil {
					break
				}
			}
			if err != nil || t.Year() < 2000 || t.Year() > 2100 {
				return queryErr(v, f.expected)
			}
			w.From = t.UTC()
		}
		w.fromSet = true
	} else {
		if w.hoursSet {
			return queryErr(v, "one duration for "+f.name+" (it is named twice)")
		}
		num, den, err := parseQuantity(f, v)
		if err != nil {
			return err
		}
		if num%den != 0 || num/den < 1 || num/den > MaxRequestHours {
			return queryErr(v, fmt.Sprintf("a whole number of hours from 1 to %d", MaxRequestHours))
		}
		w.Hours, w.hoursSet = int(num/den), true
	}
	s.Free = &w
	return nil
}
