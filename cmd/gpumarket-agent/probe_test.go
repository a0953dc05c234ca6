package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// The files in testdata are nvidia-smi's answers to nvidiaSMIArgs, written
// after captures from real hosts (the format, [N/A], [Not Supported], the
// lines of a GPU fallen off the bus, a driver that failed).

// h100 is a healthy device as the 8×H100 recording has it.
func h100(index int, uuid string, temp, util int, power float64) device {
	return device{Index: index, UUID: uuid, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, TemperatureC: temp,
		UtilizationPct: util, PowerW: power, Healthy: true}
}

func TestParseNvidiaSMIRecordings(t *testing.T) {
	for _, tc := range []struct {
		file     string
		devices  []device
		problems []string
		err      string // in the error; "" for none
	}{
		{
			file: "nvidia-smi-h100x8.csv",
			devices: []device{
				h100(0, "GPU-3c1f7a52-8d0e-5b9c-1a4f-6e2d7c8b9a01", 41, 97, 612.53),
				h100(1, "GPU-9a2b4c6d-1e3f-5a7b-9c1d-2e4f6a8b0c12", 43, 98, 640.17),
				h100(2, "GPU-5e6f7a8b-9c0d-1e2f-3a4b-5c6d7e8f9a23", 39, 96, 598.02),
				h100(3, "GPU-7b8c9d0e-1f2a-3b4c-5d6e-7f8a9b0c1d34", 44, 100, 655.91),
				h100(4, "GPU-1d2e3f4a-5b6c-7d8e-9f0a-1b2c3d4e5f45", 40, 97, 621.40),
				h100(5, "GPU-2f3a4b5c-6d7e-8f9a-0b1c-2d3e4f5a6b56", 42, 99, 633.88),
				h100(6, "GPU-4a5b6c7d-8e9f-0a1b-2c3d-4e5f6a7b8c67", 38, 95, 587.26),
				h100(7, "GPU-6c7d8e9f-0a1b-2c3d-4e5f-6a7b8c9d0e78", 45, 100, 668.75),
			},
		},
		{
			file: "nvidia-smi-a100-ecc.csv",
			devices: []device{
				{Index: 0, UUID: "GPU-0a1b2c3d-4e5f-6a7b-8c9d-0e1f2a3b4c01", Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, TemperatureC: 34, PowerW: 62.11, Healthy: true},
				{Index: 1, UUID: "GPU-1b2c3d4e-5f6a-7b8c-9d0e-1f2a3b4c5d02", Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, TemperatureC: 35, ECCUncorrected: 2, PowerW: 61.80},
				{Index: 2, UUID: "GPU-2c3d4e5f-6a7b-8c9d-0e1f-2a3b4c5d6e03", Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, TemperatureC: 33, PowerW: 60.94, Healthy: true},
				{Index: 3, UUID: "GPU-3d4e5f6a-7b8c-9d0e-1f2a-3b4c5d6e7f04", Name: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920, TemperatureC: 36, PowerW: 63.27, Healthy: true},
			},
			problems: []string{"GPU 1: 2 uncorrected ECC errors"},
		},
		{
			// A GeForce reports no ECC ([N/A]); one card reports little else,
			// one no memory (a required field), one empty fields.
			file: "nvidia-smi-geforce-na.csv",
			devices: []device{
				{Index: 0, UUID: "GPU-a1b2c3d4-e5f6-a7b8-c9d0-e1f2a3b4c5d6", Name: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, TemperatureC: 52, UtilizationPct: 31, PowerW: 181.37, Healthy: true},
				{Index: 1, UUID: "GPU-b2c3d4e5-f6a7-b8c9-d0e1-f2a3b4c5d6e7", Name: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, Healthy: true},
				{Index: 2, UUID: "GPU-c3d4e5f6-a7b8-c9d0-e1f2-a3b4c5d6e7f8", Name: "NVIDIA GeForce RTX 4090", TemperatureC: 48, UtilizationPct: 12, PowerW: 96.02},
				{Index: 3, UUID: "GPU-d4e5f6a7-b8c9-d0e1-f2a3-b4c5d6e7f8a9", Name: "NVIDIA GeForce RTX 4090", MemoryMiB: 24564, TemperatureC: 47, Healthy: true},
			},
			problems: []string{"GPU 2: memory not readable ([N/A])"},
		},
		{
			file: "nvidia-smi-not-supported.csv",
			devices: []device{
				{Index: 0, UUID: "GPU-e5f6a7b8-c9d0-e1f2-a3b4-c5d6e7f8a9b0", Name: "NVIDIA GeForce RTX 3090", MemoryMiB: 24576, TemperatureC: 61, UtilizationPct: 88, Healthy: true},
				{Index: 1, UUID: "GPU-f6a7b8c9-d0e1-f2a3-b4c5-d6e7f8a9b0c1", Name: "NVIDIA GeForce RTX 3090", MemoryMiB: 24576, TemperatureC: 59, UtilizationPct: 91, Healthy: true},
			},
		},
		{
			// GPU 3 fell off the bus (a line instead of its row), GPU 5 is
			// lost (every field a note), GPU 6 cannot read its power.
			file: "nvidia-smi-fallen-off.txt",
			devices: []device{
				h100(0, "GPU-3c1f7a52-8d0e-5b9c-1a4f-6e2d7c8b9a01", 41, 97, 612.53),
				h100(1, "GPU-9a2b4c6d-1e3f-5a7b-9c1d-2e4f6a8b0c12", 43, 98, 640.17),
				h100(2, "GPU-5e6f7a8b-9c0d-1e2f-3a4b-5c6d7e8f9a23", 39, 96, 598.02),
				{Index: 3},
				h100(4, "GPU-1d2e3f4a-5b6c-7d8e-9f0a-1b2c3d4e5f45", 40, 97, 621.40),
				{Index: 5, UUID: "GPU-2f3a4b5c-6d7e-8f9a-0b1c-2d3e4f5a6b56"},
				{Index: 6, UUID: "GPU-4a5b6c7d-8e9f-0a1b-2c3d-4e5f6a7b8c67", Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, TemperatureC: 38, UtilizationPct: 95},
				h100(7, "GPU-6c7d8e9f-0a1b-2c3d-4e5f-6a7b8c9d0e78", 45, 100, 668.75),
			},
			problems: []string{
				"GPU 0000:9D:00.0 cannot be reached: Unknown Error",
				"GPU 5: name: GPU is lost, memory: GPU is lost, temperature: GPU is lost, utilization: GPU is lost, ECC: GPU is lost, power: GPU is lost",
				"GPU 6: power: Unknown Error",
			},
		},
		{file: "nvidia-smi-driver-failed.txt", err: `line 1 is not a device row (want 8 comma-separated values, got 1): "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.`},
		{file: "nvidia-smi-truncated.txt", err: "line 2 is not a device row (want 8 comma-separated values, got 3)"},
		{file: "nvidia-smi-header.txt", err: `line 1: GPU index "index" is not a number from 0 to 1023`},
		{file: "nvidia-smi-garbage.txt", err: "line 1 is not a device row (want 8 comma-separated values, got 5)"},
	} {
		t.Run(tc.file, func(t *testing.T) {
			out, err := os.ReadFile(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			devices, problems, err := parseNvidiaSMI(out)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				if devices != nil || problems != nil {
					t.Errorf("devices %+v and problems %v with an error", devices, problems)
				}
				return
			}
			if err != nil {
				t.Fatalf("error: %v", err)
			}
			if !slices.Equal(devices, tc.devices) {
				t.Errorf("devices:\n%s\nwant\n%s", showDevices(devices), showDevices(tc.devices))
			}
			if !slices.Equal(problems, tc.problems) {
				t.Errorf("problems %q, want %q", problems, tc.problems)
			}
		})
	}
}

