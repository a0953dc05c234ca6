package market

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// IncidentKind names what went wrong during a reservation. Each kind has one
// remedy, applied by Settle:
//
//   - host_failure: devices on a failed host were not delivered. Pro-rata
//     refund of the piece amount for the device-hours lost.
//   - power_curtailment: devices were powered down or throttled off by the
//     site. Pro-rata refund for the curtailed device-hours, like a host
//     failure.
//   - fewer_devices: fewer devices than booked were handed over. Pro-rata
//     refund for the missing devices over the incident's span.
//   - network_degradation: the devices ran, but on a degraded network. A
//     credit of DegradationBP (NetworkDegradationCreditBP when zero) of the
//     amount for the degraded device-hours.
//   - preemption: interruptible capacity was taken back. Only the time used is
//     charged: the affected devices are not charged from the preemption start
//     to the end of the piece, whatever the incident's end says.
//   - underperformance: the devices ran below the offer's guaranteed figure
//     (measured by the provider agent's acceptance test). A credit of
//     DegradationBP — the shortfall — of the amount for the affected
//     device-hours, like a degraded network.
//
// How the first three count depends on the billing basis; see Settle.
type IncidentKind string

// Incident kinds.
const (
	IncidentHostFailure        IncidentKind = "host_failure"
	IncidentPowerCurtailment   IncidentKind = "power_curtailment"
	IncidentNetworkDegradation IncidentKind = "network_degradation"
	IncidentFewerDevices       IncidentKind = "fewer_devices"
	IncidentPreemption         IncidentKind = "preemption"
	IncidentUnderperformance   IncidentKind = "underperformance"
)

// IncidentKinds lists every kind, in the order forms show them.
var IncidentKinds = []IncidentKind{
	IncidentHostFailure, IncidentPowerCurtailment, IncidentNetworkDegradation,
	IncidentFewerDevices, IncidentPreemption, IncidentUnderperformance,
}

// Valid reports whether k is a known kind.
func (k IncidentKind) Valid() bool {
	for _, x := range IncidentKinds {
		if k == x {
			return true
		}
	}
	return false
}

// Label is the display name of the kind.
func (k IncidentKind) Label() string {
	switch k {
	case IncidentHostFailure:
		return "Host failure"
	case IncidentPowerCurtailment:
		return "Power curtailment"
	case IncidentNetworkDegradation:
		return "Network degradation"
	case IncidentFewerDevices:
		return "Fewer devices than booked"
	case IncidentPreemption:
		return "Preemption (interruptible)"
	case IncidentUnderperformance:
		return "Underperformance"
	}
	return string(k)
}

// Remedy describes in one sentence what the buyer gets for an incident of
// this kind, for forms and statements.
func (k IncidentKind) Remedy() string {
	switch k {
	case IncidentHostFailure:
		return "Pro-rata refund for the device-hours not delivered."
	case IncidentPowerCurtailment:
		return "Pro-rata refund for the curtailed device-hours."
	case IncidentNetworkDegradation:
		return fmt.Sprintf("A credit of the agreed severity (%s%% unless stated) of the amount for the degraded device-hours.", FormatPercentBP(NetworkDegradationCreditBP))
	case IncidentFewerDevices:
		return "Pro-rata refund for the missing devices."
	case IncidentPreemption:
		return "Only the time used is charged: the rest of the booking from the preemption on is not."
	case IncidentUnderperformance:
		return "A credit of the shortfall below the guaranteed figure (the severity) of the amount for the affected device-hours."
	}
	return ""
}

// outageKinds are the kinds that take devices away (they are not
// delivered), as opposed to degrading them or ending interruptible use.
var outageKinds = []IncidentKind{IncidentHostFailure, IncidentPowerCurtailment, IncidentFewerDevices}

// OutageKinds returns the incident kinds that are outages, for queries that
// count lost device-time (the one list; never restate it).
func OutageKinds() []IncidentKind { return append([]IncidentKind(nil), outageKinds...) }

