package market

import (
	"testing"
	"time"
)

func TestReliabilityBP(t *testing.T) {
	const h = 3600
	tests := []struct {
		name string
		r    ProviderRecord
		want int
	}{
		{name: "no history is the prior", r: ProviderRecord{}, want: DefaultReliabilityBP},
		// (500 h × 95 % + 500 h × 100 %) / 1000 h = 97.5 %
		{name: "as much flawless delivery as the prior", r: ProviderRecord{PromisedDeviceSeconds: 500 * h}, want: 9750},
		// (475 + 250) / 1000 = 72.5 %
		{name: "half of it lost", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 250 * h}, want: 7250},
		// (475 + 49_500) / 50_000 = 99.95 %
		{name: "a long clean record approaches 100 %", r: ProviderRecord{PromisedDeviceSeconds: 49_500 * h}, want: 9995},
		{name: "incidents cost 25 bp each", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, RecentIncidents: 4}, want: 9650},
		{name: "the incident penalty is capped", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, RecentIncidents: 1000}, want: 8750},
		{name: "lost above promised counts as all lost", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 900 * h}, want: 4750},
		{name: "never below 1 (0 means unknown)", r: ProviderRecord{PromisedDeviceSeconds: 1_000_000 * h, LostDeviceSeconds: 1_000_000 * h, RecentIncidents: 100}, want: 1},
		{name: "negative inputs are ignored", r: ProviderRecord{PromisedDeviceSeconds: -5, LostDeviceSeconds: -5, RecentIncidents: -3}, want: DefaultReliabilityBP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReliabilityBP(tt.r); got != tt.want {
				t.Errorf("ReliabilityBP(%+v) = %d, want %d", tt.r, got, tt.want)
			}
		})
	}
}

// More delivered device-time without loss never lowers the score, and more
// loss never raises it.
func TestReliabilityBPMonotone(t *testing.T) {
	const h = 3600
	for promised := int64(0); promised <= 5000*h; promised += 250 * h {
		for lost := int64(0); lost <= promised; lost += 250 * h {
			s := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised, LostDeviceSeconds: lost})
			if more := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised + 100*h, LostDeviceSeconds: lost}); more < s {
				t.Fatalf("promised %d lost %d: more clean delivery lowered %d to %d", promised, lost, s, more)
			}
			if lost+100*h <= promised {
				if worse := ReliabilityBP(ProviderRecord{PromisedDeviceSeconds: promised, LostDeviceSeconds: lost + 100*h}); worse > s {
					t.Fatalf("promised %d lost %d: more loss raised %d to %d", promised, lost, s, worse)
				}
			}
		}
	}
}

