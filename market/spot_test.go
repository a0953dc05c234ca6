package market

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestSpotClearExamples checks hand-worked clearings.
func TestSpotClearExamples(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	bid := func(id int64, devices int, max Cents, placedMin int) SpotBid {
		return SpotBid{ID: id, Devices: devices, MaxCents: max, PlacedAt: t0.Add(time.Duration(placedMin) * time.Minute)}
	}
	tests := []struct {
		name     string
		floor    Cents
		capacity int
		bids     []SpotBid
		price    Cents
		sold     int
		bid      int
		wins     []int64
	}{
		{"nobody bids", 100, 8, nil, 0, 0, 0, nil},
		{"all fit: the floor", 100, 8, []SpotBid{bid(1, 4, 300, 0), bid(2, 4, 150, 1)}, 100, 8, 8, []int64{1, 2}},
		{"below the floor never wins", 100, 8, []SpotBid{bid(1, 2, 99, 0), bid(2, 2, 120, 1)}, 100, 2, 2, []int64{2}},
		// 8 devices: 300×4 and 200×4 win, 150×2 loses: price is the lowest winner's max, 200.
		{"outbid: lowest winning bid", 100, 8, []SpotBid{bid(1, 4, 200, 0), bid(2, 2, 150, 1), bid(3, 4, 300, 2)}, 200, 8, 10, []int64{3, 1}},
		// 6 devices: 300×4 wins, 250×4 does not fit, 120×2 fits: price 120.
		{"skip a bid that does not fit", 100, 6, []SpotBid{bid(1, 4, 300, 0), bid(2, 4, 250, 1), bid(3, 2, 120, 2)}, 120, 6, 10, []int64{1, 3}},
		// Equal maxima: earlier placement first; equal time: lower id.
		{"time priority", 100, 4, []SpotBid{bid(5, 4, 200, 3), bid(4, 4, 200, 1), bid(3, 4, 200, 1)}, 200, 4, 12, []int64{3}},
		{"no capacity", 100, 0, []SpotBid{bid(1, 1, 500, 0)}, 0, 0, 1, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := ClearSpot(tc.floor, tc.capacity, tc.bids)
			if c.PriceCents != tc.price || c.DevicesSold != tc.sold || c.DevicesBid != tc.bid || c.Capacity != tc.capacity {
				t.Errorf("price %s sold %d bid %d capacity %d; want %s %d %d %d", c.PriceCents, c.DevicesSold, c.DevicesBid, c.Capacity, tc.price, tc.sold, tc.bid, tc.capacity)
			}
			if len(c.Wins) != len(tc.wins) {
				t.Fatalf("wins %v, want %v", c.Wins, tc.wins)
			}
			for i, w := range c.Wins {
				if w.BidID != tc.wins[i] {
					t.Errorf("win %d is bid %d, want %d", i, w.BidID, tc.wins[i])
				}
			}
		})
	}
}

