package market

import (
	"sort"
	"time"
)

// ForwardWeeks is how many weeks the forward curve covers: the current
// week and the eleven after it.
const ForwardWeeks = 12

// WeekStart returns Monday 00:00 UTC of the week t falls in.
func WeekStart(t time.Time) time.Time {
	d := Day(t)
	back := (int(d.Weekday()) + 6) % 7 // Monday 0 … Sunday 6
	return d.AddDate(0, 0, -back)
}

// ForwardWeek is one start week of one forward curve: what is asked for
// capacity that can start in the week, and what was traded for capacity
// that does.
type ForwardWeek struct {
	Start time.Time // Monday 00:00 UTC; the week is [Start, Start+7 days)

	// AskOffers is how many listed offers ask in the week (see
	// ForwardCurve for the rule), AskDevices how many devices they
	// offer in all, and AskMinCents the lowest price per device-hour
	// among them (0 when AskOffers is 0).
	AskOffers   int
	AskDevices  int
	AskMinCents Cents

	// Trades is how many booked pieces start in the week (0 when none
	// did or their figure is withheld, see ForwardCurve); VWAPCents is
	// their volume-weighted price per device-hour, Σ price ×
	// device-seconds / Σ device-seconds rounded half up once;
	// VolumeDeviceSeconds is Σ devices × delivery seconds; LowCents and
	// HighCents the lowest and highest price booked.
	Trades              int
	VWAPCents           Cents
	VolumeDeviceSeconds int64
	LowCents, HighCents Cents
}

// VolumeDeviceHours is the traded volume in whole device-hours, rounded
// half up.
func (w ForwardWeek) VolumeDeviceHours() int64 {
	return (w.VolumeDeviceSeconds + 1800) / 3600
}

// ForwardSeries is one class and region group's forward curve: always
// ForwardWeeks weeks, the current week first.
type ForwardSeries struct {
	Key   SeriesKey
	Weeks []ForwardWeek
}

// ForwardCurve computes the forward curves at now from the listed offers
// and the booked pieces, one per class and region group (plus one per
// class over AllRegions) that has an ask or a published trade in one of
// the ForwardWeeks weeks from WeekStart(now). Ordered like DailyIndex.
//
// Asks: an offer asks in week w, in each class of AsksFromOffer, when the
// part of its availability window that lies in the week and not before
// now — [max(w, now, AvailableFrom), min(w+7 days, AvailableUntil)) — is
// at least its minimum rental (at least one hour), so a booking of that
// length could start in the week. The offer counts with all its devices
// (Offer.Devices), whatever is already booked. Offers with an unknown
// region or a non-positive price are left out.
//
// Trades: a booked piece counts in the week its Start falls in, with
// weight devices × delivery seconds. A week's trade figure is published
// under the price index's rule (PublishedGroups, per class and week as
// per class and day there), so that no one party's price can be read
// from it; a withheld week shows no trades.
func ForwardCurve(now time.Time, offers []Offer, trades []Trade) []ForwardSeries {
	first := WeekStart(now)
	end := first.AddDate(0, 0, 7*ForwardWeeks)
	weekOf := func(t time.Time) int {
		if t.Before(first) || !t.Before(end) {
			return -1
		}
		return int(t.Sub(first) / (7 * 24 * time.Hour))
	}
	curves := map[SeriesKey]*ForwardSeries{}
	curve := func(k SeriesKey) *ForwardSeries {
		c := curves[k]
		if c == nil {
			c = &ForwardSeries{Key: k, Weeks: make([]ForwardWeek, ForwardWeeks)}
			for i := range c.Weeks {
				c.Weeks[i].Start = first.AddDate(0, 0, 7*i)
			}
			curves[k] = c
		}
		return c
	}

	for _, o := range offers {
		r, ok := FindRegion(o.RegionID)
		if !ok {
			continue
		}
		minRental := time.Duration(max(o.MinRentalHours, 1)) * time.Hour
		for i := range ForwardWeeks {
			ws := first.AddDate(0, 0, 7*i)
			from := maxTime(ws, maxTime(now, o.AvailableFrom))
			until := minTime(ws.AddDate(0, 0, 7), o.AvailableUntil)
			if until.Sub(from) < minRental {
				continue
			}
			for _, a := range AsksFromOffer(o) {
				if a.PriceCents <= 0 {
					continue
				}
				for _, g := range []string{r.Group, AllRegions} {
					w := &curve(SeriesKey{a.Class, g}).Weeks[i]
					if w.AskOffers == 0 || a.PriceCents < w.AskMinCents {
						w.AskMinCents = a.PriceCents
					}
					w.AskOffers++
					w.AskDevices += o.Devices()
				}
			}
		}
	}

	// The index's arithmetic and publication rule, with each piece dated
	// by the Monday of its start week instead of its booking day.
	var dated []Trade
	for _, t := range trades {
		i := weekOf(t.Start)
		if i < 0 {
			continue
		}
		t.BookedAt = first.AddDate(0, 0, 7*i)
		dated = append(dated, t)
	}
	for _, s := range DailyIndex(dated) {
		c := curve(s.Key)
		for _, p := range s.Points {
			w := &c.Weeks[weekOf(p.Day)]
			w.Trades, w.VWAPCents, w.VolumeDeviceSeconds = p.Trades, p.IndexCents, p.VolumeDeviceSeconds
			w.LowCents, w.HighCents = p.LowCents, p.HighCents
		}
	}

	out := make([]ForwardSeries, 0, len(curves))
	for _, c := range curves {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return seriesLess(out[i].Key, out[j].Key) })
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
