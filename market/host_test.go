package market

import (
	"strings"
	"testing"
	"time"
)

func TestNameMatchesAccelerator(t *testing.T) {
	tests := []struct {
		name string
		acc  string
		want bool
	}{
		{"NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-sxm", true},
		{"NVIDIA H100 80GB SXM", "nvidia-h100-80gb-sxm", true},
		{"NVIDIA H100 PCIe", "nvidia-h100-80gb-sxm", false},
		{"NVIDIA H100 PCIe", "nvidia-h100-80gb-pcie", true},
		{"NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-pcie", false},
		{"NVIDIA A100-SXM4-80GB", "nvidia-a100-80gb-sxm", true},
		{"NVIDIA A100-PCIE-40GB", "nvidia-a100-40gb-pcie", true},
		{"NVIDIA A100-SXM4-80GB", "nvidia-a10-24gb-pcie", false}, // A10 is not A100
		{"NVIDIA A10", "nvidia-a10-24gb-pcie", true},             // one form factor: no PCIe word needed
		{"NVIDIA L40S", "nvidia-l4-24gb-pcie", false},
		{"NVIDIA GeForce RTX 4090", "nvidia-rtx4090-24gb-pcie", true},
		{"NVIDIA GeForce RTX 3090", "nvidia-rtx4090-24gb-pcie", false},
		{"AMD Instinct MI300X", "amd-mi300x-192gb-oam", true},
		{"", "nvidia-h100-80gb-sxm", false},
		{"Unknown Error", "nvidia-h100-80gb-sxm", false},
	}
	for _, tt := range tests {
		acc, ok := FindAccelerator(tt.acc)
		if !ok {
			t.Fatalf("no accelerator %s in the catalogue", tt.acc)
		}
		if got := NameMatchesAccelerator(tt.name, acc); got != tt.want {
			t.Errorf("NameMatchesAccelerator(%q, %s) = %v, want %v", tt.name, tt.acc, got, tt.want)
		}
	}
}

func h100Devices(n int) []HostDevice {
	out := make([]HostDevice, n)
	for i := range out {
		out[i] = HostDevice{Index: i, Name: "NVIDIA H100 80GB HBM3", MemoryMiB: 81559, Healthy: true}
	}
	return out
}

func TestHardwareDifferences(t *testing.T) {
	o := Offer{AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 2}
	b200 := Offer{AcceleratorID: "nvidia-b200-192gb-sxm", MemoryGB: 192, DevicesPerNode: 1, Nodes: 1}
	tests := []struct {
		name    string
		offer   Offer
		devices func() []HostDevice
		want    []string // substrings, one per difference, in order
	}{
		{"match", o, func() []HostDevice { return h100Devices(8) }, nil},
		{"one short", o, func() []HostDevice { return h100Devices(7) }, []string{"reports 7 devices; the listing has 8 per node"}},
		{"other model", o, func() []HostDevice {
			d := h100Devices(8)
			d[3].Name = "NVIDIA A100-SXM4-80GB"
			return d
		}, []string{`device 3 is "NVIDIA A100-SXM4-80GB", not NVIDIA H100 80GB SXM`}},
		{"less memory", o, func() []HostDevice {
			d := h100Devices(8)
			d[5].MemoryMiB = 40960
			return d
		}, []string{"device 5 has 40,960 MiB of memory; the listing has 80 GB"}},
		{"memory unknown is not compared", o, func() []HostDevice {
			d := h100Devices(8)
			d[0].MemoryMiB = 0
			return d
		}, nil},
		{"a device fallen off the bus is not other hardware", o, func() []HostDevice {
			d := h100Devices(8)
			d[1] = HostDevice{Index: 1, Healthy: false}
			return d
		}, nil},
		{"an unhealthy device of another model still differs", o, func() []HostDevice {
			d := h100Devices(8)
			d[2].Name, d[2].Healthy = "Tesla T4", false
			return d
		}, []string{`device 2 is "Tesla T4"`}},
		{"B200 memory read as GB", b200, func() []HostDevice {
			return []HostDevice{{Index: 0, Name: "NVIDIA B200", MemoryMiB: 183359}}
		}, nil},
		{"at most a few messages", o, func() []HostDevice {
			d := h100Devices(9)
			for i := range d {
				d[i].Name = "Tesla T4"
			}
			return d
		}, []string{"reports 9 devices", "device 0 is", "device 1 is", "device 2 is"}},
	}
	for _, tt := range tests {
		got := HardwareDifferences(tt.offer, tt.devices())
		if len(got) != len(tt.want) {
			t.Errorf("%s: %q, want %d differences", tt.name, got, len(tt.want))
			continue
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("%s: difference %d is %q, want it to contain %q", tt.name, i, got[i], tt.want[i])
			}
		}
	}
	if m := HardwareDiffersMessage(1, []string{"a", "b"}); m != "Node 1 a; b." {
		t.Errorf("HardwareDiffersMessage = %q", m)
	}
}

