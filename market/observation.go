package market

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"
)

// The provider's agent runs on the provider's host with the provider's
// token, so what it reports is the provider's word. An observation is the
// buyer's: what the buyer's own machine sees on the rented node (the
// script on the reservation page, docs/agent.md). A mismatch with the
// agent's report is a red flag and evidence in disputes.

// Bounds of an observation.
const (
	// MaxObservationDevices bounds the devices one observation may list.
	MaxObservationDevices = MaxHeartbeatDevices
	// MaxObservationsPerPiece bounds the observations a buyer may post for
	// one piece.
	MaxObservationsPerPiece = 20
	// ObservationBenchToleranceBP is how far below the agent's acceptance
	// figure the buyer's benchmark may be before it contradicts it (30 %).
	ObservationBenchToleranceBP = 3000
	// ObservationWindowDays is how far back the offer page counts
	// contradicting observations.
	ObservationWindowDays = 90
	maxObservedTFLOPS     = 100_000
	maxObservedName       = 128
)

// ObservationBenchKinds are the benchmarks an observation may report: a
// dense half-precision matrix multiplication, comparable with the agent's
// BF16 acceptance figure.
var ObservationBenchKinds = []string{"matmul_fp16", "matmul_bf16"}

// ObservedDevice is one accelerator as the buyer's machine lists it.
type ObservedDevice struct {
	Name      string
	MemoryMiB int64
}

// Observation is what the buyer's machine reported for a piece: its
// devices and, optionally (Kind ""), a short timed benchmark on one device
// in thousandths of a TFLOPS.
type Observation struct {
	PieceID      int64
	Devices      []ObservedDevice
	BenchKind    string
	BenchMilli   int64 // TFLOPS thousandths, per device
	BenchSeconds int
}

// NewObservation builds an observation from the buyer's report (TFLOPS as
// a number, rounded to thousandths; kind "" when no benchmark ran). It
// trims the strings and returns an invalid *Error naming each bad field.
func NewObservation(pieceID int64, devices []ObservedDevice, kind string, tflops float64, seconds int) (Observation, error) {
	p := Problems{}
	o := Observation{PieceID: pieceID, BenchKind: strings.TrimSpace(kind), BenchSeconds: seconds}
	if pieceID < 1 {
		p.Add("piece_id", "piece_id must be the id of one of the reservation's pieces.")
	}
	switch {
	case len(devices) == 0:
		p.Add("devices", "devices must list at least one device (what nvidia-smi shows).")
	case len(devices) > MaxObservationDevices:
		p.Add("devices", fmt.Sprintf("devices lists at most %d devices.", MaxObservationDevices))
	}
	for i, d := range devices {
		if i >= MaxObservationDevices {
			break
		}
		d.Name = cleanText(d.Name)
		switch {
		case d.Name == "":
			p.Add("devices", fmt.Sprintf("Device %d: name is required.", i))
		case utf8.RuneCountInString(d.Name) > maxObservedName:
			p.Add("devices", fmt.Sprintf("Device %d: name is at most %d characters.", i, maxObservedName))
		case d.MemoryMiB < 0 || d.MemoryMiB > 16<<20:
			p.Add("devices", fmt.Sprintf("Device %d: memory_mib must be between 0 and %d.", i, 16<<20))
		}
		o.Devices = append(o.Devices, d)
	}
	if o.BenchKind != "" {
		known := false
		for _, k := range ObservationBenchKinds {
			known = known || k == o.BenchKind
		}
		if !known {
			p.Add("benchmark.kind", "benchmark.kind must be one of "+strings.Join(ObservationBenchKinds, ", ")+".")
		}
		if math.IsNaN(tflops) || math.IsInf(tflops, 0) || tflops < 0 || tflops > maxObservedTFLOPS {
			p.Add("benchmark.tflops", fmt.Sprintf("benchmark.tflops must be a number between 0 and %d.", maxObservedTFLOPS))
		} else {
			o.BenchMilli = int64(math.Round(tflops * 1000))
		}
		if seconds < 1 || seconds > 3600 {
			p.Add("benchmark.seconds", "benchmark.seconds must be between 1 and 3600.")
		}
	} else if tflops != 0 || seconds != 0 {
		p.Add("benchmark.kind", "benchmark.kind is required with a benchmark.")
	}
	if err := p.Err(); err != nil {
		return Observation{}, err
	}
	return o, nil
}

// AgentReport is what the provider's agent reported for the node an
// observation is compared with: the devices of its latest heartbeat (nil:
// none yet) and the mean per-device figure of its acceptance test for the
// piece in thousandths of a BF16 TFLOPS (0: none).
type AgentReport struct {
	Devices    []HostDevice
	BenchMilli int64
}

