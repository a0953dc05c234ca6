package market

import (
	"fmt"
	"math"
	"strings"
	"unicode/utf8"
)

// AcceptanceResult is what a provider's agent measured when a rental
// started (docs/agent.md): one figure per device of the piece on the node,
// in thousandths of the metric's unit, or the error that kept the test
// from running.
type AcceptanceResult struct {
	Metric          FigureKind
	PerDeviceMilli  []int64
	DurationSeconds int
	Error           string
}

// AcceptanceMetrics are the figures an acceptance test may measure: those
// stated per device.
var AcceptanceMetrics = []FigureKind{FigureBF16TFLOPS, FigureMemBandwidth, FigureTokensPerSec}

// maxAcceptanceValue bounds one device's figure (a billion units).
const maxAcceptanceValue = 1e9

// AcceptanceFromReport builds a result from the agent's report: per-device
// figures as numbers (912.4), rounded to thousandths. It returns an invalid
// *Error naming each bad field.
func AcceptanceFromReport(metric string, perDevice []float64, duration int, errText string) (AcceptanceResult, error) {
	p := Problems{}
	r := AcceptanceResult{Metric: FigureKind(metric), DurationSeconds: duration, Error: cleanText(errText)}
	known := false
	for _, m := range AcceptanceMetrics {
		known = known || m == r.Metric
	}
	if !known {
		names := make([]string, len(AcceptanceMetrics))
		for i, m := range AcceptanceMetrics {
			names[i] = string(m)
		}
		p.Add("metric", "metric must be one of "+strings.Join(names, ", ")+".")
	}
	switch {
	case r.Error == "" && len(perDevice) == 0:
		p.Add("per_device", "per_device needs one figure per device (or report the error).")
	case len(perDevice) > MaxHeartbeatDevices:
		p.Add("per_device", fmt.Sprintf("per_device has at most %d figures.", MaxHeartbeatDevices))
	}
	for i, v := range perDevice {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > maxAcceptanceValue {
			p.Add("per_device", fmt.Sprintf("Figure %d must be a non-negative number.", i))
			break
		}
		r.PerDeviceMilli = append(r.PerDeviceMilli, int64(math.Round(v*1000)))
	}
	if duration < 0 || duration > 24*3600 {
		p.Add("duration_seconds", "duration_seconds must be between 0 and 86400.")
	}
	if utf8.RuneCountInString(r.Error) > 1000 {
		p.Add("error", "error is at most 1000 characters.")
	}
	if err := p.Err(); err != nil {
		return AcceptanceResult{}, err
	}
	return r, nil
}

// Underperformance compares an acceptance result with the offer's
// guaranteed figure for its metric (in the figure's unit) on the devices a
// piece holds on the node (at most held of the results count). A device is
// below when its figure is under the guaranteed one by more than
// AcceptanceToleranceBP. It returns how many devices are below and their
// mean shortfall in basis points of the guaranteed figure, rounded half up
// and at least 1 (the severity of an underperformance incident); zero
// devices when none is below, the result is an error, or nothing is
// guaranteed.
func Underperformance(guaranteed int64, r AcceptanceResult, held int) (devices, shortfallBP int) {
	if guaranteed <= 0 || r.Error != "" {
		return 0, 0
	}
	want := guaranteed * 1000 // thousandths, as the result
	var sum int64             // shortfalls in thousandths
	for i, m := range r.PerDeviceMilli {
		if i >= held {
			break
		}
		if m*10000 < want*(10000-AcceptanceToleranceBP) {
			devices++
			sum += want - m
		}
	}
	if devices == 0 {
		return 0, 0
	}
	den := want * int64(devices)
	bp := (sum*10000*2 + den) / (2 * den)
	return devices, int(min(max(bp, 1), 10000))
}

// MilliFigure writes a figure measured in thousandths of its unit for
// people, rounded to the unit: 912400 TFLOPS thousandths → "912 TFLOPS".
func MilliFigure(k FigureKind, milli int64) string {
	return FormatFigure(k, (milli+500)/1000)
}

// FigureKindLabel names a figure kind for people ("BF16 throughput per
// device"), or returns the kind itself when unknown.
func FigureKindLabel(k FigureKind) string {
	for _, fk := range FigureKinds {
		if fk.Kind == k {
			return fk.Label
		}
	}
	return string(k)
}