// TestSpotClearProperties checks the clearing rule's properties on random
// books against a reference that ranks the bids and walks the capacity
// itself: uniform price for all winners; the highest bids win (every
// loser is below the floor or did not fit what the higher-ranked winners
// left); no winner pays above its maximum; the price is never below the
// floor; no more devices sold than on sale.
func TestSpotClearProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 2026))
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for iter := 0; iter < 20000; iter++ {
		floor := Cents(1 + rng.IntN(500))
		capacity := rng.IntN(33)
		n := rng.IntN(12)
		bids := make([]SpotBid, n)
		for i := range bids {
			bids[i] = SpotBid{ID: int64(i + 1 + rng.IntN(3)*100), Devices: 1 + rng.IntN(10),
				MaxCents: Cents(1 + rng.IntN(900)), PlacedAt: t0.Add(time.Duration(rng.IntN(5)) * time.Minute)}
			if rng.IntN(4) == 0 && i > 0 { // ties in price
				bids[i].MaxCents = bids[rng.IntN(i)].MaxCents
			}
		}
		c := ClearSpot(floor, capacity, bids)

		byID := map[int64]SpotBid{}
		for _, b := range bids {
			byID[b.ID] = b
		}
		won := map[int64]bool{}
		sold := 0
		var lowest Cents = -1
		for _, w := range c.Wins {
			b, ok := byID[w.BidID]
			if !ok || won[w.BidID] {
				t.Fatalf("iter %d: unknown or repeated winner %d", iter, w.BidID)
			}
			won[w.BidID] = true
			if w.Devices != b.Devices {
				t.Fatalf("iter %d: bid %d got %d of %d devices (all or nothing)", iter, b.ID, w.Devices, b.Devices)
			}
			if b.MaxCents < c.PriceCents {
				t.Fatalf("iter %d: bid %d pays %s above its maximum %s", iter, b.ID, c.PriceCents, b.MaxCents)
			}
			if b.MaxCents < floor {
				t.Fatalf("iter %d: bid %d below the floor won", iter, b.ID)
			}
			sold += b.Devices
			if lowest < 0 || b.MaxCents < lowest {
				lowest = b.MaxCents
			}
		}
		if sold != c.DevicesSold || sold > capacity {
			t.Fatalf("iter %d: sold %d (reported %d) of capacity %d", iter, sold, c.DevicesSold, capacity)
		}
		if len(c.Wins) > 0 && c.PriceCents < floor {
			t.Fatalf("iter %d: price %s below the floor %s", iter, c.PriceCents, floor)
		}
		// Reference ranking: a ranks before b.
		before := func(a, b SpotBid) bool {
			if a.MaxCents != b.MaxCents {
				return a.MaxCents > b.MaxCents
			}
			if !a.PlacedAt.Equal(b.PlacedAt) {
				return a.PlacedAt.Before(b.PlacedAt)
			}
			return a.ID < b.ID
		}
		eligible, allWon, bid := 0, true, 0
		for _, l := range bids {
			if l.MaxCents < floor {
				continue
			}
			eligible++
			bid += l.Devices
			if won[l.ID] {
				continue
			}
			allWon = false
			// A loser did not fit the capacity left by the winners ranked above it.
			left := capacity
			for _, w := range bids {
				if won[w.ID] && before(w, l) {
					left -= w.Devices
				}
			}
			if l.Devices <= left {
				t.Fatalf("iter %d: bid %d (%d devices at %s) lost with %d devices left above it", iter, l.ID, l.Devices, l.MaxCents, left)
			}
		}
		if bid != c.DevicesBid {
			t.Fatalf("iter %d: devices bid %d, want %d", iter, c.DevicesBid, bid)
		}
		var want Cents
		switch {
		case len(c.Wins) == 0:
			want = 0
		case allWon:
			want = floor
		default:
			want = lowest
		}
		if c.PriceCents != want {
			t.Fatalf("iter %d: price %s, want %s (eligible %d, winners %d)", iter, c.PriceCents, want, eligible, len(c.Wins))
		}
		// The provider never receives less than the floor per device-hour sold.
		if got := c.PriceCents * Cents(c.DevicesSold); got < floor*Cents(c.DevicesSold) {
			t.Fatalf("iter %d: provider gets %s for %d devices, under the floor", iter, got, c.DevicesSold)
		}
	}
}

