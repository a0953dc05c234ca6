package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// device is one accelerator as the probe found it (docs/agent.md, the
// heartbeat's devices), in the protocol's type. Healthy is the probe's
// judgement: present, no uncorrected ECC errors, the required fields
// readable.
type device = market.HostDevice

// probeReport is what one probe found: the devices and, when something went
// wrong, a message for the provider (the heartbeat's error).
type probeReport struct {
	Devices []device
	Error   string
}

// maxProbeError bounds the heartbeat's error, which the server limits to
// 1000 characters.
const maxProbeError = 1000

// prober finds the host's devices. The three kinds are nvidiaSMI,
// rocmSMI and simulated.
type prober interface {
	Name() string
	Probe(ctx context.Context) probeReport
}

// nvidiaSMIArgs asks nvidia-smi for the fields a heartbeat reports, in the
// order parseNvidiaSMI reads them.
var nvidiaSMIArgs = []string{
	"--query-gpu=index,uuid,name,memory.total,temperature.gpu,utilization.gpu,ecc.errors.uncorrected.volatile.total,power.draw",
	"--format=csv,noheader,nounits",
}

// nvidiaSMIFields is how many values each row of nvidiaSMIArgs has.
const nvidiaSMIFields = 8

// probeTimeout bounds one run of nvidia-smi, which hangs when a driver is
// wedged; a heartbeat saying so is better than none.
const probeTimeout = 20 * time.Second

// nvidiaSMI probes NVIDIA devices by running nvidia-smi.
type nvidiaSMI struct {
	// run runs a program and returns its standard output and error; tests
	// replace it with recorded outputs.
	run func(ctx context.Context, name string, args ...string) (stdout, stderr []byte, err error)
}

func (nvidiaSMI) Name() string { return "nvidia-smi" }

// Probe runs nvidia-smi and reads its output. A failure is reported in the
// result, never returned: the heartbeat still goes out, saying what failed.
func (p nvidiaSMI) Probe(ctx context.Context) probeReport {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	stdout, stderr, runErr := p.run(ctx, "nvidia-smi", nvidiaSMIArgs...)
	if errors.Is(runErr, exec.ErrNotFound) {
		return probeReport{Error: "nvidia-smi was not found in PATH: install the NVIDIA driver, or run the agent with -probe simulate"}
	}
	if runErr != nil && len(bytes.TrimSpace(stdout)) == 0 {
		msg := firstLine(stderr)
		if msg == "" {
			msg = runErr.Error()
		}
		return probeReport{Error: limitText("nvidia-smi failed: " + msg)}
	}
	devices, problems, err := parseNvidiaSMI(stdout)
	if err != nil {
		return probeReport{Error: limitText(err.Error())}
	}
	return probeReport{Devices: devices, Error: limitText(strings.Join(problems, "; "))}
}

// lostGPURe matches the line nvidia-smi prints instead of a row for a GPU
// it cannot reach (fallen off the bus): "Unable to determine the device
// handle for GPU 0000:1B:00.0: Unknown Error" ("GPU0000:…" in some drivers).
var lostGPURe = regexp.MustCompile(`^Unable to determine the device handle for (?i:gpu)\s*([0-9A-Fa-f:.]+):\s*(.*)$`)

