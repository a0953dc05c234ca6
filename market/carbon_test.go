package market

import (
	"bufio"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// carbonDataDir holds a year (2022) of real hourly carbon intensity for
// nine US balancing authorities, in the project's shared data beside the
// repository (../shared/data from the root; GPUMARKET_SHARED_DATA
// overrides). The data is not in the repository and no install step can
// fetch it, so a checkout without the shared folder skips these tests with
// a message; a folder that is there but lacks a file fails them.
func carbonDataDir(t *testing.T) string {
	t.Helper()
	root := os.Getenv("GPUMARKET_SHARED_DATA")
	if root == "" {
		root = "../../shared/data"
	}
	dir := filepath.Join(root, "carbon-intensity-dcrl")
	if _, err := os.Stat(root); os.IsNotExist(err) {
		t.Skipf("shared data folder %s is not beside this checkout; set GPUMARKET_SHARED_DATA to run the real-data carbon tests", root)
	}
	return dir
}

// hourlySeries reads a balancing authority's avg_CI column: 8,760 hours of
// 2022 from 00:00 UTC on 1 January, blank rows carried forward from the
// hour before, rounded to whole gCO2/kWh.
func hourlySeries(t *testing.T, ba string) []int {
	t.Helper()
	f, err := os.Open(filepath.Join(carbonDataDir(t), ba+"_NG_avgCI.csv"))
	if err != nil {
		t.Fatalf("real carbon data missing: %v", err)
	}
	defer f.Close()
	start := time.Date(2022, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]int, 8760)
	seen := make([]bool, 8760)
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		cols := strings.Split(sc.Text(), ",")
		if len(cols) < 10 || cols[0] == "" || cols[9] == "" {
			continue
		}
		ts, err := time.Parse("2006-01-02 15:04:05-07:00", cols[0])
		if err != nil {
			t.Fatalf("%s: timestamp %q: %v", ba, cols[0], err)
		}
		v, err := strconv.ParseFloat(cols[9], 64)
		if err != nil {
			t.Fatalf("%s: avg_CI %q: %v", ba, cols[9], err)
		}
		h := int(ts.Sub(start) / time.Hour)
		if h >= 0 && h < len(out) {
			out[h], seen[h] = int(v+0.5), true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range out {
		if seen[i] {
			n++
		} else if i > 0 {
			out[i] = out[i-1]
		}
	}
	if n < 8700 {
		t.Fatalf("%s: only %d hourly rows", ba, n)
	}
	return out
}

// TestRegionProfilesMatchData recomputes each US region's built-in profile
// from the real hourly data: every hour of day within 1 g of the mean of
// that UTC hour over 2022, and the profile's mean within 1 g of the
// region's published annual mean.
func TestRegionProfilesMatchData(t *testing.T) {
	for _, r := range Regions() {
		if r.BalancingAuth == "" {
			p, _, _ := RegionCarbonProfile(r.ID)
			if !p.Flat() || p[0] != r.DefaultCarbon {
				t.Errorf("%s: want a flat profile at %d, got %v", r.ID, r.DefaultCarbon, p)
			}
			continue
		}
		series := hourlySeries(t, r.BalancingAuth)
		var sum, n [24]int64
		for i, v := range series {
			sum[i%24] += int64(v)
			n[i%24]++
		}
		p, src, ok := RegionCarbonProfile(r.ID)
		if !ok || !strings.Contains(src, r.BalancingAuth) {
			t.Fatalf("%s: profile source %q", r.ID, src)
		}
		for h := range p {
			mean := (sum[h] + n[h]/2) / n[h]
			if d := mean - int64(p[h]); d < -1 || d > 1 {
				t.Errorf("%s hour %02d: built-in %d, data mean %d", r.ID, h, p[h], mean)
			}
		}
		if d := p.Mean() - r.DefaultCarbon; d < -1 || d > 1 {
			t.Errorf("%s: profile mean %d, default %d", r.ID, p.Mean(), r.DefaultCarbon)
		}
	}
}

// TestCleanestStartRealData checks the sliding window against brute force
// on random windows of real series.
func TestCleanestStartRealData(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for _, ba := range []string{"CISO", "ERCO", "PJM", "BPAT", "AZPS"} {
		series := hourlySeries(t, ba)
		for k := 0; k < 200; k++ {
			n := 1 + rng.IntN(48)
			from := rng.IntN(len(series) - n - 200)
			to := from + rng.IntN(200)
			start, total, ok := CleanestStart(series, from, to, n)
			if !ok {
				t.Fatalf("%s: no window", ba)
			}
			bestS, bestT := -1, int64(0)
			for s := from; s <= to; s++ {
				var sum int64
				for i := s; i < s+n; i++ {
					sum += int64(series[i])
				}
				if bestS < 0 || sum < bestT {
					bestS, bestT = s, sum
				}
			}
			if start != bestS || total != bestT {
				t.Fatalf("%s [%d,%d] n=%d: got %d/%d, brute force %d/%d", ba, from, to, n, start, total, bestS, bestT)
			}
		}
	}
	if _, _, ok := CleanestStart([]int{1, 2}, 0, 1, 2); ok {
		t.Error("window past the end accepted")
	}
}

// TestEmissionsOverRealHours checks the hourly emissions arithmetic against
// a per-hour reference on a real day's intensities, for whole-hour and
// part-hour intervals, and the flat-profile identity the matcher uses.
func TestEmissionsOverRealHours(t *testing.T) {
	series := hourlySeries(t, "CISO")
	day := 165 // 15 June 2022
	var p CarbonProfile
	copy(p[:], series[day*24:day*24+24])
	base := time.Date(2026, 6, 15, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		from, to time.Duration
	}{
		{0, 24 * time.Hour}, {3 * time.Hour, 9 * time.Hour}, {90 * time.Minute, 200 * time.Minute},
		{20 * time.Hour, 30 * time.Hour}, {5 * time.Hour, 5 * time.Hour},
	} {
		const watts, devices = 700, 8
		var num int64 // W·s·g
		for s := tc.from; s < tc.to; s += time.Second {
			h := int(((base.Add(s).Unix() % 86400) / 3600))
			num += int64(p[h])
		}
		want := MulDivRound(num, watts*devices, 3_600_000)
		if got := p.EmissionsG(watts, devices, base.Add(tc.from), base.Add(tc.to)); got != want {
			t.Errorf("[%s, %s): %d g, want %d", tc.from, tc.to, got, want)
		}
	}
	flat := FlatProfile(256)
	if got, want := flat.EmissionsG(700, 8, base, base.Add(10*time.Hour)), MulDivRound(700*8*10, 256, 1000); got != want {
		t.Errorf("flat: %d, want %d", got, want)
	}
}

// TestMatchCarbonAwareRealDay runs the carbon-aware start against a real
// California day (the solar dip) with the plain matcher: the chosen start
// is the brute-force cleanest whole-hour start inside the window, the
// saving and cost are reported, and without the preference nothing moves.
func TestMatchCarbonAwareRealDay(t *testing.T) {
	series := hourlySeries(t, "CISO")
	day := 165
	var p CarbonProfile
	copy(p[:], series[day*24:day*24+24])
	now := time.Date(2026, 6, 15, 0, 0, 0, 0, time.UTC)
	o := Offer{
		ID: 1, ProviderID: 1, Title: "CA", AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1,
		Interconnect: InterconnectNVLink, NetworkID: "none", CPUCores: 64, RAMGB: 512, StorageGB: 1000,
		DriverVersion: "550.54", CUDAVersion: "12.4", OSImage: "Ubuntu", ContainerRuntime: "Docker",
		RegionID: "us-west-ca", CarbonGPerKWh: 256, AvailableFrom: now, AvailableUntil: now.AddDate(0, 1, 0),
		MinRentalHours: 1, MaxRentalHours: 100, PriceCentsPerDeviceHour: 250, BillingBasis: BillingWallClock,
		UptimeBP: 9900, Review: ReviewApproved, State: OfferActive,
	}
	match := func(r Request, at time.Time) (Result, error) {
		return Match([]Candidate{{Offer: o}}, nil, r, at)
	}
	profile := func(Piece) CarbonProfile { return p }
	const hours = 4
	req := Request{Workload: Workload{Kind: WorkTraining, Devices: 8, Hours: hours},
		Constraints: Constraints{Deadline: now.Add(24 * time.Hour)}}

	plain, shifts, err := MatchCarbonAware(match, req, now, profile)
	if err != nil || len(plain.Quotes) != 1 || len(shifts) != 0 || !plain.Quotes[0].Start.Equal(now) {
		t.Fatalf("without the preference: %+v %v %v", plain.Quotes, shifts, err)
	}
	wantEarliest := p.EmissionsG(700, 8, now, now.Add(hours*time.Hour))
	if plain.Quotes[0].EmissionsG != wantEarliest {
		t.Errorf("hourly emissions %d, want %d", plain.Quotes[0].EmissionsG, wantEarliest)
	}

	req.Preferences.CarbonAwareStart = true
	res, shifts, err := MatchCarbonAware(match, req, now, profile)
	if err != nil || len(res.Quotes) != 1 {
		t.Fatalf("carbon-aware: %+v %v", res, err)
	}
	dayLong := append(append([]int(nil), p[:]...), p[:]...)
	bestH, _, _ := CleanestStart(dayLong, 0, 24-hours, hours)
	q := res.Quotes[0]
	if want := now.Add(time.Duration(bestH) * time.Hour); !q.Start.Equal(want) {
		t.Fatalf("start %s, want %s (cleanest hour %d)", q.Start, want, bestH)
	}
	if bestH == 0 || len(shifts) != 1 {
		t.Fatalf("expected a shift on a real CA day: hour %d, shifts %+v", bestH, shifts)
	}
	s := shifts[0]
	if s.Delay != time.Duration(bestH)*time.Hour || s.SavedG != wantEarliest-q.EmissionsG || s.SavedG <= 0 ||
		s.ExtraCents != q.Cost.Total-plain.Quotes[0].Cost.Total || s.FromG != wantEarliest {
		t.Errorf("shift %+v", s)
	}
	if !strings.HasPrefix(s.Summary(), "Starting ") || !strings.Contains(s.Summary(), "kg CO2e") {
		t.Errorf("summary %q", s.Summary())
	}

	// A deadline that leaves no room keeps the earliest start.
	req.Constraints.Deadline = now.Add(hours * time.Hour)
	res, shifts, err = MatchCarbonAware(match, req, now, profile)
	if err != nil || len(shifts) != 0 || !res.Quotes[0].Start.Equal(now) {
		t.Errorf("tight deadline: %+v %+v %v", res.Quotes, shifts, err)
	}
}

func TestParseCarbonProfile(t *testing.T) {
	p, err := ParseCarbonProfile("120")
	if err != nil || p != FlatProfile(120) {
		t.Errorf("flat: %v %v", p, err)
	}
	in := "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24"
	p, err = ParseCarbonProfile(in)
	if err != nil || p[0] != 1 || p[23] != 24 || p.String() != in {
		t.Errorf("hourly: %v %v", p, err)
	}
	for _, bad := range []string{"", "1,2", "x", "-1", "1501"} {
		if _, err := ParseCarbonProfile(bad); ErrorCode(err) != CodeInvalid {
			t.Errorf("%q: %v", bad, err)
		}
	}
	over := FlatProfile(10)
	if got := OfferCarbonProfile("us-west-ca", 256, &over); got != over {
		t.Error("override ignored")
	}
	if got := OfferCarbonProfile("us-west-ca", 90, nil); got != FlatProfile(90) {
		t.Error("stated intensity ignored")
	}
	if got := OfferCarbonProfile("us-west-ca", 256, nil); got != regionProfiles["us-west-ca"] {
		t.Error("regional profile not used")
	}
}