func showDevices(ds []device) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "  %+v\n", d)
	}
	return b.String()
}

func TestParseNvidiaSMIEdges(t *testing.T) {
	row := "0, GPU-1, NVIDIA H100 80GB HBM3, 81559, 41, 97, 0, 612.5"
	for _, tc := range []struct {
		name, out string
		healthy   []bool // per device; nil with err
		err       string
	}{
		{"CRLF and blank lines", "\r\n" + row + "\r\n\r\n", []bool{true}, ""},
		{"units left in", "0, GPU-1, NVIDIA H100 80GB HBM3, 81559 MiB, 41, 97 %, 0, 612.50 W", []bool{true}, ""},
		{"nothing", "", nil, "printed nothing"},
		{"no devices", "No devices were found\n", []bool{}, ""},
		{"GPU0000 spelling", "Unable to determine the device handle for GPU0000:65:00.0: GPU is lost. Reboot the system to recover this GPU\n" +
			strings.Replace(row, "0, GPU-1", "1, GPU-2", 1), []bool{false, true}, ""},
		{"lost line where a row claims its index", row + "\nUnable to determine the device handle for GPU 0000:1B:00.0: Unknown Error\n" +
			strings.Replace(row, "0, GPU-1", "1, GPU-2", 1), []bool{true, true, false}, ""},
		{"index twice", row + "\n" + row, nil, "index 0 appears twice"},
		{"negative index", strings.Replace(row, "0, GPU-1", "-1, GPU-1", 1), nil, "is not a number from 0 to 1023"},
		{"garbage number", strings.Replace(row, "41", "hot", 1), []bool{false}, ""},
		{"negative memory", strings.Replace(row, "81559", "-5", 1), []bool{false}, ""},
		{"NaN power", strings.Replace(row, "612.5", "NaN", 1), []bool{false}, ""},
		{"insufficient permissions on ECC", strings.Replace(row, ", 0, ", ", [Insufficient Permissions], ", 1), []bool{true}, ""},
		{"commas in a name", "0, GPU-1, NVIDIA, H100, 81559, 41, 97, 0, 612.5", nil, "got 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devices, _, err := parseNvidiaSMI([]byte(tc.out))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var healthy []bool
			for i, d := range devices {
				healthy = append(healthy, d.Healthy)
				if d.Index != i {
					t.Errorf("device %d has index %d", i, d.Index)
				}
			}
			if !slices.Equal(healthy, tc.healthy) {
				t.Errorf("healthy %v, want %v", healthy, tc.healthy)
			}
		})
	}
}

