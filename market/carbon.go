package market

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CarbonProfile is a site's grid carbon intensity for each hour of the day,
// in whole gCO2/kWh, index 0 being 00:00–01:00 UTC. A day-periodic profile
// is an estimate: real intensity varies by day and season too.
type CarbonProfile [24]int

// MaxCarbonGPerKWh bounds a profile's hourly values.
const MaxCarbonGPerKWh = 1500

// FlatProfile is the same intensity every hour.
func FlatProfile(g int) CarbonProfile {
	var p CarbonProfile
	for i := range p {
		p[i] = g
	}
	return p
}

// Mean is the profile's mean, rounded half up.
func (p CarbonProfile) Mean() int {
	s := 0
	for _, v := range p {
		s += v
	}
	return (s + 12) / 24
}

// Flat reports whether every hour has the same intensity.
func (p CarbonProfile) Flat() bool { return p == FlatProfile(p[0]) }

// String is the 24 values, comma-separated (the stored and form format).
func (p CarbonProfile) String() string {
	parts := make([]string, 24)
	for i, v := range p {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

// ParseCarbonProfile reads 24 whole gCO2/kWh values separated by commas or
// spaces, 00:00 UTC first; a single value means a flat profile.
func ParseCarbonProfile(s string) (CarbonProfile, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '\t' || r == '\r' })
	if len(fields) != 24 && len(fields) != 1 {
		return CarbonProfile{}, Errorf(CodeInvalid, "Enter 24 hourly values (00:00 to 23:00 UTC) or one value for every hour; found %d.", len(fields))
	}
	var p CarbonProfile
	for i, f := range fields {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v > MaxCarbonGPerKWh {
			return CarbonProfile{}, Errorf(CodeInvalid, "Hour %d: enter a whole number of gCO2/kWh between 0 and %d.", i, MaxCarbonGPerKWh)
		}
		p[i] = v
	}
	if len(fields) == 1 {
		p = FlatProfile(p[0])
	}
	return p, nil
}

// regionProfiles are the built-in hourly profiles of the US regions: the
// mean of each UTC hour of day over 2022 of the hourly avg_CI series of the
// region's balancing authority (EIA Hourly Electric Grid Monitor data as
// published in HewlettPackard/dc-rl, data/CarbonIntensity), rounded to whole
// gCO2/kWh. Their means equal the regions' DefaultCarbon (the annual means)
// to within 1 g. Regions without hourly source data take a flat profile at
// their DefaultCarbon.
var regionProfiles = map[string]CarbonProfile{
	"us-west-or":      {53, 51, 50, 50, 51, 52, 54, 56, 58, 58, 59, 59, 58, 57, 55, 54, 54, 54, 54, 55, 55, 55, 55, 55},                         // BPAT
	"us-west-ca":      {219, 261, 294, 306, 308, 309, 311, 308, 306, 303, 301, 301, 302, 302, 287, 253, 209, 185, 179, 177, 177, 177, 180, 191}, // CISO
	"us-southwest-az": {527, 547, 569, 580, 583, 588, 595, 605, 617, 624, 628, 630, 630, 627, 620, 597, 564, 542, 530, 524, 521, 517, 516, 519}, // AZPS
	"us-south-tx":     {372, 387, 386, 375, 360, 346, 333, 325, 322, 323, 327, 335, 346, 354, 347, 336, 334, 338, 343, 346, 348, 347, 348, 354}, // ERCO
	"us-central-il":   {453, 456, 455, 450, 442, 435, 428, 421, 418, 417, 420, 425, 430, 437, 444, 449, 451, 452, 451, 449, 447, 446, 447, 449}, // MISO
	"us-east-va":      {373, 375, 374, 368, 360, 354, 351, 349, 349, 352, 357, 360, 362, 364, 365, 366, 365, 364, 363, 363, 363, 365, 369, 372}, // PJM
	"us-east-ny":      {288, 285, 281, 275, 271, 266, 262, 260, 259, 259, 264, 268, 271, 273, 274, 273, 273, 273, 273, 274, 275, 279, 283, 287}, // NYIS
	"us-southeast-ga": {431, 435, 438, 440, 440, 436, 433, 430, 429, 429, 430, 430, 428, 421, 412, 408, 407, 407, 408, 408, 408, 409, 414, 424}, // SOCO
}