// outage reports whether the kind is an outage (OutageKinds).
func (k IncidentKind) outage() bool {
	for _, o := range outageKinds {
		if k == o {
			return true
		}
	}
	return false
}

// NetworkDegradationCreditBP is the credit for a degraded network when an
// incident states no severity: half the amount of the degraded device-hours.
const NetworkDegradationCreditBP = 5000

// MaxIncidentNote is the longest evidence note an incident may carry.
const MaxIncidentNote = 2000

// Incident is something that went wrong on one reservation piece, over the
// half-open interval [Start, End). Reported by the provider it applies at
// once; reported by the buyer it applies once the provider acknowledges it.
// Settle counts only acknowledged incidents.
type Incident struct {
	ID              int64
	PieceID         int64
	Kind            IncidentKind
	Start, End      time.Time
	DevicesAffected int
	// DegradationBP is, for network degradation, the agreed severity: the
	// share of the degraded device-hours' amount credited (zero means
	// NetworkDegradationCreditBP); for underperformance, the shortfall below
	// the guaranteed figure, required. Must be zero for other kinds.
	DegradationBP int
	Note          string // evidence: what happened, logs, ticket numbers
	Acknowledged  bool   // counts in settlement
}

// ValidateIncident checks an incident against the piece it is reported on
// and returns an invalid *Error naming each bad field. It normalises the
// incident: times in UTC truncated to the second, the note trimmed, and for
// a preemption a missing end set to the piece's end (preempted capacity is
// not returned within the booking).
func ValidateIncident(inc *Incident, piece ReservationPiece) error {
	p := Problems{}
	if inc.PieceID != piece.ID {
		p.Add("piece", "The incident must be reported on one of the reservation's pieces.")
	}
	if !inc.Kind.Valid() {
		p.Add("kind", "Choose what happened.")
	}
	if inc.Kind == IncidentPreemption && !piece.Interruptible {
		p.Add("kind", "Only interruptible capacity can be preempted; report a host failure instead.")
	}
	inc.Start = inc.Start.UTC().Truncate(time.Second)
	inc.End = inc.End.UTC().Truncate(time.Second)
	if inc.Kind == IncidentPreemption && inc.End.IsZero() {
		inc.End = piece.End.UTC().Truncate(time.Second)
	}
	// A preemption may also be marked at the piece's very end, zero long:
	// the capacity was not renewed after it (a spot bid that did not win
	// the next hour, market/spot.go); the piece ran in full and nothing of
	// it goes uncharged.
	atEnd := inc.Kind == IncidentPreemption && inc.Start.Equal(piece.End.UTC().Truncate(time.Second)) && inc.End.Equal(inc.Start)
	switch {
	case atEnd:
	case inc.Start.IsZero():
		p.Add("start", "Enter when the incident started.")
	case inc.Start.Before(piece.Start) || !inc.Start.Before(piece.End):
		p.Add("start", "The incident must start within the booking.")
	}
	switch {
	case atEnd:
	case inc.End.IsZero():
		p.Add("end", "Enter when the incident ended.")
	case !inc.Start.IsZero() && !inc.End.After(inc.Start):
		p.Add("end", "The incident must end after it starts.")
	case inc.End.After(piece.End):
		p.Add("end", "The incident must end within the booking.")
	}
	if inc.DevicesAffected < 1 || inc.DevicesAffected > piece.Devices {
		p.Add("devices_affected", fmt.Sprintf("Devices affected must be between 1 and %d.", piece.Devices))
	}
	switch {
	case inc.DegradationBP < 0 || inc.DegradationBP > 10000:
		p.Add("degradation", "The severity must be between 0%% and 100%%.")
	case inc.DegradationBP != 0 && inc.Kind != IncidentNetworkDegradation && inc.Kind != IncidentUnderperformance:
		p.Add("degradation", "A severity applies only to network degradation and underperformance.")
	case inc.DegradationBP == 0 && inc.Kind == IncidentUnderperformance:
		p.Add("degradation", "Enter how far below the guaranteed figure the devices ran, as a percentage.")
	}
	inc.Note = strings.TrimSpace(inc.Note)
	switch {
	case inc.Note == "":
		p.Add("note", "Describe what happened and the evidence for it.")
	case len(inc.Note) > MaxIncidentNote:
		p.Add("note", fmt.Sprintf("Keep the note under %d characters.", MaxIncidentNote))
	}
	textField(p, "note", inc.Note, true)
	return p.Err()
}

