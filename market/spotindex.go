package market

import (
	"sort"
	"time"
)

// SpotHourClearing is one offer-hour's published clearing (see ClearSpot).
type SpotHourClearing struct {
	OfferID       int64
	AcceleratorID string
	Hour          time.Time
	FloorCents    Cents
	PriceCents    Cents // 0 when nothing sold
	Capacity      int
	DevicesBid    int
	DevicesSold   int
}

// SpotDay is one day of a class's spot series: the clearings of the day's
// hours that sold devices.
type SpotDay struct {
	Day time.Time // 00:00 UTC
	// VWAPCents is Σ price × devices sold / Σ devices sold over the day's
	// offer-hours, rounded half up once (each sold device-hour weighs the
	// same); DeviceHours is Σ devices sold (each for one hour).
	VWAPCents           Cents
	DeviceHours         int64
	Clearings           int // offer-hours that sold devices
	LowCents, HighCents Cents
}

// SpotSeries is one accelerator's spot market over all regions: the latest
// hour that sold devices and the daily figures.
type SpotSeries struct {
	AcceleratorID string
	// LatestHour is the latest hour in which some offer of the class sold
	// devices; LatestCents the volume-weighted clearing price of that hour
	// over the class's offers (one offer: its clearing price), rounded half
	// up; LatestDevices the devices sold in it.
	LatestHour    time.Time
	LatestCents   Cents
	LatestDevices int
	Days          []SpotDay
}

// SpotIndex groups clearings by accelerator into spot series, by
// accelerator id; clearings that sold nothing add nothing (they are
// published per offer-hour, but have no price). Days are in order.
func SpotIndex(clearings []SpotHourClearing) []SpotSeries {
	type acc struct {
		num, devices int64
		n            int
		low, high    Cents
	}
	byClass := map[string]map[time.Time]*acc{}
	hours := map[string]map[time.Time]*acc{}
	for _, c := range clearings {
		if c.DevicesSold <= 0 {
			continue
		}
		for _, m := range []struct {
			into map[string]map[time.Time]*acc
			at   time.Time
		}{{byClass, Day(c.Hour)}, {hours, c.Hour.UTC()}} {
			if m.into[c.AcceleratorID] == nil {
				m.into[c.AcceleratorID] = map[time.Time]*acc{}
			}
			a := m.into[c.AcceleratorID][m.at]
			if a == nil {
				a = &acc{low: c.PriceCents, high: c.PriceCents}
				m.into[c.AcceleratorID][m.at] = a
			}
			a.num += int64(c.PriceCents) * int64(c.DevicesSold)
			a.devices += int64(c.DevicesSold)
			a.n++
			a.low, a.high = min(a.low, c.PriceCents), max(a.high, c.PriceCents)
		}
	}
	var out []SpotSeries
	for id, days := range byClass {
		s := SpotSeries{AcceleratorID: id}
		for d, a := range days {
			s.Days = append(s.Days, SpotDay{Day: d, VWAPCents: Cents(MulDivRound(a.num, 1, a.devices)), DeviceHours: a.devices,
				Clearings: a.n, LowCents: a.low, HighCents: a.high})
		}
		sort.Slice(s.Days, func(i, j int) bool { return s.Days[i].Day.Before(s.Days[j].Day) })
		for h, a := range hours[id] {
			if h.After(s.LatestHour) {
				s.LatestHour, s.LatestCents, s.LatestDevices = h, Cents(MulDivRound(a.num, 1, a.devices)), int(a.devices)
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AcceleratorID < out[j].AcceleratorID })
	return out
}
