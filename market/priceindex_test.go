package market

import (
	"math/big"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"
)

func randomTrades(rng *rand.Rand, n int) []Trade {
	accs := []string{"nvidia-h100-80gb-sxm", "nvidia-a100-80gb-sxm", "nvidia-rtx4090-24gb-pcie"}
	regs := []string{"us-west-or", "eu-north-se", "ap-northeast-jp", "us-east-va"}
	out := make([]Trade, n)
	for i := range out {
		booked := t0.Add(time.Duration(rng.IntN(10*24*3600)) * time.Second)
		start := booked.Add(time.Duration(rng.IntN(72)) * time.Hour)
		out[i] = Trade{
			BookedAt: booked, AcceleratorID: accs[rng.IntN(len(accs))], RegionID: regs[rng.IntN(len(regs))],
			Interruptible: rng.IntN(3) == 0, Devices: 1 + rng.IntN(64),
			Start: start, End: start.Add(time.Duration(1+rng.IntN(24*30*60)) * time.Minute),
			PriceCents: Cents(1 + rng.IntN(100_000)),
		}
	}
	return out
}

// TestDailyIndexProperties checks, on random trades, that every day's index
// lies within that day's lowest and highest trade, that the weights (each
// trade's device-seconds) sum to the day's volume, that the trade count is
// right, and that the index equals an exact rational reference rounded half
// up.
func TestDailyIndexProperties(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		trades := randomTrades(rng, 1+rng.IntN(300))
		series := dailyIndex(trades, false)
		type ref struct {
			weights []int64
			prices  []Cents
		}
		refs := map[SeriesKey]map[int64]*ref{}
		for _, tr := range trades {
			r, _ := FindRegion(tr.RegionID)
			for _, g := range []string{r.Group, AllRegions} {
				k := SeriesKey{tr.Class(), g}
				if refs[k] == nil {
					refs[k] = map[int64]*ref{}
				}
				d := Day(tr.BookedAt).Unix()
				if refs[k][d] == nil {
					refs[k][d] = &ref{}
				}
				refs[k][d].weights = append(refs[k][d].weights, tr.DeviceSeconds())
				refs[k][d].prices = append(refs[k][d].prices, tr.PriceCents)
			}
		}
		if len(series) != len(refs) {
			t.Fatalf("seed %d: %d series, want %d", seed, len(series), len(refs))
		}
		for _, s := range series {
			if len(s.Points) != len(refs[s.Key]) {
				t.Fatalf("seed %d %v: %d days, want %d", seed, s.Key, len(s.Points), len(refs[s.Key]))
			}
			for i, p := range s.Points {
				if i > 0 && !s.Points[i-1].Day.Before(p.Day) {
					t.Fatalf("seed %d %v: days out of order", seed, s.Key)
				}
				r := refs[s.Key][p.Day.Unix()]
				if r == nil {
					t.Fatalf("seed %d %v: unexpected day %s", seed, s.Key, p.Day)
				}
				var sum int64
				num, lo, hi := new(big.Int), r.prices[0], r.prices[0]
				for j, w := range r.weights {
					sum += w
					num.Add(num, new(big.Int).Mul(big.NewInt(int64(r.prices[j])), big.NewInt(w)))
					lo, hi = min(lo, r.prices[j]), max(hi, r.prices[j])
				}
				if sum != p.VolumeDeviceSeconds {
					t.Fatalf("seed %d %v %s: weights sum to %d, volume %d", seed, s.Key, p.Day, sum, p.VolumeDeviceSeconds)
				}
				if p.Trades != len(r.prices) {
					t.Fatalf("seed %d: trades %d, want %d", seed, p.Trades, len(r.prices))
				}
				if p.LowCents != lo || p.HighCents != hi {
					t.Fatalf("seed %d: low/high %d/%d, want %d/%d", seed, p.LowCents, p.HighCents, lo, hi)
				}
				if p.IndexCents < lo || p.IndexCents > hi {
					t.Fatalf("seed %d %v %s: index %d outside [%d, %d]", seed, s.Key, p.Day, p.IndexCents, lo, hi)
				}
				// Reference: floor((2·num + sum) / (2·sum)).
				want := new(big.Int).Add(new(big.Int).Lsh(num, 1), big.NewInt(sum))
				want.Quo(want, big.NewInt(2*sum))
				if want.Int64() != int64(p.IndexCents) {
					t.Fatalf("seed %d: index %d, want %d", seed, p.IndexCents, want.Int64())
				}
			}
		}
	}
}