func TestHardwareDiffersRedFlag(t *testing.T) {
	o := Offer{AcceleratorID: "nvidia-h100-80gb-sxm", MemoryGB: 80, DevicesPerNode: 8, Nodes: 1, PriceCentsPerDeviceHour: 200}
	in := ModerationInput{Record: ProviderRecord{MaxDeliveredDevices: 8}}
	if flags := RedFlags(o, in); len(flags) != 0 {
		t.Fatalf("flags without a report: %+v", flags)
	}
	in.HardwareDiffers = []string{"Node 0 reports 7 devices; the listing has 8 per node."}
	flags := RedFlags(o, in)
	if len(flags) != 1 || flags[0].Code != FlagHardwareDiffers || flags[0].Message != in.HardwareDiffers[0] ||
		flags[0].Code.Label() != "Hardware differs from listing" {
		t.Fatalf("flags = %+v", flags)
	}
}

func TestValidateHeartbeat(t *testing.T) {
	ok := Heartbeat{Seq: 1, AgentVersion: " 1.0.0\n", Probe: "simulate", Devices: h100Devices(2)}
	if err := ValidateHeartbeat(&ok); err != nil {
		t.Fatal(err)
	}
	if ok.AgentVersion != "1.0.0" || ok.HealthyDevices() != 2 {
		t.Errorf("normalised %+v, healthy %d", ok, ok.HealthyDevices())
	}
	tests := []struct {
		name  string
		edit  func(*Heartbeat)
		field string
	}{
		{"zero seq", func(h *Heartbeat) { h.Seq = 0 }, "seq"},
		{"negative seq", func(h *Heartbeat) { h.Seq = -4 }, "seq"},
		{"too many devices", func(h *Heartbeat) { h.Devices = h100Devices(MaxHeartbeatDevices + 1) }, "devices"},
		{"utilization", func(h *Heartbeat) { h.Devices[1].UtilizationPct = 101 }, "devices"},
		{"power", func(h *Heartbeat) { h.Devices[0].PowerW = -1 }, "devices"},
		{"long version", func(h *Heartbeat) { h.AgentVersion = strings.Repeat("v", 65) }, "agent_version"},
		{"long error", func(h *Heartbeat) { h.Error = strings.Repeat("e", 1001) }, "error"},
	}
	for _, tt := range tests {
		hb := Heartbeat{Seq: 3, Devices: h100Devices(2)}
		tt.edit(&hb)
		err := ValidateHeartbeat(&hb)
		if ErrorCode(err) != CodeInvalid || FieldErrors(err)[tt.field] == "" || len(FieldErrors(err)) != 1 {
			t.Errorf("%s: %v, want one problem with %s", tt.name, err, tt.field)
		}
	}
	hb := Heartbeat{Seq: 1, Devices: []HostDevice{{Name: "GPU\x00\x1b[31m", Healthy: false}}}
	if err := ValidateHeartbeat(&hb); err != nil || strings.ContainsAny(hb.Devices[0].Name, "\x00\x1b") || hb.HealthyDevices() != 0 {
		t.Errorf("control characters: %v %q", err, hb.Devices[0].Name)
	}
}

