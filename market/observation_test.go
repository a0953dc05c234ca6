package market

import (
	"errors"
	"reflect"
	"testing"
)

func TestObservationCompare(t *testing.T) {
	h100 := Offer{AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8}
	dev := func(n int, name string, mib int64) []ObservedDevice {
		out := make([]ObservedDevice, n)
		for i := range out {
			out[i] = ObservedDevice{Name: name, MemoryMiB: mib}
		}
		return out
	}
	agentDevs := func(n int, name string, mib int64) []HostDevice {
		out := make([]HostDevice, n)
		for i := range out {
			out[i] = HostDevice{Index: i, Name: name, MemoryMiB: mib, Healthy: true}
		}
		return out
	}
	const h100Name = "NVIDIA H100 80GB HBM3"
	cases := []struct {
		name  string
		obs   Observation
		held  int
		agent AgentReport
		want  []string
	}{
		{"matching report", Observation{Devices: dev(2, h100Name, 81559), BenchKind: "matmul_fp16", BenchMilli: 612300, BenchSeconds: 10},
			2, AgentReport{Devices: agentDevs(2, h100Name, 81559), BenchMilli: 800000}, nil},
		{"more devices than held is fine", Observation{Devices: dev(8, h100Name, 81559)}, 2, AgentReport{}, nil},
		{"fewer devices", Observation{Devices: dev(1, h100Name, 81559)}, 2, AgentReport{Devices: agentDevs(2, h100Name, 81559)},
			[]string{"your machine sees 1 devices; the piece holds 2 and the provider's agent reported 2"}},
		{"fewer devices, no agent report", Observation{Devices: dev(1, h100Name, 81559)}, 4, AgentReport{},
			[]string{"your machine sees 1 devices; the piece holds 4"}},
		{"a different model", Observation{Devices: dev(1, "NVIDIA A10", 23028)}, 1, AgentReport{Devices: agentDevs(1, h100Name, 81559)},
			[]string{`device 0 is "NVIDIA A10", not the listed NVIDIA H100 80GB SXM`, "device 0 has 23,028 MiB of memory; the listing has 80 GB"}},
		{"PCIe where SXM is listed", Observation{Devices: dev(1, "NVIDIA H100 PCIe", 81559)}, 1, AgentReport{},
			[]string{`device 0 is "NVIDIA H100 PCIe", not the listed NVIDIA H100 80GB SXM`}},
		{"a name other than the agent's", Observation{Devices: dev(1, "NVIDIA H100 80GB HBM3", 81559)}, 1,
			AgentReport{Devices: agentDevs(1, "NVIDIA H100 SXM5 80GB", 81559)},
			[]string{`device 0 is "NVIDIA H100 80GB HBM3"; the provider's agent reported "NVIDIA H100 SXM5 80GB"`}},
		// 80 GB = 80e9 bytes = 76,294 MiB; 5 % below is 72,479.3 MiB.
		{"memory 4.9 % below the listing is fine", Observation{Devices: dev(1, h100Name, 72480)}, 1, AgentReport{}, nil},
		{"memory more than 5 % below the listing", Observation{Devices: dev(1, h100Name, 72479)}, 1, AgentReport{},
			[]string{"device 0 has 72,479 MiB of memory; the listing has 80 GB"}},
		// 95 % of 81,559 is 77,481.05.
		{"memory more than 5 % below the agent's", Observation{Devices: dev(1, h100Name, 77481)}, 1, AgentReport{Devices: agentDevs(1, h100Name, 81559)},
			[]string{"device 0 has 77,481 MiB of memory; the provider's agent reported 81,559 MiB"}},
		{"memory not reported is not compared", Observation{Devices: dev(1, h100Name, 0)}, 1, AgentReport{Devices: agentDevs(1, h100Name, 81559)}, nil},
		// 70 % of 900 TFLOPS is 630.
		{"benchmark 30 % below the agent's is fine", Observation{Devices: dev(1, h100Name, 81559), BenchKind: "matmul_fp16", BenchMilli: 630000, BenchSeconds: 10},
			1, AgentReport{BenchMilli: 900000}, nil},
		{"benchmark more than 30 % below the agent's", Observation{Devices: dev(1, h100Name, 81559), BenchKind: "matmul_fp16", BenchMilli: 629999, BenchSeconds: 10},
			1, AgentReport{BenchMilli: 900000}, []string{"your benchmark measured 630 TFLOPS; the provider's agent reported 900 TFLOPS per device"}},
		{"benchmark without an agent figure is not compared", Observation{Devices: dev(1, h100Name, 81559), BenchKind: "matmul_fp16", BenchMilli: 1000, BenchSeconds: 10},
			1, AgentReport{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := CompareObservation(c.obs, c.held, h100, c.agent)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("CompareObservation = %q, want %q", got, c.want)
			}
		})
	}
}