func TestDailyIndexRounding(t *testing.T) {
	day := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	tr := func(price Cents, devices, hours int) Trade {
		return Trade{BookedAt: day, AcceleratorID: "nvidia-h100-80gb-sxm", RegionID: "us-east-va",
			Devices: devices, Start: day, End: day.Add(time.Duration(hours) * time.Hour), PriceCents: price}
	}
	tests := []struct {
		name   string
		trades []Trade
		index  Cents
		volDH  int64
	}{
		{"one trade", []Trade{tr(219, 8, 10)}, 219, 80},
		{"weighted", []Trade{tr(200, 1, 1), tr(300, 3, 1)}, 275, 4},
		{"half rounds up", []Trade{tr(100, 1, 1), tr(101, 1, 1)}, 101, 2},
		{"below half rounds down", []Trade{tr(100, 2, 1), tr(101, 1, 1)}, 100, 3},
		{"no volume is left out", []Trade{tr(500, 0, 1), tr(100, 1, 1)}, 100, 1},
	}
	for _, tc := range tests {
		s := dailyIndex(tc.trades, false)
		if len(s) != 2 || s[0].Key.Group != AllRegions || s[1].Key.Group != "North America" {
			t.Fatalf("%s: series %+v", tc.name, s)
		}
		p := s[0].Points[0]
		if p.IndexCents != tc.index || p.VolumeDeviceHours() != tc.volDH || !p.Day.Equal(Day(day)) {
			t.Errorf("%s: %+v, want index %d volume %d", tc.name, p, tc.index, tc.volDH)
		}
		if s[1].Points[0] != p {
			t.Errorf("%s: group series differs from all regions: %+v", tc.name, s[1].Points[0])
		}
	}
}

func TestAskStatistics(t *testing.T) {
	var asks []Ask
	for _, p := range []Cents{500, 100, 300, 200, 400, 900, 800, 700, 600, 1000} {
		asks = append(asks, Ask{Class: PriceClass{AcceleratorID: "nvidia-h100-80gb-sxm"}, RegionID: "eu-north-se", PriceCents: p})
	}
	asks = append(asks, Ask{Class: PriceClass{AcceleratorID: "nvidia-h100-80gb-sxm"}, RegionID: "us-east-va", PriceCents: 50})
	st := AskStatistics(asks)
	if len(st) != 3 {
		t.Fatalf("stats %+v", st)
	}
	byGroup := map[string]AskStats{}
	for _, s := range st {
		byGroup[s.Key.Group] = s
	}
	eu := byGroup["Europe"]
	if eu.Offers != 10 || eu.MinCents != 100 || eu.MedianCents != 500 || eu.P90Cents != 900 {
		t.Errorf("europe %+v", eu)
	}
	all := byGroup[AllRegions]
	if all.Offers != 11 || all.MinCents != 50 || all.MedianCents != 500 || all.P90Cents != 900 {
		t.Errorf("all %+v", all)
	}
	na := byGroup["North America"]
	if na.Offers != 1 || na.MinCents != 50 || na.MedianCents != 50 || na.P90Cents != 50 {
		t.Errorf("na %+v", na)
	}
}

// refPercentile is the nearest-rank percentile by its definition: the
// smallest of the values such that at least pct % of them are ≤ it. It
// counts, for each candidate, rather than computing a rank.
func refPercentile(values []Cents, pct int) Cents {
	best, found := Cents(0), false
	for _, v := range values {
		atMost := 0
		for _, w := range values {
			if w <= v {
				atMost++
			}
		}
		if atMost*100 >= pct*len(values) && (!found || v < best) {
			best, found = v, true
		}
	}
	return best
}