// FuzzParseNvidiaSMI: whatever nvidia-smi prints, the parser never panics,
// and what it accepts is a heartbeat the server takes: indexes unique and
// in range, utilization a percentage, no negative or non-finite numbers,
// and a healthy device has its name, uuid and memory and no ECC errors.
func FuzzParseNvidiaSMI(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "nvidia-smi-*"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("0,,,,,,,\n"))
	f.Add([]byte("1023, [Unknown Error], x, 1e309, -0, 101, 1, +Inf\n"))
	f.Fuzz(func(t *testing.T, out []byte) {
		devices, _, err := parseNvidiaSMI(out)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("an error without a message")
			}
			return
		}
		seen := map[int]bool{}
		for i, d := range devices {
			if d.Index < 0 || d.Index > 2047 || seen[d.Index] || (i > 0 && devices[i-1].Index >= d.Index) {
				t.Fatalf("bad index order: %+v", devices)
			}
			seen[d.Index] = true
			if d.UtilizationPct < 0 || d.UtilizationPct > 100 || d.MemoryMiB < 0 || d.ECCUncorrected < 0 ||
				d.PowerW < 0 || d.PowerW != d.PowerW || d.PowerW > 1e12 {
				t.Fatalf("out of range: %+v", d)
			}
			if d.Healthy && (d.Name == "" || d.UUID == "" || d.MemoryMiB <= 0 || d.ECCUncorrected != 0) {
				t.Fatalf("healthy without what it needs: %+v", d)
			}
		}
	})
}

// TestNvidiaSMIProbe runs the probe with a fake nvidia-smi: its output is
// parsed; a failure becomes the heartbeat's error, never a panic or a
// missing heartbeat.
func TestNvidiaSMIProbe(t *testing.T) {
	h100x8, err := os.ReadFile(filepath.Join("testdata", "nvidia-smi-h100x8.csv"))
	if err != nil {
		t.Fatal(err)
	}
	fallen, err := os.ReadFile(filepath.Join("testdata", "nvidia-smi-fallen-off.txt"))
	if err != nil {
		t.Fatal(err)
	}
	exit := func(code int) error { return fmt.Errorf("exit status %d", code) }
	for _, tc := range []struct {
		name           string
		stdout, stderr string
		err            error
		devices        int
		healthy        int
		wantErr        string // "" for none
	}{
		{"eight H100", string(h100x8), "", nil, 8, 8, ""},
		{"fallen off, exit status 15", string(fallen), "", exit(15), 8, 5, "GPU 0000:9D:00.0 cannot be reached: Unknown Error; GPU 5: name: GPU is lost"},
		{"not installed", "", "", exec.ErrNotFound, 0, 0, "nvidia-smi was not found in PATH"},
		{"driver gone", "", "Failed to initialize NVML: Driver/library version mismatch\n", exit(18), 0, 0, "nvidia-smi failed: Failed to initialize NVML: Driver/library version mismatch"},
		{"garbage", "\x00\x01garbage\n", "", nil, 0, 0, "nvidia-smi output line 1 is not a device row"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := nvidiaSMI{run: func(ctx context.Context, name string, args ...string) ([]byte, []byte, error) {
				if name != "nvidia-smi" || !slices.Equal(args, nvidiaSMIArgs) {
					t.Errorf("ran %s %v", name, args)
				}
				return []byte(tc.stdout), []byte(tc.stderr), tc.err
			}}
			r := p.Probe(context.Background())
			healthy := 0
			for _, d := range r.Devices {
				if d.Healthy {
					healthy++
				}
			}
			if len(r.Devices) != tc.devices || healthy != tc.healthy {
				t.Errorf("%d devices, %d healthy; want %d, %d", len(r.Devices), healthy, tc.devices, tc.healthy)
			}
			if (tc.wantErr == "") != (r.Error == "") || !strings.Contains(r.Error, tc.wantErr) {
				t.Errorf("error %q, want %q", r.Error, tc.wantErr)
			}
		})
	}
}

