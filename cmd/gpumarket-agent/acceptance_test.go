package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSimulatedAcceptance(t *testing.T) {
	acc, n, err := parseSimulate("A100 80GB SXM x4")
	if err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	for _, tc := range []struct {
		fault   string
		devices int
		want    []float64
	}{
		// The catalogue publishes 312 TFLOPS BF16 for the A100 80GB SXM.
		{"", 4, []float64{312, 312, 312, 312}},
		{"slow=0.75", 4, []float64{234, 234, 234, 234}},
		{"slow=0.333", 2, []float64{103.9, 103.9}},
		{"drop-device=2@0s", 4, []float64{312, 312, 0, 312}},
		{"", 6, []float64{312, 312, 312, 312, 0, 0}}, // more devices than the host has
	} {
		f, err := parseFaults(tc.fault)
		if err != nil {
			t.Fatal(err)
		}
		sim := &simulated{acc: acc, count: n, faults: f, start: t0, now: clock.Now}
		r := acceptanceTester{sim: sim, now: clock.Now, log: testLog(t)}.run(context.Background(), assignment{PieceID: 31, Devices: tc.devices})
		if r.Metric != "bf16_tflops" || !slices.Equal(r.PerDevice, tc.want) || r.Error != "" || r.DurationSeconds != 0 {
			t.Errorf("%q on %d devices: %+v, want %v", tc.fault, tc.devices, r, tc.want)
		}
	}
}

func TestAcceptanceCommand(t *testing.T) {
	dir := t.TempDir()
	clock := &fakeClock{t: t0}
	script := func(body string) []string {
		path := filepath.Join(dir, "bench.sh")
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return []string{path}
	}
	for _, tc := range []struct {
		name, body string
		want       acceptanceReport
	}{
		{"figures", `echo "benchmarking $GPUMARKET_DEVICES devices" >&2; echo '{"metric": "bf16_tflops", "per_device": [912.4, 905.1]}'`,
			acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{912.4, 905.1}}},
		{"metric left out", `echo '{"per_device": [700, 0]}'`, acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{700, 0}}},
		{"wrong count", `echo '{"per_device": [700]}'`,
			acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{}, Error: "the acceptance command reported 1 devices; the piece has 2"}},
		{"not JSON", `echo "912 TFLOPS"`,
			acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{}, Error: `the acceptance command did not print {"metric": …, "per_device": […]}`}},
		{"negative", `echo '{"per_device": [-1, 5]}'`,
			acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{}, Error: "the acceptance command reported a figure that is not a non-negative number"}},
		// What the command says on standard error stays on the host.
		{"fails", `echo "CUDA error: secret path /home/provider/x" >&2; exit 2`,
			acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{}, Error: "the acceptance command failed on the host: exit status 2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := acceptanceTester{command: script(tc.body), now: clock.Now, log: testLog(t)}.run(context.Background(), assignment{PieceID: 31, Devices: 2})
			if r.Metric != tc.want.Metric || !slices.Equal(r.PerDevice, tc.want.PerDevice) || r.Error != tc.want.Error || r.DurationSeconds != 0 {
				t.Errorf("report %+v, want %+v", r, tc.want)
			}
		})
	}
}

func TestNoAcceptanceCommandIsReportedAsSuch(t *testing.T) {
	r := acceptanceTester{now: time.Now, log: testLog(t)}.run(context.Background(), assignment{PieceID: 31, Devices: 2})
	if r.Error == "" || !strings.Contains(r.Error, "-acceptance-cmd") || len(r.PerDevice) != 0 || r.Metric != "bf16_tflops" {
		t.Errorf("report %+v", r)
	}
}