// parseNvidiaSMI reads the output of nvidia-smi with nvidiaSMIArgs: one row
// of nvidiaSMIFields comma-separated values per GPU. It returns the devices,
// each judged healthy or not, and what it found wrong with them for the
// provider. A GPU nvidia-smi could not reach is reported as an unhealthy
// device at its place in the output. Output that is not such rows (a
// failed driver's message, garbage) is an error naming the line; it never
// panics.
func parseNvidiaSMI(out []byte) ([]device, []string, error) {
	var (
		devices  []device
		problems []string
		lost     []int // places in the output of GPUs nvidia-smi could not reach
		place    = 0   // nvidia-smi prints one line per GPU, in index order
	)
	for n, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if m := lostGPURe.FindStringSubmatch(line); m != nil {
			problems = append(problems, fmt.Sprintf("GPU %s cannot be reached: %s", m[1], strings.TrimSpace(m[2])))
			lost = append(lost, place)
			place++
			continue
		}
		if line == "No devices were found" {
			problems = append(problems, "nvidia-smi found no devices")
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != nvidiaSMIFields {
			return nil, nil, fmt.Errorf("nvidia-smi output line %d is not a device row (want %d comma-separated values, got %d): %q",
				n+1, nvidiaSMIFields, len(fields), clip(line, 200))
		}
		d, why, err := parseNvidiaSMIRow(fields)
		if err != nil {
			return nil, nil, fmt.Errorf("nvidia-smi output line %d: %w", n+1, err)
		}
		devices = append(devices, d)
		if len(why) > 0 {
			problems = append(problems, fmt.Sprintf("GPU %d: %s", d.Index, strings.Join(why, ", ")))
		}
		place++
	}
	if len(devices) == 0 && len(problems) == 0 {
		return nil, nil, errors.New("nvidia-smi printed nothing")
	}
	taken := map[int]bool{}
	for _, d := range devices {
		if taken[d.Index] {
			return nil, nil, fmt.Errorf("nvidia-smi output: GPU index %d appears twice", d.Index)
		}
		taken[d.Index] = true
	}
	// A GPU that could not be reached takes the index of its place, or the
	// next free one should a row claim that index.
	for _, i := range lost {
		for taken[i] {
			i++
		}
		taken[i] = true
		devices = append(devices, device{Index: i})
	}
	slices.SortFunc(devices, func(a, b device) int { return a.Index - b.Index })
	return devices, problems, nil
}

// parseNvidiaSMIRow reads one row's fields. The index must be a number
// (without it the row names no device: an error). Any other field may be
// "[N/A]", "[Not Supported]", empty, or an error note such as "[Unknown
// Error]" or "[GPU is lost]"; the device is then healthy only if the field
// is not required (index, uuid, name, memory) and is not an error. It
// returns the device and why it is not healthy.
func parseNvidiaSMIRow(fields []string) (device, []string, error) {
	for i := range fields {
		fields[i] = strings.TrimSpace(fields[i])
	}
	index, err := strconv.Atoi(fields[0])
	if err != nil || index < 0 || index > 1023 {
		return device{}, nil, fmt.Errorf("GPU index %q is not a number from 0 to 1023", clip(fields[0], 40))
	}
	d := device{Index: index}
	var why []string
	note := func(what, v string) {
		switch {
		case isLostNote(v):
			why = append(why, fmt.Sprintf("%s: %s", what, strings.Trim(v, "[]")))
		default:
			why = append(why, fmt.Sprintf("%s not readable (%s)", what, clip(valueOrEmpty(v), 40)))
		}
	}
	// Required fields: without them the device is not what was listed.
	if v := fields[1]; readable(v) {
		d.UUID = v
	} else {
		note("uuid", v)
	}
	if v := fields[2]; readable(v) {
		d.Name = v
	} else {
		note("name", v)
	}
	if n, ok := number(fields[3], "MiB"); ok && n > 0 {
		d.MemoryMiB = int64(n)
	} else {
		note("memory", fields[3])
	}
	// Optional fields: many parts do not report them ([N/A], [Not
	// Supported]); only an error note makes the device unhealthy.
	optional := func(what, v, unit string, set func(float64)) {
		if n, ok := number(v, unit); ok {
			set(n)
			return
		}
		if isLostNote(v) || (v != "" && !strings.HasPrefix(v, "[")) {
			note(what, v)
		}
	}
	optional("temperature", fields[4], "C", func(n float64) { d.TemperatureC = int(n) })
	optional("utilization", fields[5], "%", func(n float64) { d.UtilizationPct = min(max(int(n), 0), 100) })
	optional("ECC", fields[6], "", func(n float64) { d.ECCUncorrected = int64(n) })
	optional("power", fields[7], "W", func(n float64) { d.PowerW = n })
	if d.ECCUncorrected > 0 {
		why = append(why, fmt.Sprintf("%d uncorrected ECC errors", d.ECCUncorrected))
	}
	d.Healthy = len(why) == 0
	return d, why, nil
}

// readable reports whether a text field holds a value: not empty and not a
// bracketed note such as [N/A].
func readable(v string) bool {
	return v != "" && !strings.HasPrefix(v, "[")
}

// isLostNote reports whether v is nvidia-smi's note for a GPU that stopped
// answering (fallen off the bus, Xid 79): "[Unknown Error]", "[GPU is
// lost]".
func isLostNote(v string) bool {
	l := strings.ToLower(v)
	return strings.HasPrefix(l, "[") && (strings.Contains(l, "unknown error") || strings.Contains(l, "gpu is lost"))
}