// RegionCarbonProfile is a region's built-in hourly profile and where it
// comes from. Unknown regions get a zero profile and ok false.
func RegionCarbonProfile(regionID string) (p CarbonProfile, source string, ok bool) {
	r, ok := FindRegion(regionID)
	if !ok {
		return CarbonProfile{}, "", false
	}
	if p, hourly := regionProfiles[regionID]; hourly {
		return p, "hourly means of EIA " + r.BalancingAuth + " 2022 (UTC)", true
	}
	return FlatProfile(r.DefaultCarbon), r.CarbonSource + " (annual mean, flat)", true
}

// OfferCarbonProfile is the profile emissions of an offer are estimated
// with: the provider's own hourly profile when they set one; otherwise,
// when the offer states an intensity other than its region's default, that
// figure flat; otherwise the region's built-in profile.
func OfferCarbonProfile(regionID string, offerCarbon int, override *CarbonProfile) CarbonProfile {
	if override != nil {
		return *override
	}
	r, ok := FindRegion(regionID)
	if ok && offerCarbon > 0 && offerCarbon != r.DefaultCarbon {
		return FlatProfile(offerCarbon)
	}
	p, _, _ := RegionCarbonProfile(regionID)
	return p
}

// EmissionsG estimates grams of CO2e for devices drawing watts each over
// [start, end): Σ over the hours of day it spans of watts × devices ×
// seconds in that hour × the hour's intensity, divided by 3.6×10⁶ and
// rounded half up once, at the end. For a flat profile and whole hours it
// equals watts × devices × hours × intensity / 1000.
func (p CarbonProfile) EmissionsG(watts, devices int64, start, end time.Time) int64 {
	var num int64 // W·s·g/kWh; fits: 1,000 W × 10⁴ devices × 10⁸ s × 1,500 > 2⁶³ only far beyond any request
	t, stop := start.Unix(), end.Unix()
	for t < stop {
		next := (t/3600 + 1) * 3600
		if next > stop {
			next = stop
		}
		h := ((t % 86400) + 86400) % 86400 / 3600
		num += (next - t) * int64(p[h])
		t = next
	}
	return MulDivRound(num, watts*devices, 3_600_000)
}

// PieceEmissions estimates a quote piece's emissions with profile.
func PieceEmissions(pc Piece, profile CarbonProfile) int64 {
	a, _ := FindAccelerator(pc.AcceleratorID)
	return profile.EmissionsG(int64(a.TDPWatts), int64(pc.Devices), pc.Start, pc.End)
}

// ProfileFunc returns the carbon profile for a quote piece's offer.
type ProfileFunc func(Piece) CarbonProfile

// ApplyHourlyEmissions replaces a quote's emissions estimate (and its
// pieces') with one over the hourly profiles of the hours it would run.
func ApplyHourlyEmissions(q *Quote, profile ProfileFunc) {
	q.EmissionsG = 0
	for i := range q.Pieces {
		q.Pieces[i].EmissionsG = PieceEmissions(q.Pieces[i], profile(q.Pieces[i]))
		q.EmissionsG += q.Pieces[i].EmissionsG
	}
}

// CarbonShift is what a carbon-aware start changed about one quote.
type CarbonShift struct {
	Rank       int
	Delay      time.Duration // how much later the quote's Start (its earliest piece's) is
	SavedG     int64         // emissions saved, grams
	ExtraCents Cents         // effective cost added (negative: saved)
	FromG      int64         // emissions at the earliest start
}

// Summary reads like "Starting 6 h later saves 12.0 kg CO2e (−35%) and
// costs $0.00 more." (savings below a kilogram in grams).
func (s CarbonShift) Summary() string {
	cost := s.ExtraCents.String() + " more"
	if s.ExtraCents < 0 {
		cost = (-s.ExtraCents).String() + " less"
	}
	pct := ""
	if s.FromG > 0 {
		pct = fmt.Sprintf(" (−%d%%)", MulDivRound(s.SavedG, 100, s.FromG))
	}
	return fmt.Sprintf("Starting %s later saves %s%s and costs %s.", formatDelay(s.Delay), FormatEmissions(s.SavedG), pct, cost)
}

func formatDelay(d time.Duration) string {
	m := int64(d / time.Minute)
	if m%60 == 0 {
		return fmt.Sprintf("%d h", m/60)
	}
	return fmt.Sprintf("%d h %02d min", m/60, m%60)
}