// Where agents measured, their outages replace the parties' reports; the
// source is measured once agents measured at least half the device-time.
// Expected scores by hand: (prior 500 h × 95 % + delivered h × 100 %) /
// (500 h + promised h), less 25 bp an incident.
func TestReliabilityMeasuredOrReported(t *testing.T) {
	const h = 3600
	tests := []struct {
		name   string
		r      ProviderRecord
		lost   int64 // ScoredLostDeviceSeconds
		bp     int
		source ReliabilitySource
	}{
		{name: "no history: the prior, self-reported", r: ProviderRecord{}, lost: 0, bp: 9500, source: ReliabilitySelfReported},
		// 500 h promised, 100 h reported lost: (475 + 400) / 1000 = 87.5 %.
		{name: "no agent: the reports", r: ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 100 * h},
			lost: 100 * h, bp: 8750, source: ReliabilitySelfReported},
		// All 500 h measured; the 100 h reported are replaced by the 20 h the
		// heartbeats showed: (475 + 480) / 1000 = 95.5 %.
		{name: "all measured: the heartbeats, not the reports",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 100 * h, MeasuredDeviceSeconds: 500 * h, MeasuredLostDeviceSeconds: 20 * h, ReportedLostOnMeasured: 100 * h},
			lost: 20 * h, bp: 9550, source: ReliabilityMeasured},
		// Half measured (250 h, 10 h lost measured, 40 h reported there and
		// replaced); the other half keeps its 60 h reported: lost 70 h,
		// (475 + 430) / 1000 = 90.5 %.
		{name: "half measured: measured, the rest as reported",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 100 * h, MeasuredDeviceSeconds: 250 * h, MeasuredLostDeviceSeconds: 10 * h, ReportedLostOnMeasured: 40 * h},
			lost: 70 * h, bp: 9050, source: ReliabilityMeasured},
		// Just under half measured (249 h): the same arithmetic, self-reported.
		// Lost 60 + 10 = 70 h: 90.5 %.
		{name: "under half measured: self-reported",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 100 * h, MeasuredDeviceSeconds: 249 * h, MeasuredLostDeviceSeconds: 10 * h, ReportedLostOnMeasured: 40 * h},
			lost: 70 * h, bp: 9050, source: ReliabilitySelfReported},
		// An agent that measured pieces of no device-time says nothing.
		{name: "nothing promised: self-reported", r: ProviderRecord{MeasuredDeviceSeconds: 10 * h}, lost: 0, bp: 9500, source: ReliabilitySelfReported},
		// Incidents still cost 25 bp each: (475 + 500) / 1000 − 0.5 % = 97.0 %.
		{name: "measured clean, two incidents",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, MeasuredDeviceSeconds: 500 * h, RecentIncidents: 2},
			lost: 0, bp: 9700, source: ReliabilityMeasured},
		// Measured above promised counts as all of it; reported on measured
		// above reported counts as all reported; lost above promised as all
		// lost: (475 + 0) / 1000 = 47.5 %.
		{name: "inconsistent inputs are clamped",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: 50 * h, MeasuredDeviceSeconds: 900 * h, MeasuredLostDeviceSeconds: 800 * h, ReportedLostOnMeasured: 70 * h},
			lost: 800 * h, bp: 4750, source: ReliabilityMeasured},
		{name: "negative inputs are ignored",
			r:    ProviderRecord{PromisedDeviceSeconds: 500 * h, LostDeviceSeconds: -5, MeasuredDeviceSeconds: -5, MeasuredLostDeviceSeconds: -5, ReportedLostOnMeasured: -5},
			lost: 0, bp: 9750, source: ReliabilitySelfReported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.ScoredLostDeviceSeconds(); got != tt.lost {
				t.Errorf("ScoredLostDeviceSeconds = %d h, want %d h", got/h, tt.lost/h)
			}
			got := ReliabilityOf(tt.r)
			if got.BP != tt.bp || got.Source != tt.source {
				t.Errorf("ReliabilityOf(%+v) = %+v, want %d %s", tt.r, got, tt.bp, tt.source)
			}
		})
	}
	if ReliabilityMeasured.Label() != "reported by the provider’s agent" || ReliabilitySelfReported.Label() != "self-reported" {
		t.Errorf("labels %q, %q", ReliabilityMeasured.Label(), ReliabilitySelfReported.Label())
	}
	if p := PriorReliability(); p.BP != 9500 || p.Source != ReliabilitySelfReported {
		t.Errorf("prior %+v", p)
	}
}

func TestAgentMeasured(t *testing.T) {
	start := time.Date(2025, 12, 1, 10, 0, 0, 0, time.UTC)
	p := ReservationPiece{Devices: 12, Start: start, End: start.Add(4 * time.Hour), Nodes: []NodeShare{{Node: 0, Devices: 8}, {Node: 2, Devices: 4}}}
	legacy := ReservationPiece{Devices: 4, Start: start, End: start.Add(4 * time.Hour)} // names no node: node 0
	tests := []struct {
		name  string
		p     ReservationPiece
		first map[int]time.Time
		want  bool
	}{
		{name: "no agent", p: p, first: nil, want: false},
		{name: "every node reported before the start", p: p, first: map[int]time.Time{0: start.Add(-time.Hour), 2: start.Add(-24 * time.Hour)}, want: true},
		{name: "one node never reported", p: p, first: map[int]time.Time{0: start.Add(-time.Hour), 1: start.Add(-time.Hour)}, want: false},
		{name: "a node's first heartbeat within the minute's grace of the start", p: p, first: map[int]time.Time{0: start.Add(time.Minute), 2: start}, want: true},
		{name: "a node's agent started later in the rental", p: p, first: map[int]time.Time{0: start.Add(time.Minute + time.Second), 2: start}, want: false},
		{name: "a piece naming no node is on node 0", p: legacy, first: map[int]time.Time{0: start.Add(-time.Hour)}, want: true},
		{name: "a piece naming no node, node 0 silent", p: legacy, first: map[int]time.Time{1: start.Add(-time.Hour)}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := AgentMeasured(tt.p, tt.first); got != tt.want {
				t.Errorf("AgentMeasured = %v, want %v", got, tt.want)
			}
		})
	}
}