func TestHeartbeatGrace(t *testing.T) {
	if HeartbeatGrace(10*time.Second) != time.Minute || HeartbeatGrace(30*time.Second) != 90*time.Second {
		t.Errorf("grace %v %v", HeartbeatGrace(10*time.Second), HeartbeatGrace(30*time.Second))
	}
}

func TestAccessStateOf(t *testing.T) {
	start := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := ReservationPiece{Start: start, End: start.Add(10 * time.Hour), Nodes: []NodeShare{{0, 8}, {1, 8}}}
	tests := []struct {
		state              ReservationState
		installed, removed bool
		at                 time.Time
		want               AccessState
	}{
		{ReservationConfirmed, false, false, start.Add(-time.Second), AccessNone},
		{ReservationConfirmed, false, false, start, AccessInstall},
		{ReservationActive, true, false, start.Add(time.Hour), AccessInstall},
		{ReservationActive, true, false, p.End, AccessRemove},
		{ReservationCompleted, true, false, p.End.Add(time.Hour), AccessRemove},
		{ReservationCompleted, true, true, p.End.Add(time.Hour), AccessNone},
		{ReservationCompleted, false, false, p.End.Add(time.Hour), AccessNone},
		{ReservationCancelled, true, false, start.Add(time.Hour), AccessRemove},
		{ReservationHeld, false, false, start.Add(time.Hour), AccessNone},
	}
	for _, tt := range tests {
		if got := AccessStateOf(tt.state, p, tt.installed, tt.removed, tt.at); got != tt.want {
			t.Errorf("%s installed %v removed %v at %s: %q, want %q", tt.state, tt.installed, tt.removed, tt.at, got, tt.want)
		}
	}
	if p.DevicesOnNode(1) != 8 || p.DevicesOnNode(2) != 0 {
		t.Errorf("DevicesOnNode: %d %d", p.DevicesOnNode(1), p.DevicesOnNode(2))
	}
	if RemovalOverdue(ReservationCompleted, p, true, false, time.Time{}, p.End.Add(RemovalDeadline-time.Second)) ||
		!RemovalOverdue(ReservationCompleted, p, true, false, time.Time{}, p.End.Add(RemovalDeadline)) ||
		RemovalOverdue(ReservationCompleted, p, true, true, time.Time{}, p.End.Add(time.Hour)) ||
		RemovalOverdue(ReservationCompleted, p, false, false, time.Time{}, p.End.Add(time.Hour)) {
		t.Error("RemovalOverdue")
	}
}