func TestNvidiaSMIQueriesTheProtocolFields(t *testing.T) {
	want := "--query-gpu=index,uuid,name,memory.total,temperature.gpu,utilization.gpu,ecc.errors.uncorrected.volatile.total,power.draw"
	if nvidiaSMIArgs[0] != want || nvidiaSMIArgs[1] != "--format=csv,noheader,nounits" {
		t.Errorf("nvidia-smi %v", nvidiaSMIArgs)
	}
	if n := len(strings.Split(strings.TrimPrefix(want, "--query-gpu="), ",")); n != nvidiaSMIFields {
		t.Errorf("%d fields queried, %d read", n, nvidiaSMIFields)
	}
}

func TestROCmSMIIsUnsupported(t *testing.T) {
	r := rocmSMI{}.Probe(context.Background())
	if len(r.Devices) != 0 || !strings.Contains(r.Error, "rocm-smi is not supported") {
		t.Errorf("rocm-smi: %+v", r)
	}
}

func TestParseSimulate(t *testing.T) {
	for _, tc := range []struct {
		spec  string
		id    string
		count int
		err   string
	}{
		{"H100 80GB SXM x8", "nvidia-h100-80gb-sxm", 8, ""},
		{"h100 80gb pcie X4", "nvidia-h100-80gb-pcie", 4, ""},
		{"nvidia-a100-80gb-sxm x 2", "nvidia-a100-80gb-sxm", 2, ""},
		{"L40S 48GB PCIe", "nvidia-l40s-48gb-pcie", 1, ""},
		{"MI300X 192GB OAM x8", "amd-mi300x-192gb-oam", 8, ""},
		{"H100 x8", "", 0, `"H100" is not a catalogue model`},
		{"H100 80GB SXM x0", "", 0, "from 1 to 64"},
		{"H100 80GB SXM x65", "", 0, "from 1 to 64"},
		{"x8", "", 0, "want a catalogue model"},
	} {
		acc, n, err := parseSimulate(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || acc.ID != tc.id || n != tc.count {
			t.Errorf("%q: %s x%d, %v; want %s x%d", tc.spec, acc.ID, n, err, tc.id, tc.count)
		}
	}
}

func TestParseFaults(t *testing.T) {
	f, err := parseFaults("drop-device=3@60s, stop-heartbeats@2m,slow=0.5,drop-device=0@0s")
	if err != nil {
		t.Fatal(err)
	}
	want := faults{drops: []deviceDrop{{3, time.Minute}, {0, 0}}, stopHeartbeats: 2 * time.Minute, slow: 0.5}
	if !slices.Equal(f.drops, want.drops) || f.stopHeartbeats != want.stopHeartbeats || f.slow != want.slow {
		t.Errorf("faults %+v, want %+v", f, want)
	}
	if f, err := parseFaults(""); err != nil || f.slow != 1 || f.drops != nil || f.stopHeartbeats != 0 {
		t.Errorf("no faults: %+v %v", f, err)
	}
	for _, bad := range []string{"drop-device=3", "drop-device=x@1s", "drop-device=3@soon", "stop-heartbeats@0s",
		"slow=1.5", "slow=-1", "slow=NaN", "meltdown"} {
		if _, err := parseFaults(bad); err == nil || !strings.Contains(err.Error(), "want drop-device=N@T") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// TestSimulatedProbe: the simulated host looks like nvidia-smi's, and a
// dropped device disappears at its time.
func TestSimulatedProbe(t *testing.T) {
	acc, n, err := parseSimulate("H100 80GB SXM x8")
	if err != nil {
		t.Fatal(err)
	}
	f, err := parseFaults("drop-device=3@60s")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	now := start
	sim := simulated{acc: acc, count: n, faults: f, start: start, now: func() time.Time { return now }}
	indexes := func() []int {
		var out []int
		for _, d := range sim.Probe(context.Background()).Devices {
			if !d.Healthy || d.Name != "NVIDIA H100 80GB HBM3" || d.MemoryMiB != 81559 || !strings.HasPrefix(d.UUID, "GPU-") {
				t.Errorf("simulated device %+v", d)
			}
			out = append(out, d.Index)
		}
		return out
	}
	if got := indexes(); !slices.Equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Errorf("at the start: %v", got)
	}
	now = start.Add(59 * time.Second)
	if got := indexes(); len(got) != 8 {
		t.Errorf("at 59 s: %v", got)
	}
	now = start.Add(time.Minute)
	if got := indexes(); !slices.Equal(got, []int{0, 1, 2, 4, 5, 6, 7}) {
		t.Errorf("at 60 s: %v, want device 3 gone", got)
	}
}

func TestSimulatedIdentitiesAreCatalogueModels(t *testing.T) {
	for id := range deviceIdentities {
		if _, ok := market.FindAccelerator(id); !ok {
			t.Errorf("%s is not in the catalogue", id)
		}
	}
}
