package market

import (
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

// WorkMetric is what a measured-work report measures.
type WorkMetric string

// Work metrics.
const (
	MetricStepsPerHour WorkMetric = "steps_per_hour" // training steps per hour
	MetricTokensPerSec WorkMetric = "tokens_per_sec" // generated tokens per second at a latency percentile
)

// Label is the display name of the metric's unit.
func (m WorkMetric) Label() string {
	switch m {
	case MetricStepsPerHour:
		return "training steps/hour"
	case MetricTokensPerSec:
		return "tokens/s"
	}
	return string(m)
}

// LatencyPercentiles are the percentiles a tokens-per-second report may state.
var LatencyPercentiles = []int{50, 90, 95, 99}

// Limits on work reports.
const (
	MaxWorkValue       = 1_000_000_000
	MaxWorkloadLen     = 80
	MaxWorkNoteLen     = 500
	MaxObservedMinutes = 366 * 24 * 60
)

// WorkReport is a buyer's measurement of useful work on one offer of a
// reservation: throughput while running, over ObservedMinutes of wall
// clock, of which LostMinutes went to restarts and stalls. It is
// "measured": neither the provider's guarantee nor its estimate.
type WorkReport struct {
	ID            int64
	ReservationID int64
	OfferID       int64
	ReporterID    int64
	AcceleratorID string // the offer's, at report time
	Devices       int    // the piece's devices: throughput is for all of them
	Metric        WorkMetric
	// LatencyPercentile is the percentile at which tokens/s was measured
	// (one of LatencyPercentiles); 0 for steps per hour.
	LatencyPercentile int
	Workload          string // what ran, e.g. "Llama 3.1 8B, vLLM, batch 32"
	Value             int64  // throughput while running, whole units of Metric
	ObservedMinutes   int
	LostMinutes       int
	Note              string
	CreatedAt         time.Time
}

// ValidateWorkReport checks a report's fields and trims its text. Fields
// are named as in the report form.
func ValidateWorkReport(r *WorkReport) error {
	p := Problems{}
	r.Workload, r.Note = strings.TrimSpace(r.Workload), strings.TrimSpace(r.Note)
	switch r.Metric {
	case MetricStepsPerHour:
		r.LatencyPercentile = 0
	case MetricTokensPerSec:
		ok := false
		for _, pc := range LatencyPercentiles {
			ok = ok || pc == r.LatencyPercentile
		}
		if !ok {
			p.Add("latency_percentile", "Choose the latency percentile the tokens/s were measured at.")
		}
	default:
		p.Add("metric", "Choose training steps per hour or tokens per second.")
	}
	if r.Workload == "" || utf8.RuneCountInString(r.Workload) > MaxWorkloadLen {
		p.Add("workload", fmt.Sprintf("Name what ran (up to %d characters), e.g. “Llama 3.1 8B, vLLM”.", MaxWorkloadLen))
	}
	if r.Value < 1 || r.Value > MaxWorkValue {
		p.Add("value", "Enter the measured throughput as a whole number above zero.")
	}
	if r.ObservedMinutes < 1 || r.ObservedMinutes > MaxObservedMinutes {
		p.Add("observed_minutes", "Enter how many minutes the measurement covers.")
	}
	if r.LostMinutes < 0 || (r.ObservedMinutes > 0 && r.LostMinutes > r.ObservedMinutes) {
		p.Add("lost_minutes", "Time lost must be between 0 and the minutes observed.")
	}
	if utf8.RuneCountInString(r.Note) > MaxWorkNoteLen {
		p.Add("note", fmt.Sprintf("Keep the note under %d characters.", MaxWorkNoteLen))
	}
	textField(p, "workload", r.Workload, false)
	textField(p, "note", r.Note, true)
	if r.Devices < 1 {
		p.Add("offer", "Choose the offer the measurement was made on.")
	}
	return p.Err()
}

// EffectiveMilliPerDevice is the useful throughput per device in
// thousandths of a unit: Value × (observed − lost) / observed / devices,
// rounded half up once.
func (r WorkReport) EffectiveMilliPerDevice() int64 {
	if r.ObservedMinutes <= 0 || r.Devices <= 0 {
		return 0
	}
	return MulDivRound(r.Value*1000, int64(r.ObservedMinutes-r.LostMinutes), int64(r.ObservedMinutes)*int64(r.Devices))
}

// MeasuredFigure aggregates the reports of one metric (and latency
// percentile) on one offer or one accelerator model.
type MeasuredFigure struct {
	Metric            WorkMetric
	LatencyPercentile int
	Reports           int
	// MedianMilliPerDevice is the median (nearest rank) of the reports'
	// effective throughput per device, in thousandths of a unit.
	MedianMilliPerDevice int64
	// LostBP is the share of observed time lost to restarts and stalls over
	// all reports, in basis points (Σ lost / Σ observed).
	LostBP    int64
	Workloads []string // distinct workloads, sorted
}

// Unit is the figure's unit, e.g. "tokens/s at p95 latency".
func (f MeasuredFigure) Unit() string {
	if f.Metric == MetricTokensPerSec {
		return fmt.Sprintf("tokens/s at p%d latency", f.LatencyPercentile)
	}
	return f.Metric.Label()
}

// AggregateWork groups reports by metric and latency percentile and
// returns one figure per group, steps first, then tokens by percentile.
func AggregateWork(reports []WorkReport) []MeasuredFigure {
	type key struct {
		m  WorkMetric
		pc int
	}
	type acc struct {
		vals           []int64
		lost, observed int64
		workloads      map[string]bool
	}
	groups := map[key]*acc{}
	for _, r := range reports {
		k := key{r.Metric, r.LatencyPercentile}
		a := groups[k]
		if a == nil {
			a = &acc{workloads: map[string]bool{}}
			groups[k] = a
		}
		a.vals = append(a.vals, r.EffectiveMilliPerDevice())
		a.lost += int64(r.LostMinutes)
		a.observed += int64(r.ObservedMinutes)
		a.workloads[r.Workload] = true
	}
	out := make([]MeasuredFigure, 0, len(groups))
	for k, a := range groups {
		sort.Slice(a.vals, func(i, j int) bool { return a.vals[i] < a.vals[j] })
		f := MeasuredFigure{Metric: k.m, LatencyPercentile: k.pc, Reports: len(a.vals), MedianMilliPerDevice: NearestRank(a.vals, 50)}
		if a.observed > 0 {
			f.LostBP = MulDivRound(a.lost, 10000, a.observed)
		}
		for w := range a.workloads {
			f.Workloads = append(f.Workloads, w)
		}
		sort.Strings(f.Workloads)
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Metric != out[j].Metric {
			return out[i].Metric == MetricStepsPerHour
		}
		return out[i].LatencyPercentile < out[j].LatencyPercentile
	})
	return out
}

