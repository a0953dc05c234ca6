package market

import (
	"sort"
	"time"
)

// AllRegions is the region group of an index computed over every region.
const AllRegions = "All regions"

// PriceClass is a normalised accelerator class: one catalogue model, sold
// on demand or interruptible.
type PriceClass struct {
	AcceleratorID string
	Interruptible bool
}

// ID is the class's stable key, e.g. "nvidia-h100-80gb-sxm:on-demand".
func (c PriceClass) ID() string {
	if c.Interruptible {
		return c.AcceleratorID + ":interruptible"
	}
	return c.AcceleratorID + ":on-demand"
}

// Label is the display name, e.g. "H100 80GB SXM, on-demand".
func (c PriceClass) Label() string {
	a, ok := FindAccelerator(c.AcceleratorID)
	name := c.AcceleratorID
	if ok {
		name = a.Name
	}
	if c.Interruptible {
		return name + ", interruptible"
	}
	return name + ", on-demand"
}

// ParsePriceClass reads a class key made by ID.
func ParsePriceClass(s string) (PriceClass, bool) {
	for _, mode := range []struct {
		suffix string
		intr   bool
	}{{":on-demand", false}, {":interruptible", true}} {
		if n := len(s) - len(mode.suffix); n > 0 && s[n:] == mode.suffix {
			if _, ok := FindAccelerator(s[:n]); ok {
				return PriceClass{AcceleratorID: s[:n], Interruptible: mode.intr}, true
			}
		}
	}
	return PriceClass{}, false
}

// RegionGroups returns the region groups in catalogue order.
func RegionGroups() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range regions {
		if !seen[r.Group] {
			seen[r.Group] = true
			out = append(out, r.Group)
		}
	}
	return out
}

// Trade is one booked reservation piece as the price index sees it.
type Trade struct {
	BookedAt      time.Time // when the reservation was made: the trade date
	BuyerID       int64     // who booked, counted (never shown) to hide any one party
	ProviderID    int64     // whose offer, likewise
	AcceleratorID string
	RegionID      string
	Interruptible bool
	Devices       int
	Start, End    time.Time // the piece's delivery interval [Start, End)
	PriceCents    Cents     // per device-hour, as booked
}

// Wash reports whether the trade is a provider booking its own offer: it
// moves no capacity between parties and says nothing about the price, so
// the index (and the forward curve) leave it out.
func (t Trade) Wash() bool {
	return t.BuyerID != 0 && t.BuyerID == t.ProviderID
}

// Class is the trade's price class.
func (t Trade) Class() PriceClass {
	return PriceClass{AcceleratorID: t.AcceleratorID, Interruptible: t.Interruptible}
}

// DeviceSeconds is the trade's volume: devices × the delivery interval.
func (t Trade) DeviceSeconds() int64 {
	s := int64(t.End.Sub(t.Start) / time.Second)
	if s < 0 {
		s = 0
	}
	return int64(t.Devices) * s
}

// SeriesKey names one index series: a class in a region group (or
// AllRegions).
type SeriesKey struct {
	Class PriceClass
	Group string
}

// IndexPoint is one day of one series.
type IndexPoint struct {
	Day time.Time // 00:00 UTC of the trade date
	// IndexCents is the volume-weighted average price per device-hour:
	// Σ price × device-seconds / Σ device-seconds, rounded half up to a
	// whole cent once, at the end.
	IndexCents Cents
	// VolumeDeviceSeconds is Σ devices × delivery seconds of the day's
	// trades; VolumeDeviceHours rounds it half up for display.
	VolumeDeviceSeconds int64
	Trades              int
	LowCents, HighCents Cents // the day's lowest and highest trade price
}

// VolumeDeviceHours is the volume in whole device-hours, rounded half up.
func (p IndexPoint) VolumeDeviceHours() int64 {
	return (p.VolumeDeviceSeconds + 1800) / 3600
}

// Series is one class and region group's daily index, oldest day first.
type Series struct {
	Key    SeriesKey
	Points []IndexPoint
}

// Day returns 00:00 UTC of t's date.
func Day(t time.Time) time.Time {
	y, m, d := t.UTC().Date()
	return time.Date(y, m, d, 0, 0, 0, 0, time.UTC)
}

// A day's figure for a class and region group is published only when it
// aggregates enough trades, from enough parties on each side, that no one
// buyer's or provider's trade can be read from it.
const (
	IndexMinTrades    = 3
	IndexMinBuyers    = 2
	IndexMinProviders = 2
)

