package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// acceptanceMetric is the figure the acceptance test measures: BF16
// throughput per device, the offer's guaranteed figure it is compared with.
var acceptanceMetric = string(market.FigureBF16TFLOPS)

// acceptanceTimeout bounds one acceptance run; a benchmark that takes
// longer is reported as failed.
const acceptanceTimeout = 15 * time.Minute

// acceptanceTester runs the acceptance test for a piece: the provider's
// command (-acceptance-cmd) or, on a simulated host, the simulated figure.
type acceptanceTester struct {
	command []string   // the provider's benchmark, or nil
	sim     *simulated // the simulated host, or nil
	now     func() time.Time
	log     *slog.Logger
}

// configured reports whether there is any test to run.
func (t acceptanceTester) configured() bool {
	return t.command != nil || t.sim != nil
}

// run measures the piece's devices. It always returns a report: a failure
// is its Error, with no figures.
func (t acceptanceTester) run(ctx context.Context, a assignment) acceptanceReport {
	started := t.now()
	var r acceptanceReport
	switch {
	case t.command != nil:
		r = t.runCommand(ctx, a)
	case t.sim != nil:
		r = t.simulate(a)
	default:
		r = acceptanceReport{Error: "no acceptance command is configured on this host (-acceptance-cmd)"}
	}
	if r.Metric == "" {
		r.Metric = acceptanceMetric
	}
	if r.DurationSeconds == 0 {
		r.DurationSeconds = int64(math.Round(t.now().Sub(started).Seconds()))
	}
	if r.Error != "" {
		r.PerDevice = []float64{}
	}
	return r
}

// simulate is the simulated host's result: the catalogue's published BF16
// figure for the model on each of the piece's devices, scaled by the slow
// fault, and 0 for a device that has disappeared.
func (t acceptanceTester) simulate(a assignment) acceptanceReport {
	present := map[int]bool{}
	for _, d := range t.sim.Probe(context.Background()).Devices {
		present[d.Index] = d.Healthy
	}
	per := make([]float64, a.Devices)
	for i := range per {
		if present[i] {
			per[i] = math.Round(float64(t.sim.acc.BF16TFLOPS)*t.sim.faults.slow*10) / 10
		}
	}
	return acceptanceReport{Metric: acceptanceMetric, PerDevice: per}
}

// runCommand runs the provider's benchmark with the assignment (as for the
// hooks) and reads its standard output: a JSON object
// {"metric": "bf16_tflops", "per_device": [912.4, 905.1, …]} with one
// figure per device of the piece. What it prints on standard error stays
// in the agent's log: the server hears only how the command failed.
func (t acceptanceTester) runCommand(ctx context.Context, a assignment) acceptanceReport {
	out, err := runCommand(ctx, t.command, "acceptance", a, acceptanceTimeout)
	if err != nil {
		// The command's own output stays in the agent's log, on the host.
		t.log.Warn("acceptance command failed", "piece", a.PieceID, "err", err)
		reason := "it did not run"
		if ce := (*commandError)(nil); errors.As(err, &ce) {
			reason = ce.Reason
		}
		return acceptanceReport{Error: "the acceptance command failed on the host: " + clip(reason, 200)}
	}
	var r acceptanceReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		return acceptanceReport{Error: "the acceptance command did not print {\"metric\": …, \"per_device\": […]}"}
	}
	if len(r.PerDevice) != a.Devices {
		return acceptanceReport{Error: fmt.Sprintf("the acceptance command reported %d devices; the piece has %d", len(r.PerDevice), a.Devices)}
	}
	for _, v := range r.PerDevice {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			return acceptanceReport{Error: "the acceptance command reported a figure that is not a non-negative number"}
		}
	}
	if r.Metric == "" {
		r.Metric = acceptanceMetric
	}
	r.Error = ""
	return r
}