func TestValidateConnection(t *testing.T) {
	good := []Connection{{"203.0.113.7", 22, "gpu"}, {"node-1.example.com", 2222, "ubuntu"}, {"2001:db8::1", 22, "_svc"}}
	for _, c := range good {
		if err := ValidateConnection(&c); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
	bad := []struct {
		c     Connection
		field string
	}{
		{Connection{"", 22, "gpu"}, "host"},
		{Connection{"bad host; rm -rf", 22, "gpu"}, "host"},
		{Connection{"h.example.com", 0, "gpu"}, "port"},
		{Connection{"h.example.com", 70000, "gpu"}, "port"},
		{Connection{"h.example.com", 22, "Root"}, "user"},
		{Connection{"h.example.com", 22, ""}, "user"},
	}
	for _, tt := range bad {
		err := ValidateConnection(&tt.c)
		if FieldErrors(err)[tt.field] == "" || len(FieldErrors(err)) != 1 {
			t.Errorf("%+v: %v, want a problem with %s only", tt.c, err, tt.field)
		}
	}
	if c := (Connection{"h", 22, "gpu"}); c.SSHCommand() != "ssh gpu@h" {
		t.Error(c.SSHCommand())
	}
	if c := (Connection{"h", 2222, "gpu"}); c.SSHCommand() != "ssh -p 2222 gpu@h" {
		t.Error(c.SSHCommand())
	}
}

func TestMeasuredOutageRules(t *testing.T) {
	if MissingDevices(8, 8) != 0 || MissingDevices(8, 9) != 0 || MissingDevices(8, 5) != 3 || MissingDevices(4, 0) != 4 {
		t.Error("MissingDevices")
	}
	s := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := ReservationPiece{Start: s, End: s.Add(time.Hour)}
	tests := []struct {
		name        string
		last, until time.Time
		start       time.Time
		ok          bool
	}{
		{"within the grace period", s.Add(time.Minute), s.Add(2 * time.Minute), time.Time{}, false},
		{"exactly the grace period", s.Add(time.Minute), s.Add(2*time.Minute + 0), time.Time{}, false},
		{"beyond it", s.Add(time.Minute), s.Add(2*time.Minute + time.Second), s.Add(time.Minute), true},
		{"silent before the start", s.Add(-time.Hour), s.Add(time.Second), s, true},
		{"silent before the start, not yet started", s.Add(-time.Hour), s, time.Time{}, false},
		{"silent from just before the start", s.Add(-10 * time.Second), s.Add(51 * time.Second), s, true},
		{"grace passes after the end", p.End.Add(-30 * time.Second), p.End.Add(time.Hour), time.Time{}, false},
		{"grace passes before the end", p.End.Add(-61 * time.Second), p.End.Add(time.Hour), p.End.Add(-61 * time.Second), true},
		{"silent after the end", p.End.Add(time.Second), p.End.Add(time.Hour), time.Time{}, false},
	}
	for _, tt := range tests {
		start, ok := SilenceOutage(p, tt.last, tt.until)
		if ok != tt.ok || !start.Equal(tt.start) {
			t.Errorf("%s: SilenceOutage = %s, %v; want %s, %v", tt.name, start, ok, tt.start, tt.ok)
		}
	}
}

// The market's up-time bounds a silence: runs merged over replicas, with
// ServerUpSlack (30 s) after each run's last record.
func TestMarketSilence(t *testing.T) {
	s := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := ReservationPiece{Start: s, End: s.Add(2 * time.Hour)}
	down := []ServerRun{{Start: s.Add(-time.Hour), Seen: s.Add(10 * time.Second)}, {Start: s.Add(100 * time.Second), Seen: s.Add(time.Hour)}}
	overlap := []ServerRun{{Start: s.Add(-time.Hour), Seen: s.Add(time.Hour)}, {Start: s.Add(100 * time.Second), Seen: s.Add(time.Hour)}}
	for _, tc := range []struct {
		name        string
		runs        []ServerRun
		last, until time.Duration
		start       time.Duration
		ok          bool
	}{
		{"no runs recorded: as before", nil, 10 * time.Second, 160 * time.Second, 10 * time.Second, true},
		{"restart: counted from the restart, 60 s is within the grace", down, 10 * time.Second, 160 * time.Second, 0, false},
		{"restart: 61 s after it is an outage from the restart", down, 10 * time.Second, 161 * time.Second, 100 * time.Second, true},
		{"another replica was up meanwhile: from the last heartbeat", overlap, 10 * time.Second, 160 * time.Second, 10 * time.Second, true},
		{"silence within one run", down, 5 * time.Minute, 7 * time.Minute, 5 * time.Minute, true},
	} {
		start, ok := MarketSilence(p, tc.runs, s.Add(tc.last), s.Add(tc.until))
		if ok != tc.ok || (ok && !start.Equal(s.Add(tc.start))) {
			t.Errorf("%s: %s %v, want +%s %v", tc.name, start, ok, tc.start, tc.ok)
		}
	}
	if at, ok := MarketDownAfter(down, s); !ok || !at.Equal(s.Add(40*time.Second)) {
		t.Errorf("down after: %s %v, want +40s", at, ok)
	}
	if _, ok := MarketDownAfter(down, s.Add(time.Minute)); ok {
		t.Error("down after a time the market was down")
	}
}