// DailyIndex computes the published series from trades: one per class and
// region group, plus one per class over AllRegions, with a point for each
// day whose figure hides who traded (see PublishedGroups); days that do not
// are withheld, and a series with no published day is left out. A trade
// counts on the UTC date it was booked, with weight devices × delivery
// seconds; trades with no volume, an unknown region or a non-positive price
// are left out, and so are wash trades (Trade.Wash). Series are ordered by class label, then group (AllRegions
// first); points by day.
func DailyIndex(trades []Trade) []Series {
	return dailyIndex(trades, true)
}

// GroupTrades is what the publication rule needs to know of one region
// group's trades in a class on a day.
type GroupTrades struct {
	Group             string
	Trades            int
	Buyers, Providers map[int64]bool
}

func (g GroupTrades) enough() bool {
	return g.Trades >= IndexMinTrades && len(g.Buyers) >= IndexMinBuyers && len(g.Providers) >= IndexMinProviders
}

func (g *GroupTrades) merge(o GroupTrades) {
	if g.Buyers == nil {
		g.Buyers, g.Providers = map[int64]bool{}, map[int64]bool{}
	}
	g.Trades += o.Trades
	for id := range o.Buyers {
		g.Buyers[id] = true
	}
	for id := range o.Providers {
		g.Providers[id] = true
	}
}

// PublishedGroups decides which of one class's figures for one day are
// published, given the day's trades per region group. A region group is
// published when its own trades are enough (IndexMinTrades from at least
// IndexMinBuyers buyers and IndexMinProviders providers); the others are
// merged into the AllRegions figure, which is published when all the
// day's trades together are enough. So that no withheld group can be
// recovered as AllRegions minus the published groups, what is merged must
// itself be enough: while it is not, the smallest published group is
// withheld and merged too. It returns the published groups, AllRegions
// first when it is one of them.
func PublishedGroups(groups []GroupTrades) []string {
	var all GroupTrades
	for _, g := range groups {
		all.merge(g)
	}
	if !all.enough() {
		return nil
	}
	var kept []GroupTrades
	var merged GroupTrades
	for _, g := range groups {
		if g.enough() {
			kept = append(kept, g)
		} else {
			merged.merge(g)
		}
	}
	sort.Slice(kept, func(i, j int) bool {
		if kept[i].Trades != kept[j].Trades {
			return kept[i].Trades > kept[j].Trades
		}
		return kept[i].Group < kept[j].Group
	})
	for merged.Trades > 0 && !merged.enough() && len(kept) > 0 {
		merged.merge(kept[len(kept)-1])
		kept = kept[:len(kept)-1]
	}
	out := []string{AllRegions}
	for _, g := range kept {
		out = append(out, g.Group)
	}
	sort.Strings(out[1:])
	return out
}

// dailyIndex computes the series; with publish false every day of every
// series is kept (the arithmetic's tests use it).
func dailyIndex(trades []Trade, publish bool) []Series {
	type acc struct {
		num    [2]uint64 // Σ price × device-seconds as 128 bits (hi, lo)
		volume int64
		trades int
		lo, hi Cents
		buyers map[int64]bool
		provs  map[int64]bool
	}
	type dayKey struct {
		key SeriesKey
		day int64
	}
	days := map[dayKey]*acc{}
	add := func(k SeriesKey, day int64, t Trade, w int64) {
		a := days[dayKey{k, day}]
		if a == nil {
			a = &acc{lo: t.PriceCents, hi: t.PriceCents, buyers: map[int64]bool{}, provs: map[int64]bool{}}
			days[dayKey{k, day}] = a
		}
		a.buyers[t.BuyerID], a.provs[t.ProviderID] = true, true
		hi, lo := mul64(uint64(t.PriceCents), uint64(w))
		var carry uint64
		a.num[1], carry = addCarry(a.num[1], lo)
		a.num[0] += hi + carry
		a.volume += w
		a.trades++
		a.lo, a.hi = min(a.lo, t.PriceCents), max(a.hi, t.PriceCents)
	}
	for _, t := range trades {
		w := t.DeviceSeconds()
		r, ok := FindRegion(t.RegionID)
		if w <= 0 || !ok || t.PriceCents <= 0 || t.Wash() {
			continue
		}
		day := Day(t.BookedAt).Unix()
		add(SeriesKey{t.Class(), r.Group}, day, t, w)
		add(SeriesKey{t.Class(), AllRegions}, day, t, w)
	}
	if publish {
		type classDay struct {
			class PriceClass
			day   int64
		}
		groups := map[classDay][]GroupTrades{}
		for k, a := range days {
			if k.key.Group != AllRegions {
				cd := classDay{k.key.Class, k.day}
				groups[cd] = append(groups[cd], GroupTrades{Group: k.key.Group, Trades: a.trades, Buyers: a.buyers, Providers: a.provs})
			}
		}
		for cd, gs := range groups {
			sort.Slice(gs, func(i, j int) bool { return gs[i].Group < gs[j].Group })
			published := map[string]bool{}
			for _, g := range PublishedGroups(gs) {
				published[g] = true
			}
			for _, g := range append([]string{AllRegions}, RegionGroups()...) {
				if !published[g] {
					delete(days, dayKey{SeriesKey{cd.class, g}, cd.day})
				}
			}
		}
	}
	bySeries := map[SeriesKey][]IndexPoint{}
	for k, a := range days {
		// Round half up: (2·num + volume) / (2·volume) in 128 bits.
		hi, lo := a.num[0]<<1|a.num[1]>>63, a.num[1]<<1
		var carry uint64
		lo, carry = addCarry(lo, uint64(a.volume))
		hi += carry
		q, _ := div128(hi, lo, 2*uint64(a.volume))
		bySeries[k.key] = append(bySeries[k.key], IndexPoint{
			Day: time.Unix(k.day, 0).UTC(), IndexCents: Cents(q), VolumeDeviceSeconds: a.volume,
			Trades: a.trades, LowCents: a.lo, HighCents: a.hi,
		})
	}
	out := make([]Series, 0, len(bySeries))
	for k, ps := range bySeries {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Day.Before(ps[j].Day) })
		out = append(out, Series{Key: k, Points: ps})
	}
	sort.Slice(out, func(i, j int) bool { return seriesLess(out[i].Key, out[j].Key) })
	return out
}

