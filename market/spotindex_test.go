package market

import (
	"testing"
	"time"
)

// TestSpotIndex checks the spot series against figures worked by hand.
func TestSpotIndex(t *testing.T) {
	d1 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	h := func(day time.Time, hour int) time.Time { return day.Add(time.Duration(hour) * time.Hour) }
	d2 := d1.AddDate(0, 0, 1)
	cs := []SpotHourClearing{
		{OfferID: 1, AcceleratorID: "h100", Hour: h(d1, 10), PriceCents: 100, DevicesSold: 4},
		{OfferID: 2, AcceleratorID: "h100", Hour: h(d1, 10), PriceCents: 151, DevicesSold: 2},
		{OfferID: 1, AcceleratorID: "h100", Hour: h(d1, 11), PriceCents: 0, DevicesSold: 0, DevicesBid: 3}, // nothing sold: no price
		{OfferID: 1, AcceleratorID: "h100", Hour: h(d2, 3), PriceCents: 120, DevicesSold: 1},
		{OfferID: 3, AcceleratorID: "a100", Hour: h(d1, 23), PriceCents: 80, DevicesSold: 8},
	}
	got := SpotIndex(cs)
	if len(got) != 2 || got[0].AcceleratorID != "a100" || got[1].AcceleratorID != "h100" {
		t.Fatalf("series %+v", got)
	}
	a := got[0]
	if !a.LatestHour.Equal(h(d1, 23)) || a.LatestCents != 80 || a.LatestDevices != 8 || len(a.Days) != 1 || a.Days[0].DeviceHours != 8 {
		t.Fatalf("a100 %+v", a)
	}
	s := got[1]
	// Day 1: (100×4 + 151×2) / 6 = 702/6 = 117; day 2: 120.
	if len(s.Days) != 2 || s.Days[0].VWAPCents != 117 || s.Days[0].DeviceHours != 6 || s.Days[0].Clearings != 2 ||
		s.Days[0].LowCents != 100 || s.Days[0].HighCents != 151 || s.Days[1].VWAPCents != 120 || !s.Days[1].Day.Equal(d2) {
		t.Fatalf("h100 days %+v", s.Days)
	}
	if !s.LatestHour.Equal(h(d2, 3)) || s.LatestCents != 120 || s.LatestDevices != 1 {
		t.Fatalf("h100 latest %+v", s)
	}
	// Rounding once, half up: (100×1 + 101×1)/2 = 100.5 → 101.
	r := SpotIndex([]SpotHourClearing{{AcceleratorID: "x", Hour: d1, PriceCents: 100, DevicesSold: 1}, {OfferID: 2, AcceleratorID: "x", Hour: d1, PriceCents: 101, DevicesSold: 1}})
	if r[0].Days[0].VWAPCents != 101 || r[0].LatestCents != 101 {
		t.Fatalf("rounding %+v", r)
	}
}
