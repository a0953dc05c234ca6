package market

import (
	"testing"
	"time"
)

func TestWeekStart(t *testing.T) {
	for _, tc := range []struct{ in, want time.Time }{
		{time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},  // Wednesday
		{time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},  // Monday midnight
		{time.Date(2026, 12, 6, 23, 59, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}, // Sunday night
		{time.Date(2027, 1, 1, 1, 0, 0, 0, time.FixedZone("x", 3*3600)), time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC)},
	} {
		if got := WeekStart(tc.in); !got.Equal(tc.want) || got.Location() != time.UTC {
			t.Errorf("WeekStart(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestForwardCurve checks every week of every curve against figures worked
// out by hand. now is Wednesday 2 December 2026, so the weeks start on
// Mondays from 30 November 2026 (week 0) to 15 February 2027 (week 11).
func TestForwardCurve(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	week := func(i int) time.Time { return time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC).AddDate(0, 0, 7*i) }
	const h100 = "nvidia-h100-80gb-sxm"
	onDemand := PriceClass{AcceleratorID: h100}
	interruptible := PriceClass{AcceleratorID: h100, Interruptible: true}
	na := func(c PriceClass) SeriesKey { return SeriesKey{c, "North America"} }
	all := func(c PriceClass) SeriesKey { return SeriesKey{c, AllRegions} }
	eu := func(c PriceClass) SeriesKey { return SeriesKey{c, "Europe"} }
	offer := func(region string, perNode, nodes int, price Cents, from, until time.Time, minRental int) Offer {
		return Offer{AcceleratorID: h100, RegionID: region, DevicesPerNode: perNode, Nodes: nodes, PriceCentsPerDeviceHour: price,
			AvailableFrom: from, AvailableUntil: until, MinRentalHours: minRental}
	}
	// A: 8 devices at $2.00, available from before now until 05:00 on the
	// Monday of week 3, minimum 4 h: weeks 0–2, and week 3 (5 h ≥ 4 h).
	a := offer("us-east-va", 8, 1, 200, now.Add(-48*time.Hour), week(3).Add(5*time.Hour), 4)
	// B: 2×2 devices at $1.80, interruptible at $0.90, from 22:00 on the
	// Sunday ending week 2, minimum 3 h: not week 2 (2 h), weeks 3–11.
	b := offer("us-west-or", 2, 2, 180, week(3).Add(-2*time.Hour), week(20), 3)
	b.Interruptible, b.InterruptibleCentsPerDH = true, 90
	// C: 2 hours left, minimum 3 h: never an ask.
	c := offer("eu-north-se", 8, 1, 300, now.Add(-time.Hour), now.Add(2*time.Hour), 3)
	// D: the last hour of week 0, no minimum stated (one hour counts).
	d := offer("eu-west-ie", 2, 1, 250, week(1).Add(-time.Hour), week(1), 0)
	// E: unknown region; F: no price. Neither asks.
	e := offer("mars-north", 8, 1, 100, now, week(20), 1)
	f := offer("us-east-va", 8, 1, 0, now, week(20), 1)

	trade := func(buyer, provider int64, acc string, devices int, start time.Time, hours int, price Cents) Trade {
		// Providers are users 101, 102…, never a buyer: no wash trades.
		return Trade{BookedAt: now.Add(-24 * time.Hour), BuyerID: buyer, ProviderID: 100 + provider, AcceleratorID: acc, RegionID: "us-east-va",
			Devices: devices, Start: start, End: start.Add(time.Duration(hours) * time.Hour), PriceCents: price}
	}
	// Week 3: three trades, two buyers, two providers — published.
	// Device-hours 2×3 = 6 at $2.00, 1×2 = 2 at $2.60, 4×1 = 4 at $1.80:
	// VWAP (1200 + 520 + 720) / 12 = 203.33 → 203; volume 12 device-hours.
	published := []Trade{
		trade(1, 1, h100, 2, week(3).Add(10*time.Hour), 3, 200),
		trade(2, 2, h100, 1, week(3).Add(6*24*time.Hour+22*time.Hour), 2, 260), // Sunday 22:00, runs into week 4: still week 3
		trade(1, 2, h100, 4, week(3), 1, 180),                                  // Monday 00:00 exactly
	}
	// Week 0 (started Tuesday, before now, still this week): three trades,
	// 1 device-hour each at 100, 101, 103: 304 / 3 = 101.33 → 101.
	thisWeek := []Trade{
		trade(1, 1, h100, 1, week(0).Add(25*time.Hour), 1, 100),
		trade(2, 2, h100, 1, week(0).Add(26*time.Hour), 1, 101),
		trade(2, 1, h100, 1, week(0).Add(27*time.Hour), 1, 103),
	}
	outside := []Trade{
		trade(1, 1, h100, 8, week(0).Add(-time.Hour), 10, 500), // started last week
		trade(2, 2, h100, 8, week(12), 10, 500),                // the week after the curve
	}
	// Week 5: one buyer's trade only, and an A100 trade alone: withheld.
	lone := []Trade{
		trade(1, 1, h100, 1, week(5), 1, 400),
		trade(1, 1, "nvidia-a100-80gb-sxm", 1, week(5), 1, 150),
	}

	type fw = ForwardWeek
	naOnDemand := map[int]fw{0: {AskOffers: 1, AskDevices: 8, AskMinCents: 200}, 1: {AskOffers: 1, AskDevices: 8, AskMinCents: 200},
		2: {AskOffers: 1, AskDevices: 8, AskMinCents: 200}, 3: {AskOffers: 2, AskDevices: 12, AskMinCents: 180}}
	for i := 4; i < 12; i++ {
		naOnDemand[i] = fw{AskOffers: 1, AskDevices: 4, AskMinCents: 180}
	}
	allOnDemand := map[int]fw{0: {AskOffers: 2, AskDevices: 10, AskMinCents: 200}}
	for i := 1; i < 12; i++ {
		allOnDemand[i] = naOnDemand[i]
	}
	intr := map[int]fw{}
	for i := 3; i < 12; i++ {
		intr[i] = fw{AskOffers: 1, AskDevices: 4, AskMinCents: 90}
	}
	withTrades := func(m map[int]fw) map[int]fw {
		out := map[int]fw{}
		for k, v := range m {
			out[k] = v
		}
		w := out[3]
		w.Trades, w.VWAPCents, w.VolumeDeviceSeconds, w.LowCents, w.HighCents = 3, 203, 12*3600, 180, 260
		out[3] = w
		w = out[0]
		w.Trades, w.VWAPCents, w.VolumeDeviceSeconds, w.LowCents, w.HighCents = 3, 101, 3*3600, 100, 103
		out[0] = w
		return out
	}
	tradesOnly := withTrades(map[int]fw{})

	for _, tc := range []struct {
		name   string
		offers []Offer
		trades []Trade
		want   map[SeriesKey]map[int]fw // weeks not named are empty
	}{
		{name: "nothing", want: map[SeriesKey]map[int]fw{}},
		{name: "asks", offers: []Offer{a, b, c, d, e, f}, want: map[SeriesKey]map[int]fw{
			na(onDemand): naOnDemand, all(onDemand): allOnDemand, eu(onDemand): {0: {AskOffers: 1, AskDevices: 2, AskMinCents: 250}},
			na(interruptible): intr, all(interruptible): intr,
		}},
		{name: "trades", trades: append(append(append(append([]Trade{}, published...), thisWeek...), outside...), lone...),
			want: map[SeriesKey]map[int]fw{na(onDemand): tradesOnly, all(onDemand): tradesOnly}},
		{name: "withheld only", trades: lone, want: map[SeriesKey]map[int]fw{}},
		{name: "asks and trades", offers: []Offer{a, b, c, d}, trades: append(append([]Trade{}, published...), thisWeek...),
			want: map[SeriesKey]map[int]fw{
				na(onDemand): withTrades(naOnDemand), all(onDemand): withTrades(allOnDemand),
				eu(onDemand): {0: {AskOffers: 1, AskDevices: 2, AskMinCents: 250}}, na(interruptible): intr, all(interruptible): intr,
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ForwardCurve(now, tc.offers, tc.trades)
			if len(got) != len(tc.want) {
				t.Fatalf("%d curves, want %d: %+v", len(got), len(tc.want), got)
			}
			for i, s := range got {
				if i > 0 && !seriesLess(got[i-1].Key, s.Key) {
					t.Errorf("curve %v before %v", got[i-1].Key, s.Key)
				}
				want, ok := tc.want[s.Key]
				if !ok {
					t.Errorf("unexpected curve %v", s.Key)
					continue
				}
				if len(s.Weeks) != ForwardWeeks {
					t.Fatalf("%v: %d weeks", s.Key, len(s.Weeks))
				}
				for j, w := range s.Weeks {
					exp := want[j]
					exp.Start = week(j)
					if w != exp {
						t.Errorf("%v week %d:\n got %+v\nwant %+v", s.Key, j, w, exp)
					}
				}
			}
		})
	}
}
