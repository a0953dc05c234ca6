package market

import "testing"

func TestWorkReportValidateAndAggregate(t *testing.T) {
	r := WorkReport{Devices: 8, Metric: MetricTokensPerSec, LatencyPercentile: 95, Workload: "  Llama 3.1 8B ",
		Value: 16000, ObservedMinutes: 600, LostMinutes: 60}
	if err := ValidateWorkReport(&r); err != nil || r.Workload != "Llama 3.1 8B" {
		t.Fatalf("valid report: %v %q", err, r.Workload)
	}
	// 16,000 tok/s × 540/600 / 8 devices = 1,800 tok/s per device.
	if got := r.EffectiveMilliPerDevice(); got != 1_800_000 {
		t.Errorf("effective %d", got)
	}
	bad := []struct {
		field string
		r     WorkReport
	}{
		{"metric", WorkReport{Devices: 1, Metric: "flops", Workload: "x", Value: 1, ObservedMinutes: 1}},
		{"latency_percentile", WorkReport{Devices: 1, Metric: MetricTokensPerSec, LatencyPercentile: 42, Workload: "x", Value: 1, ObservedMinutes: 1}},
		{"workload", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Value: 1, ObservedMinutes: 1}},
		{"value", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Workload: "x", ObservedMinutes: 1}},
		{"observed_minutes", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Workload: "x", Value: 1}},
		{"lost_minutes", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Workload: "x", Value: 1, ObservedMinutes: 10, LostMinutes: 11}},
		{"offer", WorkReport{Metric: MetricStepsPerHour, Workload: "x", Value: 1, ObservedMinutes: 1}},
		{"workload", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Workload: "Llama\x00", Value: 1, ObservedMinutes: 1}},
		{"note", WorkReport{Devices: 1, Metric: MetricStepsPerHour, Workload: "x", Value: 1, ObservedMinutes: 1, Note: "ok\n\x1b[2J"}},
	}
	for _, tc := range bad {
		err := ValidateWorkReport(&tc.r)
		if f := FieldErrors(err); len(f) != 1 || f[tc.field] == "" {
			t.Errorf("%s: %v", tc.field, f)
		}
	}

	reports := []WorkReport{
		{Devices: 1, Metric: MetricStepsPerHour, Workload: "b", Value: 1000, ObservedMinutes: 60},
		{Devices: 2, Metric: MetricStepsPerHour, Workload: "a", Value: 3000, ObservedMinutes: 60, LostMinutes: 30},
		{Devices: 1, Metric: MetricStepsPerHour, Workload: "a", Value: 5000, ObservedMinutes: 60},
		r,
	}
	figs := AggregateWork(reports)
	if len(figs) != 2 {
		t.Fatalf("figures %+v", figs)
	}
	s := figs[0]
	// Effective per device: 1,000; 750; 5,000 → median (nearest rank) 1,000.
	if s.Metric != MetricStepsPerHour || s.Reports != 3 || s.MedianMilliPerDevice != 1_000_000 || s.LostBP != 1667 ||
		len(s.Workloads) != 2 || s.Workloads[0] != "a" || s.Unit() != "training steps/hour" {
		t.Errorf("steps %+v", s)
	}
	tk := figs[1]
	if tk.Reports != 1 || tk.LatencyPercentile != 95 || tk.Unit() != "tokens/s at p95 latency" || tk.LostBP != 1000 {
		t.Errorf("tokens %+v", tk)
	}
	// $2.00 per device-hour at 1,000 steps/device-hour: $2.00 per 1,000 steps.
	if c, unit, ok := CostPerUnitOfWork(200, s); !ok || c != 200 || unit != "per 1,000 steps" {
		t.Errorf("steps cost %v %q %v", c, unit, ok)
	}
	// $2.00 per device-hour at 1,800 tok/s = 6.48M tokens/hour: $0.31 per million.
	if c, unit, ok := CostPerUnitOfWork(200, tk); !ok || c != 31 || unit != "per million tokens" {
		t.Errorf("tokens cost %v %q %v", c, unit, ok)
	}
	if _, _, ok := CostPerUnitOfWork(200, MeasuredFigure{}); ok {
		t.Error("cost without measurement")
	}
	if FormatMilli(1_800_000) != "1,800" || FormatMilli(1250) != "1.3" {
		t.Errorf("format %s %s", FormatMilli(1_800_000), FormatMilli(1250))
	}
}