func TestSpotCapacity(t *testing.T) {
	h := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	o := Offer{ID: 7, DevicesPerNode: 4, Nodes: 2}
	c := func(node, devices int, from, to time.Duration) Commitment {
		return Commitment{OfferID: 7, Devices: devices, Start: h.Add(from), End: h.Add(to), Nodes: []NodeShare{{Node: node, Devices: devices}}}
	}
	tests := []struct {
		name string
		cs   []Commitment
		want int
	}{
		{"empty", nil, 8},
		{"whole hour on node 0", []Commitment{c(0, 3, 0, time.Hour)}, 5},
		{"ends at the hour's start", []Commitment{c(0, 4, -time.Hour, 0)}, 8},
		{"starts at the hour's end", []Commitment{c(1, 4, time.Hour, 2*time.Hour)}, 8},
		{"two halves on one node do not add", []Commitment{c(0, 2, 0, 30*time.Minute), c(0, 3, 30*time.Minute, time.Hour)}, 5},
		{"overlap on one node adds", []Commitment{c(0, 2, 0, 40*time.Minute), c(0, 1, 20*time.Minute, time.Hour)}, 5},
		{"another offer", []Commitment{{OfferID: 8, Devices: 4, Start: h, End: h.Add(time.Hour), Nodes: []NodeShare{{Node: 0, Devices: 4}}}}, 8},
		{"both nodes partly", []Commitment{c(0, 4, 50*time.Minute, 3*time.Hour), c(1, 1, -time.Hour, 5*time.Minute)}, 3},
	}
	for _, tc := range tests {
		if got := SpotCapacity(o, tc.cs, h); got != tc.want {
			t.Errorf("%s: capacity %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSpotInterruptionPPM(t *testing.T) {
	tests := []struct{ run, pre, want int }{
		{0, 0, 0}, {23, 5, 0}, {24, 0, 1}, {24, 6, 250000}, {100, 1, 10000}, {48, 48, 1_000_000},
	}
	for _, tc := range tests {
		if got := SpotInterruptionPPM(tc.run, tc.pre); got != tc.want {
			t.Errorf("SpotInterruptionPPM(%d, %d) = %d, want %d", tc.run, tc.pre, got, tc.want)
		}
	}
}

func TestValidateSpotBid(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 20, 0, 0, time.UTC)
	o := Offer{ID: 1, ProviderID: 7, DevicesPerNode: 4, Nodes: 1, PriceCentsPerDeviceHour: 200, Interruptible: true, InterruptibleCentsPerDH: 100,
		PreemptNoticeMins: 30, AvailableFrom: now.Add(-24 * time.Hour), AvailableUntil: now.Add(30 * 24 * time.Hour)}
	ok := SpotBid{BuyerID: 8, Devices: 2, MaxCents: 150, FirstHour: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), LastHour: time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)}
	tests := []struct {
		name  string
		edit  func(b *SpotBid, o *Offer)
		field string
	}{
		{"valid", func(*SpotBid, *Offer) {}, ""},
		{"not interruptible", func(_ *SpotBid, o *Offer) { o.Interruptible = false }, "offer"},
		{"no devices", func(b *SpotBid, _ *Offer) { b.Devices = 0 }, "devices"},
		{"too many devices", func(b *SpotBid, _ *Offer) { b.Devices = 5 }, "devices"},
		{"below the floor", func(b *SpotBid, _ *Offer) { b.MaxCents = 99 }, "max_price"},
		{"not a whole hour", func(b *SpotBid, _ *Offer) { b.FirstHour = b.FirstHour.Add(time.Minute) }, "first_hour"},
		// 10:20 is past 11:00 less 60 minutes' notice.
		{"bidding closed", func(_ *SpotBid, o *Offer) { o.PreemptNoticeMins = 60 }, "first_hour"},
		{"last before first", func(b *SpotBid, _ *Offer) { b.LastHour = b.FirstHour.Add(-time.Hour) }, "last_hour"},
		{"over 7 days", func(b *SpotBid, _ *Offer) { b.LastHour = b.FirstHour.Add(168 * time.Hour) }, "last_hour"},
		{"7 days exactly", func(b *SpotBid, _ *Offer) { b.LastHour = b.FirstHour.Add(167 * time.Hour) }, ""},
		// The ceiling is 3 × the 200¢ on-demand price: 600¢.
		{"9×10¹⁸¢", func(b *SpotBid, _ *Offer) { b.MaxCents, b.ConfirmAboveOnDemand = 9_000_000_000_000_000_000, true }, "max_price"},
		{"one cent above the ceiling", func(b *SpotBid, _ *Offer) { b.MaxCents, b.ConfirmAboveOnDemand = 601, true }, "max_price"},
		{"at the ceiling, confirmed", func(b *SpotBid, _ *Offer) { b.MaxCents, b.ConfirmAboveOnDemand = 600, true }, ""},
		{"500.00 on a 0.55 offer", func(b *SpotBid, o *Offer) {
			o.PriceCentsPerDeviceHour, o.InterruptibleCentsPerDH, b.MaxCents, b.ConfirmAboveOnDemand = 55, 30, 50_000, true
		}, "max_price"},
		{"above on-demand, not confirmed", func(b *SpotBid, _ *Offer) { b.MaxCents = 201 }, "confirm_above_on_demand"},
		{"above on-demand, confirmed", func(b *SpotBid, _ *Offer) { b.MaxCents, b.ConfirmAboveOnDemand = 201, true }, ""},
		{"at on-demand, no confirmation needed", func(b *SpotBid, _ *Offer) { b.MaxCents = 200 }, ""},
		{"own offer", func(b *SpotBid, _ *Offer) { b.BuyerID = 7 }, "offer"},
	}
	for _, tc := range tests {
		b, oo := ok, o
		tc.edit(&b, &oo)
		err := ValidateSpotBid(&b, oo, now)
		fields := FieldErrors(err)
		if tc.field == "" && err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.field != "" && fields[tc.field] == "" {
			t.Errorf("%s: no message for %s (got %v)", tc.name, tc.field, fields)
		}
	}
}

