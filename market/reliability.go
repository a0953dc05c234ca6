package market

import "time"

// ReliabilityWindow is the trailing window of history the reliability score
// and the incident red flag look at.
const ReliabilityWindow = 180 * 24 * time.Hour

// The reliability score's prior. A provider starts as if it had delivered
// ReliabilityPriorDeviceHours at DefaultReliabilityBP (95 %); its own
// delivered device-hours then move the score away from the prior in
// proportion to how much it has delivered, so one good or bad day of a new
// provider does not swing it to 100 % or 0 %. Each incident in the window
// also costs ReliabilityIncidentPenaltyBP, up to ReliabilityMaxPenaltyBP
// (incidents that lost no device-time — a degraded network — still say
// something about the provider).
const (
	ReliabilityPriorDeviceHours  = 500
	ReliabilityIncidentPenaltyBP = 25
	ReliabilityMaxPenaltyBP      = 1000
)

// ReliabilityBP is a provider's reliability score in basis points (1 to
// 10000): the share of promised device-time actually delivered over the
// trailing window, shrunk towards the prior, less a penalty per incident.
// The device-time lost is ScoredLostDeviceSeconds: measured by the agents
// where they ran, as reported elsewhere. A provider with no history scores exactly DefaultReliabilityBP. Integer
// arithmetic, rounded half up once.
func ReliabilityBP(r ProviderRecord) int {
	promised := max(r.PromisedDeviceSeconds, 0)
	lost := min(r.ScoredLostDeviceSeconds(), promised)
	prior := int64(ReliabilityPriorDeviceHours) * 3600
	num := prior*DefaultReliabilityBP + (promised-lost)*10000
	score := MulDivRound(num, 1, prior+promised)
	penalty := min(int64(max(r.RecentIncidents, 0))*ReliabilityIncidentPenaltyBP, ReliabilityMaxPenaltyBP)
	score -= penalty
	// 0 means "unknown" to the matcher; the lowest real score is 1.
	return int(min(max(score, 1), 10000))
}

// ScoredLostDeviceSeconds is the device-time lost that the reliability
// score counts: on the pieces the provider's agents measured, the outages
// their heartbeats showed (the agent's and the provider's reports on those
// pieces no longer count; the buyers' acknowledged ones do); on the others, the outages reported and acknowledged. Negative
// inputs count as zero.
func (r ProviderRecord) ScoredLostDeviceSeconds() int64 {
	reported := max(r.LostDeviceSeconds, 0)
	reported -= min(max(r.ReportedLostOnMeasured, 0), reported)
	return reported + max(r.MeasuredLostDeviceSeconds, 0)
}

// ReliabilitySource says what a provider's reliability score rests on.
type ReliabilitySource string

// Reliability sources.
const (
	// ReliabilitySelfReported: the booked device-time less the outages the
	// parties reported and acknowledged — or, with no history, the prior.
	ReliabilitySelfReported ReliabilitySource = "self_reported"
	// ReliabilityMeasured: the provider's agents measured at least half of
	// the device-time delivered in the trailing window.
	ReliabilityMeasured ReliabilitySource = "measured"
)

// Label is how pages name the source.
func (s ReliabilitySource) Label() string {
	if s == ReliabilityMeasured {
		return "reported by the provider’s agent"
	}
	return "self-reported"
}

// ReliabilitySource says whether the record's score is measured by the
// provider's agents: they measured some of the device-time promised in
// the window, and at least half of it.
func (r ProviderRecord) ReliabilitySource() ReliabilitySource {
	promised := max(r.PromisedDeviceSeconds, 0)
	measured := min(max(r.MeasuredDeviceSeconds, 0), promised)
	if measured > 0 && 2*measured >= promised {
		return ReliabilityMeasured
	}
	return ReliabilitySelfReported
}

// Reliability is a provider's reliability score with what it rests on.
type Reliability struct {
	BP     int
	Source ReliabilitySource
}

// ReliabilityOf scores a provider's record (ReliabilityBP) and says what
// the score rests on.
func ReliabilityOf(r ProviderRecord) Reliability {
	return Reliability{BP: ReliabilityBP(r), Source: r.ReliabilitySource()}
}

// PriorReliability is the reliability of a provider with no record.
func PriorReliability() Reliability {
	return Reliability{BP: DefaultReliabilityBP, Source: ReliabilitySelfReported}
}

// AgentMeasured reports whether the provider's agents measured piece p
// throughout: every node holding its devices (node 0 for a piece that
// names none) had sent its first heartbeat by the piece's start, give or
// take a grace period (HeartbeatGrace). From then on the node's heartbeats,
// or their absence (a host failure, SilenceOutage), are the measurement.
// firstHeartbeat is the first heartbeat kept of each of the offer's nodes.
func AgentMeasured(p ReservationPiece, firstHeartbeat map[int]time.Time) bool {
	by := p.Start.Add(HeartbeatGrace(HeartbeatInterval))
	for _, s := range pieceShares(p) {
		first, ok := firstHeartbeat[s.Node]
		if !ok || first.After(by) {
			return false
		}
	}
	return true
}