// SLATerms are an offer's settlement terms as they apply to a piece.
type SLATerms struct {
	BillingBasis   BillingBasis
	UptimeBP       int // guaranteed uptime; below it the SLA is breached
	CreditSchedule []CreditTier
	CreditCapBP    int // most that SLA credits may come to, of the piece amount
}

// TermsOf returns the settlement terms of an offer.
func TermsOf(o Offer) SLATerms {
	return SLATerms{BillingBasis: o.BillingBasis, UptimeBP: o.UptimeBP, CreditSchedule: o.CreditSchedule, CreditCapBP: o.CreditCapBP}
}

// SettlementInput is everything Settle needs: the reservation with its
// pieces and amounts, the terms of each piece's offer (by offer id), the
// incidents reported on its pieces and the platform fee.
type SettlementInput struct {
	Reservation   Reservation
	Terms         map[int64]SLATerms // by offer id
	Incidents     []Incident
	PlatformFeeBP int // basis points of the amount the provider keeps
}

// ClauseKind names the clause of the terms a statement line comes from.
type ClauseKind string

// Clause kinds: one per incident kind, plus the uptime credit schedule.
const (
	ClauseHostFailure        ClauseKind = "host_failure"
	ClausePowerCurtailment   ClauseKind = "power_curtailment"
	ClauseNetworkDegradation ClauseKind = "network_degradation"
	ClauseFewerDevices       ClauseKind = "fewer_devices"
	ClausePreemption         ClauseKind = "preemption"
	ClauseUnderperformance   ClauseKind = "underperformance"
	ClauseUptime             ClauseKind = "uptime_credit"
	ClauseCancellation       ClauseKind = "cancellation"
	ClauseRejection          ClauseKind = "rejection"
)

// Clause is one line of a settlement statement: what a clause of the terms
// gives back to the buyer.
type Clause struct {
	Kind       ClauseKind
	IncidentID int64 // zero for the uptime credit
	Label      string
	// DeviceSeconds is the device-time the clause covers (lost, degraded
	// or preempted), zero for the uptime credit.
	DeviceSeconds int64
	// RateBP is the share of that device-time's amount given back
	// (10000 for pro-rata); for the uptime credit, the tier's credit.
	RateBP int
	Cents  Cents
	// SLA is true for SLA credits, which the credit cap limits; false for
	// amounts the billing basis never charged (preemption, work not
	// delivered on a successful-work basis).
	SLA bool
}

// PieceStatement is the settlement of one reservation piece.
type PieceStatement struct {
	PieceID    int64
	OfferID    int64
	ProviderID int64
	Basis      BillingBasis
	Devices    int
	Start, End time.Time
	Paid       Cents

	// Device-time in device-seconds: reserved is devices × duration;
	// promised excludes preempted interruptible time; delivered is promised
	// minus outages.
	ReservedDeviceSeconds  int64
	PromisedDeviceSeconds  int64
	DeliveredDeviceSeconds int64
	UptimeBP               int  // delivered / promised, rounded down
	GuaranteeBP            int  // the offer's uptime guarantee
	Breached               bool // uptime below the guarantee

	Clauses          []Clause
	NotCharged       Cents // sum of the non-SLA lines
	CreditsBeforeCap Cents // sum of the SLA lines
	CreditCap        Cents // the cap on SLA credits
	Credits          Cents // SLA credits after the cap
	Refund           Cents // back to the buyer: NotCharged + Credits, at most Paid
	Kept             Cents // Paid - Refund
	Fee              Cents // platform fee on Kept
	Payout           Cents // Kept - Fee, to the provider
}