func TestObservationNew(t *testing.T) {
	ok := []ObservedDevice{{Name: " NVIDIA H100 80GB HBM3\n", MemoryMiB: 81559}}
	o, err := NewObservation(7, ok, "matmul_fp16", 612.3456, 10)
	if err != nil {
		t.Fatal(err)
	}
	want := Observation{PieceID: 7, Devices: []ObservedDevice{{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}, BenchKind: "matmul_fp16", BenchMilli: 612346, BenchSeconds: 10}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("NewObservation = %+v, want %+v", o, want)
	}
	bad := []struct {
		name    string
		piece   int64
		devices []ObservedDevice
		kind    string
		tflops  float64
		seconds int
		field   string
	}{
		{"no piece", 0, ok, "", 0, 0, "piece_id"},
		{"no devices", 1, nil, "", 0, 0, "devices"},
		{"too many devices", 1, make([]ObservedDevice, MaxObservationDevices+1), "", 0, 0, "devices"},
		{"empty name", 1, []ObservedDevice{{Name: " "}}, "", 0, 0, "devices"},
		{"negative memory", 1, []ObservedDevice{{Name: "x", MemoryMiB: -1}}, "", 0, 0, "devices"},
		{"unknown kind", 1, ok, "linpack", 1, 10, "benchmark.kind"},
		{"negative tflops", 1, ok, "matmul_fp16", -1, 10, "benchmark.tflops"},
		{"huge tflops", 1, ok, "matmul_fp16", 1e9, 10, "benchmark.tflops"},
		{"no seconds", 1, ok, "matmul_fp16", 100, 0, "benchmark.seconds"},
		{"figures without a kind", 1, ok, "", 100, 10, "benchmark.kind"},
	}
	for _, c := range bad {
		_, err := NewObservation(c.piece, c.devices, c.kind, c.tflops, c.seconds)
		var me *Error
		if !errors.As(err, &me) || me.Code != CodeInvalid || me.Fields[c.field] == "" {
			t.Errorf("%s: err = %v, want invalid naming %s", c.name, err, c.field)
		}
	}
}

func TestObservationSummary(t *testing.T) {
	o := Observation{Devices: []ObservedDevice{{"NVIDIA H100 80GB HBM3", 81559}, {"NVIDIA H100 80GB HBM3", 81559}, {"NVIDIA A10", 0}},
		BenchKind: "matmul_fp16", BenchMilli: 612300, BenchSeconds: 10}
	if got, want := ObservationSummary(o), `2 × "NVIDIA H100 80GB HBM3" (81,559 MiB), 1 × "NVIDIA A10"; matmul_fp16 612 TFLOPS in 10 s`; got != want {
		t.Errorf("ObservationSummary = %q, want %q", got, want)
	}
	a := AgentReport{Devices: []HostDevice{{Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559}}, BenchMilli: 899500}
	if got, want := AgentSummary(a), `1 × "NVIDIA H100 80GB HBM3" (81,559 MiB); acceptance test 900 TFLOPS per device`; got != want {
		t.Errorf("AgentSummary = %q, want %q", got, want)
	}
	if got := AgentSummary(AgentReport{}); got != "nothing yet" {
		t.Errorf("AgentSummary(empty) = %q", got)
	}
}