func TestSpotQuotePrice(t *testing.T) {
	for _, c := range []struct{ floor, onDemand, last, want Cents }{
		{100, 249, 0, 100},   // no clearing: the floor
		{100, 249, 150, 150}, // the latest clearing
		{100, 249, 90, 100},  // never below the floor
		{100, 249, 400, 249}, // never above on-demand
		{249, 249, 300, 249},
	} {
		if got := SpotQuotePrice(c.floor, c.onDemand, c.last); got != c.want {
			t.Errorf("SpotQuotePrice(%d, %d, %d) = %d, want %d", c.floor, c.onDemand, c.last, got, c.want)
		}
	}
}

// TestSpotHourDelivery: a won hour cleared late is delivered from the
// clearing time rounded up to the minute and charged for the minutes left,
// price × devices × minutes / 60 rounded half away from zero. Expected
// figures by hand.
func TestSpotHourDelivery(t *testing.T) {
	hour := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	at := func(h, m, s int) time.Time { return time.Date(2026, 12, 1, h, m, s, 0, time.UTC) }
	tests := []struct {
		name      string
		clearedAt time.Time
		price     Cents
		devices   int
		start     time.Time
		minutes   int
		amount    Cents
	}{
		// On time (01:30, 30 minutes' notice): the full hour, 130 × 3 = 390.
		{"on time", at(1, 30, 0), 130, 3, hour, 60, 390},
		{"at the hour's start", at(2, 0, 0), 130, 3, hour, 60, 390},
		// 02:40:00: 20 minutes, 390 × 20 / 60 = 130 exactly.
		{"02:40 on the minute", at(2, 40, 0), 130, 3, at(2, 40, 0), 20, 130},
		// 02:40:20 rounds up to 02:41: 19 minutes, 7,410 / 60 = 123.5 → 124.
		{"02:40:20 rounds up", at(2, 40, 20), 130, 3, at(2, 41, 0), 19, 124},
		// 02:00:01 → 02:01: 59 minutes of 4 × 55 = 220: 12,980 / 60 = 216.33 → 216.
		{"one second late", at(2, 0, 1), 55, 4, at(2, 1, 0), 59, 216},
		// 02:31: 29 minutes of 1 × 1¢: 29 / 60 = 0.48 → 0, charged the 1¢ minimum.
		{"under half a cent", at(2, 31, 0), 1, 1, at(2, 31, 0), 29, 1},
		// 02:30: 30 minutes of 1¢: 0.5 → 1 (half away from zero).
		{"half a cent", at(2, 30, 0), 1, 1, at(2, 30, 0), 30, 1},
		// 02:59:30 → 03:00: nothing left.
		{"last minute", at(2, 59, 30), 130, 3, at(3, 0, 0), 0, 0},
	}
	for _, tc := range tests {
		d, err := SpotHourDelivery(hour, tc.clearedAt, tc.price, tc.devices)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !d.Start.Equal(tc.start) || !d.End.Equal(hour.Add(time.Hour)) || d.Minutes != tc.minutes || d.AmountCents != tc.amount {
			t.Errorf("%s: %s–%s, %d minutes, %d¢; want from %s, %d minutes, %d¢", tc.name, d.Start, d.End, d.Minutes, d.AmountCents, tc.start, tc.minutes, tc.amount)
		}
	}
	// 3×10¹⁸¢ × 4 devices does not fit in an int64: an error, not a wrapped amount.
	if d, err := SpotHourDelivery(hour, hour, 3_000_000_000_000_000_000, 4); ErrorCode(err) != CodeInternal {
		t.Fatalf("overflowing hour: %+v, %v", d, err)
	}
}