// Statement is the settlement of a reservation: per piece and in total.
// Refund + Payout + Fee == Paid, per piece and in total.
type Statement struct {
	ReservationID int64
	BuyerID       int64
	PlatformFeeBP int
	Pieces        []PieceStatement
	// Pending lists incidents not counted because they await the
	// provider's acknowledgement.
	Pending []int64

	Paid                   Cents
	ReservedDeviceSeconds  int64
	PromisedDeviceSeconds  int64
	DeliveredDeviceSeconds int64
	UptimeBP               int
	NotCharged             Cents
	CreditsBeforeCap       Cents
	Credits                Cents
	Refund                 Cents
	Kept                   Cents
	Fee                    Cents
	Payout                 Cents

	// Cancelled is set on the statement of a paid reservation the buyer
	// cancelled (CancellationStatement), at CancelledAt.
	Cancelled   bool      `json:",omitempty"`
	CancelledAt time.Time `json:",omitempty"`
	// Rejected is set, beside Cancelled, when the buyer rejected the rental
	// within its acceptance period (RejectionStatement): refunded in full.
	Rejected bool `json:",omitempty"`
	// DisputeCredits are the credits of decided disputes applied after the
	// statement was computed (ApplyDisputeCredit), in order. Fee and Payout
	// above are as first computed; Payouts gives what is owed now.
	DisputeCredits []DisputeCredit `json:",omitempty"`
	// ResaleCredit is the part of Refund owed to the holder of the
	// reservation's time bought on resale (ResaleBuyerID, through listing
	// ResaleListingID) for incidents in the resold hours (SettleResold);
	// the reservation's own buyer is refunded the rest.
	ResaleCredit    Cents `json:",omitempty"`
	ResaleBuyerID   int64 `json:",omitempty"`
	ResaleListingID int64 `json:",omitempty"`
	// RefundWithheld is what SettleResold's caps kept from the refunds of
	// a resold reservation: kept by the providers, not part of Refund.
	RefundWithheld Cents `json:",omitempty"`
}

// ProviderPayout is what one provider is owed by a settlement.
type ProviderPayout struct {
	ProviderID    int64
	Kept          Cents // what the buyer paid for the provider's pieces, after refunds and dispute credits
	DisputeCredit Cents // dispute credits taken from the provider
	Fee           Cents
	Payout        Cents
}