// TestAskStatisticsAgainstSort checks every series AskStatistics returns on
// random asks (duplicates, both classes, several region groups) against
// the definition of each statistic, and NearestRank on its own: a
// percentile is exactly the smallest value with at least pct % of the
// values at or below it, so an implementation returning the maximum, or a
// neighbouring rank, fails.
func TestAskStatisticsAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	accs := []string{"nvidia-h100-80gb-sxm", "nvidia-l4-24gb-pcie"}
	regs := []string{"us-west-or", "us-east-va", "eu-north-se", "ap-northeast-jp"}
	notMax := 0
	for n := 1; n < 60; n++ {
		var asks []Ask
		want := map[SeriesKey][]Cents{}
		for range n {
			a := Ask{Class: PriceClass{AcceleratorID: accs[rng.IntN(len(accs))], Interruptible: rng.IntN(3) == 0},
				RegionID: regs[rng.IntN(len(regs))], PriceCents: Cents(1 + rng.IntN(40))} // few prices: ties
			asks = append(asks, a)
			r, _ := FindRegion(a.RegionID)
			want[SeriesKey{a.Class, r.Group}] = append(want[SeriesKey{a.Class, r.Group}], a.PriceCents)
			want[SeriesKey{a.Class, AllRegions}] = append(want[SeriesKey{a.Class, AllRegions}], a.PriceCents)
		}
		// Asks AskStatistics must leave out: an unknown region, no price.
		asks = append(asks, Ask{Class: PriceClass{AcceleratorID: accs[0]}, RegionID: "mars-1", PriceCents: 1},
			Ask{Class: PriceClass{AcceleratorID: accs[0]}, RegionID: regs[0], PriceCents: 0})
		got := AskStatistics(asks)
		if len(got) != len(want) {
			t.Fatalf("n=%d: %d series, want %d: %+v", n, len(got), len(want), got)
		}
		for _, st := range got {
			ps, ok := want[st.Key]
			if !ok {
				t.Fatalf("n=%d: unexpected series %+v", n, st.Key)
			}
			lowest := ps[0]
			for _, p := range ps {
				lowest = min(lowest, p)
			}
			wantMed, wantP90 := refPercentile(ps, 50), refPercentile(ps, 90)
			if st.Offers != len(ps) || st.MinCents != lowest || st.MedianCents != wantMed || st.P90Cents != wantP90 {
				t.Fatalf("n=%d %+v: got %+v, want offers %d min %d median %d p90 %d (asks %v)",
					n, st.Key, st, len(ps), lowest, wantMed, wantP90, ps)
			}
			sorted := append([]Cents(nil), ps...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
			for _, pct := range []int{1, 10, 25, 50, 75, 90, 99, 100} {
				want := refPercentile(ps, pct)
				if v := NearestRank(sorted, pct); v != want {
					t.Fatalf("n=%d pct=%d: NearestRank %d, want %d (values %v)", n, pct, v, want, sorted)
				}
				if want != sorted[len(sorted)-1] {
					notMax++
				}
			}
		}
	}
	// The cases must be able to tell a percentile from the maximum.
	if notMax < 500 {
		t.Fatalf("only %d percentiles differ from the maximum: the cases are too weak", notMax)
	}
	if v := NearestRank([]Cents(nil), 50); v != 0 {
		t.Errorf("empty: %d", v)
	}
}

func TestPriceClassRoundTrip(t *testing.T) {
	for _, c := range []PriceClass{{"nvidia-h100-80gb-sxm", false}, {"nvidia-rtx4090-24gb-pcie", true}} {
		got, ok := ParsePriceClass(c.ID())
		if !ok || got != c {
			t.Errorf("%v: %v %v", c, got, ok)
		}
	}
	for _, s := range []string{"", ":on-demand", "nope:on-demand", "nvidia-h100-80gb-sxm", "nvidia-h100-80gb-sxm:spot"} {
		if _, ok := ParsePriceClass(s); ok {
			t.Errorf("%q parsed", s)
		}
	}
	if got := (PriceClass{"nvidia-h100-80gb-sxm", true}).Label(); got != "H100 80GB SXM, interruptible" {
		t.Errorf("label %q", got)
	}
}