// number reads a non-negative decimal number, with the unit nvidia-smi
// prints when "nounits" is not honoured.
func number(v, unit string) (float64, bool) {
	v = strings.TrimSpace(strings.TrimSuffix(v, unit))
	if v == "" || strings.HasPrefix(v, "[") {
		return 0, false
	}
	n, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(n) || n < 0 || n > 1e12 {
		return 0, false
	}
	return n, true
}

func valueOrEmpty(v string) string {
	if v == "" {
		return "empty"
	}
	return v
}

// rocmSMI stands for AMD hosts: rocm-smi's output differs between ROCm
// releases in ways this agent cannot yet read reliably, so it says so in
// every heartbeat instead of guessing.
type rocmSMI struct{}

func (rocmSMI) Name() string { return "rocm-smi" }

func (rocmSMI) Probe(context.Context) probeReport {
	return probeReport{Error: "rocm-smi is not supported by this agent yet: AMD devices cannot be reported, so this host " +
		"shows no devices; NVIDIA hosts use -probe nvidia-smi"}
}

// simulated reports made-up devices of one catalogue model for demos and
// tests, and injects the faults it was given.
type simulated struct {
	acc    market.Accelerator
	count  int
	faults faults
	start  time.Time
	now    func() time.Time
}

func (simulated) Name() string { return "simulate" }

// Probe reports the simulated devices, less those dropped by now.
func (s simulated) Probe(context.Context) probeReport {
	name, mib := simulatedIdentity(s.acc)
	elapsed := s.now().Sub(s.start)
	var out []device
	for i := range s.count {
		if s.faults.dropped(i, elapsed) {
			continue
		}
		out = append(out, device{
			Index:          i,
			UUID:           fmt.Sprintf("GPU-5e1a7ed0-0000-4000-8000-%012d", i),
			Name:           name,
			MemoryMiB:      mib,
			TemperatureC:   38 + i%4,
			UtilizationPct: 0,
			PowerW:         float64(s.acc.TDPWatts) / 10,
			Healthy:        true,
		})
	}
	return probeReport{Devices: out}
}

// deviceIdentities are the names and memory nvidia-smi reports for
// catalogue models (recorded from real hosts), so that a simulated host
// looks like a real one to the server's checks.
var deviceIdentities = map[string]struct {
	name string
	mib  int64
}{
	"nvidia-b200-192gb-sxm":    {"NVIDIA B200", 183359},
	"nvidia-h200-141gb-sxm":    {"NVIDIA H200", 143771},
	"nvidia-h100-80gb-sxm":     {"NVIDIA H100 80GB HBM3", 81559},
	"nvidia-h100-80gb-pcie":    {"NVIDIA H100 PCIe", 81559},
	"nvidia-a100-80gb-sxm":     {"NVIDIA A100-SXM4-80GB", 81920},
	"nvidia-a100-40gb-pcie":    {"NVIDIA A100-PCIE-40GB", 40960},
	"nvidia-l40s-48gb-pcie":    {"NVIDIA L40S", 46068},
	"nvidia-a10-24gb-pcie":     {"NVIDIA A10", 23028},
	"nvidia-l4-24gb-pcie":      {"NVIDIA L4", 23034},
	"nvidia-rtx4090-24gb-pcie": {"NVIDIA GeForce RTX 4090", 24564},
	"nvidia-rtx3090-24gb-pcie": {"NVIDIA GeForce RTX 3090", 24576},
	"nvidia-v100-32gb-sxm":     {"Tesla V100-SXM2-32GB", 32768},
	"nvidia-v100-16gb-pcie":    {"Tesla V100-PCIE-16GB", 16384},
	"nvidia-t4-16gb-pcie":      {"Tesla T4", 15360},
	"nvidia-p100-16gb-pcie":    {"Tesla P100-PCIE-16GB", 16384},
}

// simulatedIdentity is the name and memory a simulated device of acc
// reports: nvidia-smi's for the models above, else the vendor and catalogue
// name with the memory read as GiB.
func simulatedIdentity(acc market.Accelerator) (string, int64) {
	if id, ok := deviceIdentities[acc.ID]; ok {
		return id.name, id.mib
	}
	return acc.Vendor + " " + acc.Name, int64(acc.MemoryGB) * 1024
}

// simSpecRe reads -simulate: a catalogue model and "xN" devices.
var simSpecRe = regexp.MustCompile(`^(.*?)\s*(?:[xX×]\s*(\d+))?$`)