func addCarry(a, b uint64) (uint64, uint64) {
	s := a + b
	if s < a {
		return s, 1
	}
	return s, 0
}

func seriesLess(a, b SeriesKey) bool {
	if la, lb := a.Class.Label(), b.Class.Label(); la != lb {
		return la < lb
	}
	if (a.Group == AllRegions) != (b.Group == AllRegions) {
		return a.Group == AllRegions
	}
	return a.Group < b.Group
}

// AskStats summarises the asking prices of listed offers in one series.
type AskStats struct {
	Key    SeriesKey
	Offers int
	// MinCents, MedianCents and P90Cents are nearest-rank statistics of
	// the offers' prices per device-hour (each offer counts once): the
	// value at rank ⌈p·n⌉ of the sorted prices, so every figure is a price
	// some offer actually asks.
	MinCents, MedianCents, P90Cents Cents
}

// Ask is one listed offer's asking price in one class and region.
type Ask struct {
	Class      PriceClass
	RegionID   string
	PriceCents Cents
}

// AsksFromOffer returns an offer's asks: its on-demand price, and its
// interruptible price when it sells interruptible capacity.
func AsksFromOffer(o Offer) []Ask {
	out := []Ask{{Class: PriceClass{AcceleratorID: o.AcceleratorID}, RegionID: o.RegionID, PriceCents: o.PriceCentsPerDeviceHour}}
	if o.Interruptible && o.InterruptibleCentsPerDH > 0 {
		out = append(out, Ask{Class: PriceClass{AcceleratorID: o.AcceleratorID, Interruptible: true}, RegionID: o.RegionID, PriceCents: o.InterruptibleCentsPerDH})
	}
	return out
}

// AskStatistics computes the ask statistics per class and region group,
// plus per class over AllRegions, ordered like DailyIndex.
func AskStatistics(asks []Ask) []AskStats {
	prices := map[SeriesKey][]Cents{}
	for _, a := range asks {
		r, ok := FindRegion(a.RegionID)
		if !ok || a.PriceCents <= 0 {
			continue
		}
		for _, g := range []string{r.Group, AllRegions} {
			k := SeriesKey{a.Class, g}
			prices[k] = append(prices[k], a.PriceCents)
		}
	}
	out := make([]AskStats, 0, len(prices))
	for k, ps := range prices {
		sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
		out = append(out, AskStats{Key: k, Offers: len(ps), MinCents: ps[0],
			MedianCents: NearestRank(ps, 50), P90Cents: NearestRank(ps, 90)})
	}
	sort.Slice(out, func(i, j int) bool { return seriesLess(out[i].Key, out[j].Key) })
	return out
}

// NearestRank returns the pct-th percentile (1..100) of sorted values by
// the nearest-rank method: the value at rank ⌈pct·n/100⌉.
func NearestRank[T ~int64](sorted []T, pct int) T {
	if len(sorted) == 0 {
		return 0
	}
	rank := (pct*len(sorted) + 99) / 100
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