// Payouts sums the statement per provider, ordered by provider id, with
// the dispute credits applied since (DisputeCredits): what each provider
// keeps, pays in fees and is paid now.
func (s Statement) Payouts() []ProviderPayout {
	by := map[int64]*ProviderPayout{}
	var ids []int64
	for _, p := range s.Pieces {
		pp, ok := by[p.ProviderID]
		if !ok {
			pp = &ProviderPayout{ProviderID: p.ProviderID}
			by[p.ProviderID] = pp
			ids = append(ids, p.ProviderID)
		}
		pp.Kept += p.Kept
		pp.Fee += p.Fee
		pp.Payout += p.Payout
	}
	for _, d := range s.DisputeCredits {
		pp, ok := by[d.ProviderID]
		if !ok {
			continue
		}
		pp.Kept -= d.Taken
		pp.DisputeCredit += d.Taken
		pp.Fee, pp.Payout = d.FeeAfter, d.PayoutAfter
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	out := make([]ProviderPayout, len(ids))
	for i, id := range ids {
		out[i] = *by[id]
	}
	return out
}

// FormatDeviceHours formats device-seconds as device-hours with two
// decimals, rounded half away from zero: 45000 → "12.50".
func FormatDeviceHours(deviceSeconds int64) string {
	return Cents(MulDivRound(deviceSeconds, 100, 3600)).Decimal()
}

// maxReservedDeviceSeconds bounds one piece so that every intermediate
// product in Settle fits in 64 bits (about 4,096 × 16 devices for three
// years).
const maxReservedDeviceSeconds = 10_000_000_000_000

// Settle computes the settlement of a finished reservation. It is pure and
// deterministic.
//
// Device-time. Each piece's reserved device-seconds are devices × duration.
// Incidents are swept over the piece's timeline in order of start (then id):
// at each instant preemptions take devices first, then outages (host failure,
// power curtailment, fewer devices) take from what is left, never more than
// the piece has, so overlapping reports do not count a device twice. Promised
// = reserved − preempted; delivered = promised − lost; uptime = delivered /
// promised in basis points, rounded down (10000 when nothing was promised).
// The SLA is breached when uptime is below the offer's guarantee. Network
// degradation counts the degraded devices that were not preempted; it is
// independent of outages (the remedies add, bounded by the cap and the
// amount paid), which keeps every remedy monotone in downtime.
// Underperformance counts the same way, apart from network degradation.
//
// Remedies, per billing basis (the piece amount A covers the reserved block,
// so "pro-rata" is A × device-seconds / reserved device-seconds):
//
//   - preemption, every basis: the preempted remainder is not charged
//     (pro-rata, not an SLA credit, not capped).
//   - outages, wall_clock: a pro-rata SLA credit for the device-time lost.
//   - outages, committed_block: the buyer pays for the block regardless of
//     use, so outages give nothing while uptime meets the guarantee; once
//     the SLA is breached they give the same pro-rata SLA credit as
//     wall_clock.
//   - outages, successful_work: the lost device-time is not charged
//     (pro-rata, not capped): the buyer pays only for delivered work.
//   - network degradation, every basis: an SLA credit of the severity
//     (NetworkDegradationCreditBP by default) of the degraded device-time's
//     amount.
//   - underperformance, every basis: an SLA credit of the shortfall (the
//     severity) of the affected device-time's amount.
//   - uptime credit, every basis: of the schedule's tiers whose BelowBP
//     exceeds the uptime, the largest CreditBP (the tier for the lowest band
//     reached, however the schedule is ordered), as an SLA credit of A.
//
// SLA credits together are capped at CreditCapBP of A; the refund is the
// non-SLA lines plus the capped credits, never more than A.
//
// Rounding. Every line is a fraction num/den of A with den = reserved
// device-seconds × 10000, computed exactly in integers. The lines are in two
// groups, the amounts not charged and the SLA credits, and each group is
// rounded once, cumulatively: line i is round(A·(n1+…+ni)/den) −
// round(A·(n1+…+ni−1)/den) with MulDivRound (half away from zero, the rule
// of Share), so a group's lines add up exactly to its rounded total and no
// line is negative. The uptime credit is rounded first in its group, so it
// is exactly Share(A, the tier's rate), as any percentage of an amount is
// everywhere. The cap is Share(A, CreditCapBP). The platform fee is
// PlatformFee of what each provider keeps in total, allocated over the
// provider's pieces by what each kept, and Payout = Kept − Fee, so Refund +
// Payout + Fee == Paid exactly, per piece and in total.
//
// Only acknowledged incidents count; others are listed in Pending.
func Settle(in SettlementInput) (Statement, error) {
	r := in.Reservation
	st := Statement{ReservationID: r.ID, BuyerID: r.BuyerID, PlatformFeeBP: in.PlatformFeeBP}
	switch r.State {
	case ReservationHeld, ReservationExpired, ReservationCancelled:
		return Statement{}, Errorf(CodeConflict, "%s reservation has nothing to settle.", r.State.LabelWithArticle())
	}
	if in.PlatformFeeBP < 0 || in.PlatformFeeBP > 10000 {
		return Statement{}, Errorf(CodeInvalid, "The platform fee must be between 0%% and 100%%.")
	}
	if len(r.Pieces) == 0 {
		return Statement{}, Errorf(CodeInvalid, "The reservation has no pieces.")
	}
	var sum Cents
	byPiece := map[int64]int{}
	for i, p := range r.Pieces {
		if _, dup := byPiece[p.ID]; dup {
			return Statement{}, Errorf(CodeInvalid, "Piece %d appears twice.", p.ID)
		}
		byPiece[p.ID] = i
		sum += p.AmountCents
	}
	if sum != r.AmountCents {
		return Statement{}, Errorf(CodeInvalid, "The reservation amount %s is not the sum of its pieces (%s).", r.AmountCents, sum)
	}

	incs := make([][]Incident, len(r.Pieces))
	for _, inc := range in.Incidents {
		i, ok := byPiece[inc.PieceID]
		if !ok {
			return Statement{}, Errorf(CodeInvalid, "Incident %d is not on a piece of reservation %d.", inc.ID, r.ID)
		}
		if !inc.Acknowledged {
			st.Pending = append(st.Pending, inc.ID)
			continue
		}
		if err := ValidateIncident(&inc, r.Pieces[i]); err != nil {
			return Statement{}, fmt.Errorf("market: settle reservation %d: incident %d: %w", r.ID, inc.ID, err)
		}
		incs[i] = append(incs[i], inc)
	}

	for i, p := range r.Pieces {
		terms, ok := in.Terms[p.OfferID]
		if !ok {
			return Statement{}, Errorf(CodeInvalid, "No settlement terms for offer %d.", p.OfferID)
		}
		ps, err := settlePiece(p, terms, incs[i], in.PlatformFeeBP)
		if err != nil {
			return Statement{}, fmt.Errorf("market: settle reservation %d piece %d: %w", r.ID, p.ID, err)
		}
		st.Pieces = append(st.Pieces, ps)
		st.addPiece(ps)
		st.Fee += ps.Fee
		st.Payout += ps.Payout
	}
	st.UptimeBP = UptimeBP(st.DeliveredDeviceSeconds, st.PromisedDeviceSeconds)
	st.applyProviderFees()
	return st, nil
}

// addPiece adds a piece's figures to the statement's totals (all but the
// fee and payout, which the callers settle per provider).
func (st *Statement) addPiece(ps PieceStatement) {
	st.Paid += ps.Paid
	st.ReservedDeviceSeconds += ps.ReservedDeviceSeconds
	st.PromisedDeviceSeconds += ps.PromisedDeviceSeconds
	st.DeliveredDeviceSeconds += ps.DeliveredDeviceSeconds
	st.NotCharged += ps.NotCharged
	st.CreditsBeforeCap += ps.CreditsBeforeCap
	st.Credits += ps.Credits
	st.Refund += ps.Refund
	st.Kept += ps.Kept
}

// UptimeBP is delivered over promised device-seconds in basis points,
// rounded down (10000 when nothing was promised): the uptime of a piece, a
// provider's side of a statement or a whole statement.
func UptimeBP(delivered, promised int64) int {
	if promised <= 0 {
		return 10000
	}
	return int(delivered * 10000 / promised)
}

func validateTerms(t SLATerms) error {
	switch t.BillingBasis {
	case BillingWallClock, BillingCommittedBlock, BillingSuccessfulWork:
	default:
		return Errorf(CodeInvalid, "Unknown billing basis %q.", t.BillingBasis)
	}
	if t.UptimeBP < 0 || t.UptimeBP > 10000 || t.CreditCapBP < 0 || t.CreditCapBP > 10000 {
		return Errorf(CodeInvalid, "The uptime guarantee and the credit cap must be between 0%% and 100%%.")
	}
	for _, tier := range t.CreditSchedule {
		if tier.BelowBP < 0 || tier.BelowBP > 10000 || tier.CreditBP < 0 || tier.CreditBP > 10000 {
			return Errorf(CodeInvalid, "Credit tiers must be between 0%% and 100%%.")
		}
	}
	return nil
}

// line is a clause before rounding: num/den of the piece amount.
type line struct {
	c   Clause
	num int64
}

func settlePiece(p ReservationPiece, terms SLATerms, incs []Incident, feeBP int) (PieceStatement, error) {
	if err := validateTerms(terms); err != nil {
		return PieceStatement{}, err
	}
	if p.Devices < 1 || !p.End.After(p.Start) {
		return PieceStatement{}, Errorf(CodeInvalid, "Piece %d has no devices or no duration.", p.ID)
	}
	if p.AmountCents < 0 {
		return PieceStatement{}, Errorf(CodeInvalid, "Piece %d has a negative amount.", p.ID)
	}
	start, end := p.Start.Unix(), p.End.Unix()
	devices := int64(p.Devices)
	reserved := devices * (end - start)
	if reserved <= 0 || reserved > maxReservedDeviceSeconds {
		return PieceStatement{}, Errorf(CodeInvalid, "Piece %d is too large to settle.", p.ID)
	}
	ps := PieceStatement{
		PieceID: p.ID, OfferID: p.OfferID, ProviderID: p.ProviderID, Basis: terms.BillingBasis,
		Devices: p.Devices, Start: p.Start, End: p.End, Paid: p.AmountCents,
		ReservedDeviceSeconds: reserved, GuaranteeBP: terms.UptimeBP,
	}

	sort.SliceStable(incs, func(i, j int) bool {
		if !incs[i].Start.Equal(incs[j].Start) {
			return incs[i].Start.Before(incs[j].Start)
		}
		return incs[i].ID < incs[j].ID
	})
	// Effective intervals in Unix seconds, clipped to the piece.
	type span struct{ from, to int64 }
	spans := make([]span, len(incs))
	cuts := []int64{start, end}
	for i, inc := range incs {
		s := span{max(inc.Start.Unix(), start), min(inc.End.Unix(), end)}
		if inc.Kind == IncidentPreemption {
			s.to = end
		}
		spans[i] = s
		cuts = append(cuts, s.from, s.to)
	}
	sort.Slice(cuts, func(i, j int) bool { return cuts[i] < cuts[j] })

	ds := make([]int64, len(incs)) // device-seconds attributed to each incident
	var preempted, lost int64
	for k := 0; k+1 < len(cuts); k++ {
		a, b := cuts[k], cuts[k+1]
		if a == b || a < start || b > end {
			continue
		}
		dur := b - a
		active := func(i int) bool { return spans[i].from <= a && b <= spans[i].to }
		left := devices
		for i, inc := range incs {
			if inc.Kind == IncidentPreemption && active(i) {
				take := min(int64(inc.DevicesAffected), left)
				left -= take
				ds[i] += take * dur
				preempted += take * dur
			}
		}
		running := left
		for i, inc := range incs {
			if inc.Kind.outage() && active(i) {
				take := min(int64(inc.DevicesAffected), left)
				left -= take
				ds[i] += take * dur
				lost += take * dur
			}
		}
		degradable, slow := running, running
		for i, inc := range incs {
			if inc.Kind == IncidentNetworkDegradation && active(i) {
				take := min(int64(inc.DevicesAffected), degradable)
				degradable -= take
				ds[i] += take * dur
			}
			if inc.Kind == IncidentUnderperformance && active(i) {
				take := min(int64(inc.DevicesAffected), slow)
				slow -= take
				ds[i] += take * dur
			}
		}
	}
	ps.PromisedDeviceSeconds = reserved - preempted
	ps.DeliveredDeviceSeconds = ps.PromisedDeviceSeconds - lost
	ps.UptimeBP = UptimeBP(ps.DeliveredDeviceSeconds, ps.PromisedDeviceSeconds)
	ps.Breached = ps.UptimeBP < terms.UptimeBP

	// Two groups, each rounded once (cumulatively): amounts not charged, and
	// SLA credits. Rounding them apart keeps each monotone in downtime.
	var notCharged, sla []line
	for i, inc := range incs {
		desc := fmt.Sprintf("%s, %d of %d devices, %s", inc.Kind.Label(), inc.DevicesAffected, p.Devices,
			FormatSpan(inc.Start, time.Unix(spans[i].to, 0)))
		c := Clause{Kind: ClauseKind(inc.Kind), IncidentID: inc.ID, DeviceSeconds: ds[i], RateBP: 10000}
		num := ds[i] * 10000
		switch {
		case inc.Kind == IncidentPreemption:
			c.Label = desc + ": the preempted remainder is not charged"
			notCharged = append(notCharged, line{c, num})
		case inc.Kind == IncidentNetworkDegradation:
			c.RateBP = inc.DegradationBP
			if c.RateBP == 0 {
				c.RateBP = NetworkDegradationCreditBP
			}
			c.SLA = true
			c.Label = fmt.Sprintf("%s: %s%% credit for the degraded device-hours", desc, FormatPercentBP(c.RateBP))
			sla = append(sla, line{c, ds[i] * int64(c.RateBP)})
		case inc.Kind == IncidentUnderperformance:
			c.RateBP, c.SLA = inc.DegradationBP, true
			c.Label = fmt.Sprintf("%s: %s%% credit, the shortfall below the guaranteed figure, for those device-hours", desc, FormatPercentBP(c.RateBP))
			sla = append(sla, line{c, ds[i] * int64(c.RateBP)})
		case terms.BillingBasis == BillingSuccessfulWork:
			c.Label = desc + ": device-hours not delivered are not charged"
			notCharged = append(notCharged, line{c, num})
		case terms.BillingBasis == BillingCommittedBlock && !ps.Breached:
			c.SLA, c.RateBP = true, 0
			c.Label = desc + ": committed block within the uptime guarantee, no refund"
			sla = append(sla, line{c, 0})
		default:
			c.SLA = true
			c.Label = desc + ": pro-rata refund for device-hours not delivered"
			sla = append(sla, line{c, num})
		}
	}
	if tier, ok := creditTier(terms.CreditSchedule, ps.UptimeBP); ok {
		sla = append(sla, line{Clause{
			Kind: ClauseUptime, RateBP: tier.CreditBP, SLA: true,
			Label: fmt.Sprintf("Uptime %s%% is below %s%%: %s%% credit", FormatPercentBP(ps.UptimeBP), FormatPercentBP(tier.BelowBP), FormatPercentBP(tier.CreditBP)),
		}, int64(tier.CreditBP) * reserved})
	}

	den := reserved * 10000
	amount := int64(p.AmountCents)
	for _, group := range [][]line{notCharged, sla} {
		// Each group is rounded once, cumulatively, which keeps its total
		// exact and monotone in downtime. The uptime credit (last in the
		// group, a plain percentage of the amount) is rounded first, so it
		// comes to exactly Share(A, its rate), like every other percentage.
		order := make([]int, len(group))
		for i := range order {
			order[i] = i
		}
		if n := len(group); n > 1 && group[n-1].c.Kind == ClauseUptime {
			order = append([]int{n - 1}, order[:n-1]...)
		}
		var cum, prev int64
		for _, i := range order {
			cum += group[i].num
			// cum never exceeds a few times den, so the quotient fits.
			rounded := MulDivRound(amount, cum, den)
			group[i].c.Cents = Cents(rounded - prev)
			prev = rounded
		}
		for _, l := range group {
			ps.Clauses = append(ps.Clauses, l.c)
			if l.c.SLA {
				ps.CreditsBeforeCap += l.c.Cents
			} else {
				ps.NotCharged += l.c.Cents
			}
		}
	}
	ps.CreditCap = Share(p.AmountCents, terms.CreditCapBP)
	ps.Credits = min(ps.CreditsBeforeCap, ps.CreditCap)
	ps.Refund = min(ps.NotCharged+ps.Credits, ps.Paid)
	ps.Kept = ps.Paid - ps.Refund
	// The fee is set per provider by Statement.applyProviderFees.
	ps.Payout = ps.Kept
	return ps, nil
}

// creditTier returns, of the tiers whose BelowBP exceeds uptime, the one
// with the largest credit.
func creditTier(tiers []CreditTier, uptime int) (CreditTier, bool) {
	var best CreditTier
	found := false
	for _, t := range tiers {
		if uptime < t.BelowBP && t.CreditBP > 0 && (!found || t.CreditBP > best.CreditBP) {
			best, found = t, true
		}
	}
	return best, found
}