func TestPublishedGroups(t *testing.T) {
	g := func(group string, trades int, buyers, providers []int64) GroupTrades {
		out := GroupTrades{Group: group, Trades: trades, Buyers: map[int64]bool{}, Providers: map[int64]bool{}}
		for _, b := range buyers {
			out.Buyers[b] = true
		}
		for _, p := range providers {
			out.Providers[p] = true
		}
		return out
	}
	na, eu, ap := "North America", "Europe", "Asia-Pacific"
	tests := []struct {
		name   string
		groups []GroupTrades
		want   []string
	}{
		{"one booking", []GroupTrades{g(na, 1, []int64{1}, []int64{9})}, nil},
		{"two trades", []GroupTrades{g(na, 2, []int64{1, 2}, []int64{8, 9})}, nil},
		{"one buyer", []GroupTrades{g(na, 5, []int64{1}, []int64{8, 9})}, nil},
		{"one provider", []GroupTrades{g(na, 5, []int64{1, 2}, []int64{9})}, nil},
		{"just enough", []GroupTrades{g(na, 3, []int64{1, 2}, []int64{8, 9})}, []string{AllRegions, na}},
		{"too few apart, enough together", []GroupTrades{g(eu, 2, []int64{1}, []int64{8}), g(na, 2, []int64{2}, []int64{9})}, []string{AllRegions}},
		{"both enough", []GroupTrades{g(eu, 3, []int64{1, 2}, []int64{8, 9}), g(na, 4, []int64{3, 4}, []int64{6, 7})}, []string{AllRegions, eu, na}},
		// Publishing North America and all regions would give away the one
		// European trade by subtraction: North America is withheld too.
		{"a lone trade beside an enough group", []GroupTrades{g(eu, 1, []int64{5}, []int64{5}), g(na, 3, []int64{1, 2}, []int64{8, 9})}, []string{AllRegions}},
		// The lone trade merges with the smaller of the two enough groups.
		{"the smallest group is merged", []GroupTrades{g(ap, 1, []int64{5}, []int64{5}), g(eu, 3, []int64{1, 2}, []int64{8, 9}), g(na, 4, []int64{3, 4}, []int64{6, 7})},
			[]string{AllRegions, na}},
		{"what is merged is enough", []GroupTrades{g(ap, 1, []int64{5}, []int64{5}), g(eu, 2, []int64{1}, []int64{8}), g(na, 4, []int64{3, 4}, []int64{6, 7})},
			[]string{AllRegions, na}},
	}
	for _, tc := range tests {
		if got := PublishedGroups(tc.groups); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestDailyIndexPublishesOnlyEnough checks, on random trades among few
// parties, that every published point is the day's full figure for its
// series and aggregates enough trades and parties (counted here from the
// trades), that no group is published on a day its class's all-regions
// figure is withheld, and that the trades withheld beside a published
// all-regions figure are none or themselves enough — so no published
// figure, nor a difference of two, shows fewer parties than the rule asks.
func TestDailyIndexPublishesOnlyEnough(t *testing.T) {
	type key struct {
		class PriceClass
		group string
		day   int64
	}
	var shown, withheld, mergedBeside int
	for seed := uint64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		trades := randomTrades(rng, 1+rng.IntN(120))
		parties := 1 + rng.IntN(4)
		for i := range trades {
			trades[i].BookedAt = t0.Add(time.Duration(rng.IntN(3)) * 24 * time.Hour)
			trades[i].BuyerID, trades[i].ProviderID = int64(rng.IntN(parties)), int64(100+rng.IntN(parties))
		}
		type tally struct {
			n         int
			buyers    map[int64]bool
			providers map[int64]bool
		}
		tallies := map[key]*tally{}
		count := func(k key, tr Trade) {
			if tallies[k] == nil {
				tallies[k] = &tally{buyers: map[int64]bool{}, providers: map[int64]bool{}}
			}
			tallies[k].n++
			tallies[k].buyers[tr.BuyerID], tallies[k].providers[tr.ProviderID] = true, true
		}
		for _, tr := range trades {
			r, _ := FindRegion(tr.RegionID)
			d := Day(tr.BookedAt).Unix()
			count(key{tr.Class(), r.Group, d}, tr)
			count(key{tr.Class(), AllRegions, d}, tr)
		}
		enough := func(t *tally) bool { return t.n >= 3 && len(t.buyers) >= 2 && len(t.providers) >= 2 }

		raw := map[key]IndexPoint{}
		for _, s := range dailyIndex(trades, false) {
			for _, p := range s.Points {
				raw[key{s.Key.Class, s.Key.Group, p.Day.Unix()}] = p
			}
		}
		published := map[key]bool{}
		for _, s := range DailyIndex(trades) {
			if len(s.Points) == 0 {
				t.Fatalf("seed %d: series %v published with no point", seed, s.Key)
			}
			for _, p := range s.Points {
				k := key{s.Key.Class, s.Key.Group, p.Day.Unix()}
				published[k] = true
				shown++
				if p != raw[k] {
					t.Fatalf("seed %d %v: published %+v, computed %+v", seed, k, p, raw[k])
				}
				if !enough(tallies[k]) {
					t.Fatalf("seed %d %v: published with %d trades, %d buyers, %d providers", seed, k, tallies[k].n, len(tallies[k].buyers), len(tallies[k].providers))
				}
			}
		}
		for k := range tallies {
			if k.group == AllRegions {
				continue
			}
			all := key{k.class, AllRegions, k.day}
			if published[k] && !published[all] {
				t.Fatalf("seed %d %v: published while all regions is withheld", seed, k)
			}
		}
		for k := range tallies {
			if !published[k] {
				withheld++
			}
			if k.group != AllRegions || !published[k] {
				if k.group == AllRegions && enough(tallies[k]) {
					t.Fatalf("seed %d %v: enough trades but withheld", seed, k)
				}
				continue
			}
			rest := &tally{buyers: map[int64]bool{}, providers: map[int64]bool{}}
			for _, tr := range trades {
				r, _ := FindRegion(tr.RegionID)
				if tr.Class() == k.class && Day(tr.BookedAt).Unix() == k.day && !published[key{k.class, r.Group, k.day}] {
					rest.n++
					rest.buyers[tr.BuyerID], rest.providers[tr.ProviderID] = true, true
				}
			}
			if rest.n > 0 {
				mergedBeside++
			}
			if rest.n > 0 && !enough(rest) {
				t.Fatalf("seed %d %v: the withheld groups' %d trades (%d buyers, %d providers) can be read as all regions minus the published ones",
					seed, k, rest.n, len(rest.buyers), len(rest.providers))
			}
		}
	}
	t.Logf("%d points published, %d withheld, %d all-regions figures with withheld groups inside", shown, withheld, mergedBeside)
	if shown < 100 || withheld < 100 || mergedBeside < 20 {
		t.Fatalf("the random trades do not exercise the rule: %d published, %d withheld, %d merged beside", shown, withheld, mergedBeside)
	}
}

// TestDailyIndexLeavesOutWashTrades: a provider booking its own offer is
// no trade. Three honest trades, 1 device-hour each at 200, 210 and 220
// (two buyers, two providers): index (200 + 210 + 220) / 3 = 210, volume
// 3 device-hours; a wash trade of 8 device-hours at 900 changes neither.
func TestDailyIndexLeavesOutWashTrades(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tr := func(buyer, provider int64, devices int, price Cents) Trade {
		return Trade{BookedAt: day.Add(time.Hour), BuyerID: buyer, ProviderID: provider, AcceleratorID: "nvidia-h100-80gb-sxm",
			RegionID: "us-east-va", Devices: devices, Start: day.Add(10 * time.Hour), End: day.Add(11 * time.Hour), PriceCents: price}
	}
	trades := []Trade{tr(1, 101, 1, 200), tr(2, 102, 1, 210), tr(1, 102, 1, 220), tr(101, 101, 8, 900)}
	series := DailyIndex(trades)
	if len(series) == 0 {
		t.Fatal("nothing published")
	}
	for _, s := range series {
		if len(s.Points) != 1 {
			t.Fatalf("%v: %d points", s.Key, len(s.Points))
		}
		p := s.Points[0]
		if p.IndexCents != 210 || p.VolumeDeviceHours() != 3 || p.Trades != 3 || p.LowCents != 200 || p.HighCents != 220 {
			t.Errorf("%v: index %d volume %d trades %d low %d high %d; want 210, 3, 3, 200, 220",
				s.Key, p.IndexCents, p.VolumeDeviceHours(), p.Trades, p.LowCents, p.HighCents)
		}
	}
}
