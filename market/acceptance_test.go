package market

import (
	"math"
	"strings"
	"testing"
)

func TestAcceptanceFromReport(t *testing.T) {
	r, err := AcceptanceFromReport("bf16_tflops", []float64{912.4, 905.1, 0}, 30, "")
	if err != nil || r.Metric != FigureBF16TFLOPS || len(r.PerDeviceMilli) != 3 || r.PerDeviceMilli[0] != 912400 ||
		r.PerDeviceMilli[1] != 905100 || r.PerDeviceMilli[2] != 0 || r.DurationSeconds != 30 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err := AcceptanceFromReport("bf16_tflops", nil, 0, "cuda error: out of memory"); err != nil || r.Error == "" {
		t.Fatalf("an error report: %+v %v", r, err)
	}
	bad := []struct {
		metric string
		vals   []float64
		dur    int
		field  string
	}{
		{"allreduce_busbw", []float64{1}, 1, "metric"},
		{"bf16_tflops", nil, 1, "per_device"},
		{"bf16_tflops", []float64{-1}, 1, "per_device"},
		{"bf16_tflops", []float64{math.NaN()}, 1, "per_device"},
		{"bf16_tflops", make([]float64, MaxHeartbeatDevices+1), 1, "per_device"},
		{"bf16_tflops", []float64{1}, -1, "duration_seconds"},
	}
	for _, b := range bad {
		_, err := AcceptanceFromReport(b.metric, b.vals, b.dur, "")
		if FieldErrors(err)[b.field] == "" || len(FieldErrors(err)) != 1 {
			t.Errorf("%+v: %v, want a problem with %s only", b, err, b.field)
		}
	}
}

func TestUnderperformance(t *testing.T) {
	res := func(vals ...int64) AcceptanceResult {
		for i := range vals {
			vals[i] *= 1000
		}
		return AcceptanceResult{Metric: FigureBF16TFLOPS, PerDeviceMilli: vals}
	}
	tests := []struct {
		name       string
		guaranteed int64
		r          AcceptanceResult
		held       int
		devices    int
		bp         int
	}{
		{"all at the figure", 1000, res(1000, 1000), 2, 0, 0},
		{"within the tolerance", 1000, res(900, 950), 2, 0, 0},
		{"one just below", 1000, res(899, 1000), 2, 1, 1010},
		{"one dead, one slow", 1000, res(0, 800, 1000), 3, 2, 6000},
		{"only the piece's devices count", 1000, res(1000, 0, 0), 2, 1, 10000},
		{"a failed test measures nothing", 1000, AcceptanceResult{Error: "boom"}, 2, 0, 0},
		{"nothing guaranteed", 0, res(0), 1, 0, 0},
		{"rounding half up", 3, AcceptanceResult{PerDeviceMilli: []int64{2699}}, 1, 1, 1003},
	}
	for _, tt := range tests {
		d, bp := Underperformance(tt.guaranteed, tt.r, tt.held)
		if d != tt.devices || bp != tt.bp {
			t.Errorf("%s: %d devices, %d bp; want %d, %d", tt.name, d, bp, tt.devices, tt.bp)
		}
	}
	if MilliFigure(FigureBF16TFLOPS, 912400) != "912 TFLOPS" || MilliFigure(FigureBF16TFLOPS, 912500) != "913 TFLOPS" {
		t.Error(MilliFigure(FigureBF16TFLOPS, 912400), MilliFigure(FigureBF16TFLOPS, 912500))
	}
}

// An underperformance credits its shortfall of the affected device-hours'
// amount, as an SLA credit beside a degraded network (both count).
func TestSettleUnderperformance(t *testing.T) {
	p := slaPiece(false) // 4 devices × 10 h for $4,000
	slow := inc(1, IncidentUnderperformance, 5, 10, 2)
	slow.DegradationBP = 2000
	net := inc(2, IncidentNetworkDegradation, 5, 10, 4)
	net.DegradationBP = 1000
	terms := SLATerms{BillingBasis: BillingWallClock, UptimeBP: 9950, CreditCapBP: 10000}
	st, err := Settle(slaInput(p, terms, slow, net))
	if err != nil {
		t.Fatal(err)
	}
	ps := st.Pieces[0]
	// 2 devices × 5 h of 4 × 10 h at 20 %: 400000 × 36000 × 2000 / (144000 × 10000) = 20000;
	// the network: 4 × 5 h at 10 %: 400000 × 72000 × 1000 / (144000 × 10000) = 20000.
	if len(ps.Clauses) != 2 || ps.Clauses[0].Kind != ClauseUnderperformance || ps.Clauses[0].DeviceSeconds != 36000 ||
		ps.Clauses[0].RateBP != 2000 || ps.Clauses[0].Cents != 20000 || !ps.Clauses[0].SLA ||
		ps.Clauses[1].Kind != ClauseNetworkDegradation || ps.Clauses[1].Cents != 20000 {
		t.Fatalf("clauses %+v", ps.Clauses)
	}
	if ps.UptimeBP != 10000 || ps.Refund != 40000 || !strings.Contains(ps.Clauses[0].Label, "Underperformance, 2 of 4 devices") {
		t.Fatalf("uptime %d refund %s label %q", ps.UptimeBP, ps.Refund, ps.Clauses[0].Label)
	}
	// A severity is required for underperformance.
	slow.DegradationBP = 0
	if err := ValidateIncident(&slow, p); FieldErrors(err)["degradation"] == "" {
		t.Fatalf("underperformance without a severity: %v", err)
	}
}