// CostPerUnitOfWork is what useful work costs at a price per device-hour
// given a measured figure: cents per 1,000 training steps, or cents per
// million tokens, rounded half up. ok is false when nothing was measured.
func CostPerUnitOfWork(price Cents, f MeasuredFigure) (cost Cents, unit string, ok bool) {
	if f.MedianMilliPerDevice <= 0 || price <= 0 {
		return 0, "", false
	}
	switch f.Metric {
	case MetricStepsPerHour:
		// price / (steps per device-hour) × 1,000 steps.
		return Cents(MulDivRound(int64(price), 1000*1000, f.MedianMilliPerDevice)), "per 1,000 steps", true
	case MetricTokensPerSec:
		// price / (tokens/s × 3,600 per device-hour) × 1,000,000 tokens.
		return Cents(MulDivRound(int64(price), 1_000_000*1000, f.MedianMilliPerDevice*3600)), "per million tokens", true
	}
	return 0, "", false
}

// FormatMilli formats a non-negative value in thousandths the way every
// measured figure is written: one decimal below 100 ("12.5"), whole
// numbers with thousands separators from 100 ("5,773"), rounded half up —
// so a figure and the report beside it never differ in precision.
func FormatMilli(v int64) string {
	if v >= 99_950 {
		return FormatInt((v + 500) / 1000)
	}
	tenths := (v + 50) / 100
	if tenths%10 == 0 {
		return FormatInt(tenths / 10)
	}
	return fmt.Sprintf("%s.%d", FormatInt(tenths/10), tenths%10)
}
