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
// A provider with no history scores exactly DefaultReliabilityBP. Integer
// arithmetic, rounded half up once.
func ReliabilityBP(r ProviderRecord) int {
	promised := max(r.PromisedDeviceSeconds, 0)
	lost := min(max(r.LostDeviceSeconds, 0), promised)
	prior := int64(ReliabilityPriorDeviceHours) * 3600
	num := prior*DefaultReliabilityBP + (promised-lost)*10000
	score := MulDivRound(num, 1, prior+promised)
	penalty := min(int64(max(r.RecentIncidents, 0))*ReliabilityIncidentPenaltyBP, ReliabilityMaxPenaltyBP)
	score -= penalty
	// 0 means "unknown" to the matcher; the lowest real score is 1.
	return int(min(max(score, 1), 10000))
}