// CompareObservation compares the buyer's observation with the piece, the
// offer's listing and the agent's report; held is how many devices the
// piece holds on the node. It returns one reason per mismatch, nil when
// the buyer's machine agrees:
//   - fewer devices than the piece holds;
//   - a device whose name is not the listed accelerator
//     (NameMatchesAccelerator), or not the agent's name for that device;
//   - a device's memory more than MemoryToleranceBP below the listing's
//     (read as GB, the smaller reading) or below the agent's figure for it;
//   - a benchmark more than ObservationBenchToleranceBP below the agent's.
func CompareObservation(obs Observation, held int, o Offer, agent AgentReport) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf(format, args...))
	}
	if len(obs.Devices) < held {
		r := fmt.Sprintf("your machine sees %d devices; the piece holds %d", len(obs.Devices), held)
		if len(agent.Devices) > 0 {
			r += fmt.Sprintf(" and the provider's agent reported %d", len(agent.Devices))
		}
		out = append(out, r)
	}
	acc, known := FindAccelerator(o.AcceleratorID)
	below := func(have, want int64) bool { return want > 0 && have*10000 < want*(10000-MemoryToleranceBP) }
	for i, d := range obs.Devices {
		if len(out) >= 2*maxDifferences {
			break
		}
		if known && !NameMatchesAccelerator(d.Name, acc) {
			add("device %d is %q, not the listed %s %s", i, d.Name, acc.Vendor, acc.Name)
		} else if i < len(agent.Devices) && agent.Devices[i].Name != "" && !sameDeviceName(d.Name, agent.Devices[i].Name) {
			add("device %d is %q; the provider's agent reported %q", i, d.Name, agent.Devices[i].Name)
		}
		if d.MemoryMiB <= 0 {
			continue
		}
		if below(d.MemoryMiB<<20, int64(o.MemoryGB)*1_000_000_000) {
			add("device %d has %s MiB of memory; the listing has %d GB", i, FormatInt(d.MemoryMiB), o.MemoryGB)
		} else if i < len(agent.Devices) && below(d.MemoryMiB, agent.Devices[i].MemoryMiB) {
			add("device %d has %s MiB of memory; the provider's agent reported %s MiB", i, FormatInt(d.MemoryMiB), FormatInt(agent.Devices[i].MemoryMiB))
		}
	}
	if obs.BenchKind != "" && agent.BenchMilli > 0 && obs.BenchMilli*10000 < agent.BenchMilli*(10000-ObservationBenchToleranceBP) {
		add("your benchmark measured %s TFLOPS; the provider's agent reported %s TFLOPS per device",
			FormatInt((obs.BenchMilli+500)/1000), FormatInt((agent.BenchMilli+500)/1000))
	}
	return out
}

// sameDeviceName compares two device names as words, ignoring case and
// punctuation.
func sameDeviceName(a, b string) bool {
	return strings.Join(nameWords(a), " ") == strings.Join(nameWords(b), " ")
}

// ObservationSummary describes the devices and benchmark the buyer's
// machine reported, for people: `2 × "NVIDIA H100 80GB HBM3" (81,559 MiB);
// matmul_fp16 612 TFLOPS in 10 s`.
func ObservationSummary(obs Observation) string {
	s := deviceSummary(len(obs.Devices), func(i int) (string, int64) { return obs.Devices[i].Name, obs.Devices[i].MemoryMiB })
	if obs.BenchKind != "" {
		s += fmt.Sprintf("; %s %s TFLOPS in %d s", obs.BenchKind, FormatInt((obs.BenchMilli+500)/1000), obs.BenchSeconds)
	}
	return s
}

// AgentSummary describes the agent's report in the same words.
func AgentSummary(a AgentReport) string {
	if len(a.Devices) == 0 && a.BenchMilli == 0 {
		return "nothing yet"
	}
	s := deviceSummary(len(a.Devices), func(i int) (string, int64) { return a.Devices[i].Name, a.Devices[i].MemoryMiB })
	if a.BenchMilli > 0 {
		s += fmt.Sprintf("; acceptance test %s TFLOPS per device", FormatInt((a.BenchMilli+500)/1000))
	}
	return s
}

// deviceSummary groups consecutive devices of the same name and memory.
func deviceSummary(n int, at func(int) (string, int64)) string {
	if n == 0 {
		return "no devices"
	}
	var parts []string
	for i := 0; i < n; {
		name, mem := at(i)
		j := i + 1
		for j < n {
			nj, mj := at(j)
			if nj != name || mj != mem {
				break
			}
			j++
		}
		part := fmt.Sprintf("%d × %q", j-i, name)
		if mem > 0 {
			part += fmt.Sprintf(" (%s MiB)", FormatInt(mem))
		}
		parts = append(parts, part)
		i = j
	}
	return strings.Join(parts, ", ")
}

// ObservationOpen reports whether the buyer may report an observation of
// piece p of r at now: during the rental, i.e. r confirmed or active and
// now within [the piece's start, its end for the holder).
func ObservationOpen(r Reservation, p ReservationPiece, now time.Time) bool {
	return (r.State == ReservationConfirmed || r.State == ReservationActive) && !now.Before(p.Start) && now.Before(AccessEnd(r, p))
}

// ObservationNode is the node of the piece an observation is compared
// with, and how many of the piece's devices it holds there: the node
// holding the most (the first such), since the buyer's script runs on one
// machine.
func ObservationNode(p ReservationPiece) (node, held int) {
	node, held = -1, 0
	for _, s := range p.Nodes {
		if n := p.DevicesOnNode(s.Node); n > held {
			node, held = s.Node, n
		}
	}
	if node < 0 {
		return 0, p.Devices
	}
	return node, held
}

// ContradictionsText is the offer page's warning for n buyers'
// observations in ObservationWindowDays that contradicted the agent, ""
// for none.
func ContradictionsText(n int) string {
	switch {
	case n <= 0:
		return ""
	case n == 1:
		return fmt.Sprintf("1 buyer report in %d days contradicted the provider's agent", ObservationWindowDays)
	}
	return fmt.Sprintf("%d buyer reports in %d days contradicted the provider's agent", n, ObservationWindowDays)
}