// MatchFunc is a matcher: an Index's Match or the plain Match over fixed data.
type MatchFunc func(Request, time.Time) (Result, error)

// Carbon-aware start tuning. Profiles repeat daily, so delays beyond 23 h
// cannot be cleaner than one within the first day.
const (
	carbonMaxShiftHours = 23
	// A shift must save at least this share (basis points) of the quote's
	// emissions, so a start is not delayed for a rounding-level gain.
	carbonMinSavingBP = 100
)

// MatchCarbonAware runs match and estimates every quote's emissions over
// the hourly profiles of the hours it would run. With the carbon-aware
// start preference it also re-runs match with the earliest start moved 1
// to 23 hours later (inside the buyer's deadline, which the matcher
// enforces) and, for each quote, takes the same pieces (offers, devices,
// interruptible or not) at the start that emits least, when that saves at
// least 1%; ties go to the earlier start. The shifted quote replaces the
// original at the same rank, and a CarbonShift says what it saved and
// cost. The search is the matcher's, so the shifted pieces fit capacity.
func MatchCarbonAware(match MatchFunc, req Request, now time.Time, profile ProfileFunc) (Result, []CarbonShift, error) {
	res, err := match(req, now)
	if err != nil {
		return res, nil, err
	}
	for i := range res.Quotes {
		ApplyHourlyEmissions(&res.Quotes[i], profile)
	}
	if !req.Preferences.CarbonAwareStart || len(res.Quotes) == 0 {
		return res, nil, nil
	}
	lo := now
	if req.Constraints.EarliestStart.After(now) {
		lo = req.Constraints.EarliestStart
	}
	best := make([]Quote, len(res.Quotes))
	copy(best, res.Quotes)
	sigs := make([]string, len(res.Quotes))
	for i, q := range res.Quotes {
		sigs[i] = shapeSignature(q)
	}
	for h := 1; h <= carbonMaxShiftHours; h++ {
		r2 := req
		r2.Preferences.CarbonAwareStart = false
		r2.Constraints.EarliestStart = lo.Add(time.Duration(h) * time.Hour)
		r2.Limit = MaxQuoteLimit
		if !r2.Constraints.Deadline.IsZero() && !r2.Constraints.Deadline.After(r2.Constraints.EarliestStart) {
			break
		}
		alt, err := match(r2, now)
		if err != nil {
			return res, nil, err
		}
		for _, aq := range alt.Quotes {
			sig := shapeSignature(aq)
			for i := range best {
				if sigs[i] != sig {
					continue
				}
				ApplyHourlyEmissions(&aq, profile)
				if aq.EmissionsG < best[i].EmissionsG {
					best[i] = aq
				}
			}
		}
	}
	var shifts []CarbonShift
	for i, q := range res.Quotes {
		b := best[i]
		saved := q.EmissionsG - b.EmissionsG
		if saved <= 0 || saved*10000 < q.EmissionsG*carbonMinSavingBP {
			continue
		}
		b.Rank, b.Score = q.Rank, q.Score
		res.Quotes[i] = b
		shifts = append(shifts, CarbonShift{Rank: q.Rank, Delay: b.Start.Sub(q.Start), SavedG: saved,
			ExtraCents: b.Cost.Total - q.Cost.Total, FromG: q.EmissionsG})
	}
	return res, shifts, nil
}

// shapeSignature identifies a quote's pieces without their times.
func shapeSignature(q Quote) string {
	var b strings.Builder
	for _, p := range q.Pieces {
		fmt.Fprintf(&b, "%d:%d:%t;", p.OfferID, p.Devices, p.Interruptible)
	}
	return b.String()
}

// CleanestStart finds, in an hourly intensity series, the start hour in
// [from, to] whose window of n hours has the least total intensity, and
// that total; ties go to the earliest. It is the sliding-window form of
// the carbon-aware choice, for series longer than a day (measured data).
// ok is false when no window fits.
func CleanestStart(series []int, from, to, n int) (start int, total int64, ok bool) {
	if n < 1 || from < 0 || from > to || to+n > len(series) {
		return 0, 0, false
	}
	var sum int64
	for i := from; i < from+n; i++ {
		sum += int64(series[i])
	}
	start, total = from, sum
	for s := from + 1; s <= to; s++ {
		sum += int64(series[s+n-1]) - int64(series[s-1])
		if sum < total {
			start, total = s, sum
		}
	}
	return start, total, true
}