// TestMulChecked: products that fit are exact; overflow and negatives are refused.
func TestMulChecked(t *testing.T) {
	for _, tc := range []struct {
		a, b int64
		want int64
		ok   bool
	}{
		{130, 3, 390, true},
		{0, 1 << 62, 0, true},
		{1 << 62, 1, 1 << 62, true},
		{1<<62 - 1, 2, 1<<63 - 2, true},
		{1 << 62, 2, 0, false},
		{3_000_000_000_000_000_000, 4, 0, false}, // the reported 4-device bid
		{-1, 5, 0, false},
	} {
		got, ok := MulChecked(tc.a, tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("MulChecked(%d, %d) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}

// TestSpotBidderBar: three unpaid holds (won spot hours among them) bar
// new bids and clearings; two lapses within 30 days bar them for 7 days
// after the latest.
func TestSpotBidderBar(t *testing.T) {
	now := time.Date(2026, 12, 10, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name   string
		held   int
		lapses []time.Time
		barred bool
	}{
		{"nothing", 0, nil, false},
		{"two holds", 2, nil, false},
		{"three holds", 3, nil, true},
		{"one lapse", 0, []time.Time{now.Add(-day)}, false},
		// 2 lapses 10 days apart, the latest 6 days ago: blocked until 1 day from now.
		{"two lapses, blocked", 0, []time.Time{now.Add(-16 * day), now.Add(-6 * day)}, true},
		// The latest 8 days ago: the 7-day block is over.
		{"two lapses, block over", 0, []time.Time{now.Add(-18 * day), now.Add(-8 * day)}, false},
		// 31 days apart: not within the window.
		{"two lapses far apart", 0, []time.Time{now.Add(-32 * day), now.Add(-1 * day)}, false},
	} {
		msg := SpotBidderBar(tc.held, tc.lapses, now)
		if (msg != "") != tc.barred {
			t.Errorf("%s: %q, want barred %v", tc.name, msg, tc.barred)
		}
	}
}

// TestSpotCardProblem: a card saved or charged within 30 days backs a bid;
// older than that it does not.
func TestSpotCardProblem(t *testing.T) {
	now := time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		name           string
		saved, charged time.Time
		ok             bool
	}{
		{"saved today", now, time.Time{}, true},
		{"saved 30 days ago", now.Add(-30 * day), time.Time{}, true},
		{"saved 31 days ago, never charged", now.Add(-31 * day), time.Time{}, false},
		{"saved long ago, charged last week", now.Add(-300 * day), now.Add(-7 * day), true},
		{"saved and charged long ago", now.Add(-300 * day), now.Add(-40 * day), false},
	} {
		m := PaymentMethod{Label: "Visa •••• 4242", CreatedAt: tc.saved, LastChargedAt: tc.charged}
		if msg := SpotCardProblem(m, now); (msg == "") != tc.ok {
			t.Errorf("%s: %q, want ok %v", tc.name, msg, tc.ok)
		}
	}
}

// TestSpotPreemptions: of the previous hour's winners that still want the
// hour, those that did not win it are preempted, with a zero-length,
// acknowledged preemption incident at the hour.
func TestSpotPreemptions(t *testing.T) {
	// 4 devices at floor 100: bids 1 (2 at 300), 2 (2 at 150), 3 (2 at 120).
	c := ClearSpot(100, 4, []SpotBid{{ID: 1, Devices: 2, MaxCents: 300}, {ID: 2, Devices: 2, MaxCents: 150}, {ID: 3, Devices: 2, MaxCents: 120}})
	if got := c.SpotPreemptions([]int64{2, 3}); len(got) != 1 || got[0] != 3 {
		t.Fatalf("preempted %v, want [3]", got)
	}
	if got := c.SpotPreemptions(nil); len(got) != 0 {
		t.Fatalf("preempted %v with no previous winners", got)
	}
	hour := time.Date(2026, 3, 2, 12, 0, 0, 0, time.UTC)
	inc := SpotPreemption(9, 2, hour, 30, 150)
	if inc.PieceID != 9 || inc.Kind != IncidentPreemption || !inc.Start.Equal(hour) || !inc.End.Equal(hour) || inc.DevicesAffected != 2 ||
		!inc.Acknowledged || inc.Note != SpotPreemptionNote(hour, 30, 150) {
		t.Fatalf("preemption incident %+v", inc)
	}
}