// parseSimulate reads -simulate "H100 80GB SXM x8": a catalogue model, by
// name or id (any case), and the number of devices (1 when not given).
func parseSimulate(spec string) (market.Accelerator, int, error) {
	m := simSpecRe.FindStringSubmatch(strings.TrimSpace(spec))
	if m == nil || m[1] == "" {
		return market.Accelerator{}, 0, fmt.Errorf("-simulate %q: want a catalogue model and a count, e.g. \"H100 80GB SXM x8\"", spec)
	}
	count := 1
	if m[2] != "" {
		n, err := strconv.Atoi(m[2])
		if err != nil || n < 1 || n > 64 {
			return market.Accelerator{}, 0, fmt.Errorf("-simulate %q: the device count must be from 1 to 64", spec)
		}
		count = n
	}
	var names []string
	for _, a := range market.Accelerators() {
		if strings.EqualFold(a.Name, m[1]) || strings.EqualFold(a.ID, m[1]) {
			return a, count, nil
		}
		names = append(names, a.Name)
	}
	return market.Accelerator{}, 0, fmt.Errorf("-simulate %q: %q is not a catalogue model (one of: %s)", spec, m[1], strings.Join(names, ", "))
}

// firstLine is the first non-empty line of b, trimmed.
func firstLine(b []byte) string {
	for line := range strings.SplitSeq(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return clip(line, 300)
		}
	}
	return ""
}

// limitText keeps s within maxProbeError characters.
func limitText(s string) string {
	return clip(s, maxProbeError)
}

// clip shortens s to at most n runes, marking the cut.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// faults are what -fault injects into a simulated host: devices that
// disappear, heartbeats that stop, throughput that drops.
type faults struct {
	drops          []deviceDrop
	stopHeartbeats time.Duration // after this long; 0: never
	slow           float64       // acceptance figures scaled by this; 1: as published
}

// deviceDrop is one device that disappears from the probe after a while.
type deviceDrop struct {
	index int
	after time.Duration
}

// parseFaults reads -fault: comma-separated drop-device=N@T (device N is
// gone from T after the start), stop-heartbeats@T (no heartbeat from T on)
// and slow=F (acceptance figures times F, from 0 to 1).
func parseFaults(spec string) (faults, error) {
	f := faults{slow: 1}
	for item := range strings.SplitSeq(spec, ",") {
		item = strings.TrimSpace(item)
		bad := func(why string) error {
			return fmt.Errorf("-fault %q: %s (want drop-device=N@T, stop-heartbeats@T or slow=F, comma-separated)", item, why)
		}
		switch {
		case item == "":
			continue
		case strings.HasPrefix(item, "drop-device="):
			n, at, ok := strings.Cut(strings.TrimPrefix(item, "drop-device="), "@")
			index, err := strconv.Atoi(n)
			if err != nil || index < 0 || index > 1023 {
				return faults{}, bad("the device is an index from 0 to 1023")
			}
			after, err := time.ParseDuration(at)
			if !ok || err != nil || after < 0 {
				return faults{}, bad("the time is a duration such as 60s")
			}
			f.drops = append(f.drops, deviceDrop{index: index, after: after})
		case strings.HasPrefix(item, "stop-heartbeats@"):
			after, err := time.ParseDuration(strings.TrimPrefix(item, "stop-heartbeats@"))
			if err != nil || after <= 0 {
				return faults{}, bad("the time is a positive duration such as 120s")
			}
			f.stopHeartbeats = after
		case strings.HasPrefix(item, "slow="):
			v, err := strconv.ParseFloat(strings.TrimPrefix(item, "slow="), 64)
			if err != nil || math.IsNaN(v) || v < 0 || v > 1 {
				return faults{}, bad("the factor is a number from 0 to 1")
			}
			f.slow = v
		default:
			return faults{}, bad("unknown fault")
		}
	}
	return f, nil
}

// dropped reports whether device index is gone after elapsed.
func (f faults) dropped(index int, elapsed time.Duration) bool {
	for _, d := range f.drops {
		if d.index == index && elapsed >= d.after {
			return true
		}
	}
	return false
}

// heartbeatsStopped reports whether heartbeats have stopped after elapsed.
func (f faults) heartbeatsStopped(elapsed time.Duration) bool {
	return f.stopHeartbeats > 0 && elapsed >= f.stopHeartbeats
}
