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
	o := Offer{ID: 1, DevicesPerNode: 4, Nodes: 1, Interruptible: true, InterruptibleCentsPerDH: 100, PreemptNoticeMins: 30,
		AvailableFrom: now.Add(-24 * time.Hour), AvailableUntil: now.Add(30 * 24 * time.Hour)}
	ok := SpotBid{Devices: 2, MaxCents: 150, FirstHour: time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC), LastHour: time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)}
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
