package market

import (
	"sort"
	"strconv"
	"strings"
)

// DisputeReason is why a buyer opens a dispute; chargebacks from the
// buyer's bank arrive with DisputeChargeback.
type DisputeReason string

// Dispute reasons.
const (
	DisputeUnacknowledgedIncident DisputeReason = "incident_unacknowledged"
	DisputeNotAsListed            DisputeReason = "not_as_listed"
	DisputeCharge                 DisputeReason = "charge"
	DisputeChargeback             DisputeReason = "chargeback"
)

// DisputeReasons are the reasons a buyer may choose, in form order.
var DisputeReasons = []DisputeReason{DisputeUnacknowledgedIncident, DisputeNotAsListed, DisputeCharge}

// Label is the display name of the reason.
func (r DisputeReason) Label() string {
	switch r {
	case DisputeUnacknowledgedIncident:
		return "An incident the provider did not acknowledge"
	case DisputeNotAsListed:
		return "Hardware not as listed"
	case DisputeCharge:
		return "A charge I disagree with"
	case DisputeChargeback:
		return "Chargeback from the buyer's bank"
	}
	return string(r)
}

// MaxDisputeStatement is the longest statement a party may make at once.
const MaxDisputeStatement = 4000

// ValidateDisputeStatement trims a statement and checks its length.
func ValidateDisputeStatement(s string) (string, error) {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return "", &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"statement": "Say what happened, with what evidence you have."}}
	case len(s) > MaxDisputeStatement:
		return "", &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"statement": "Keep the statement under 4,000 characters."}}
	}
	if msg := TextProblem(s, true); msg != "" {
		return "", &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.", Fields: map[string]string{"statement": msg}}
	}
	return s, nil
}

// PaymentRefunds is everything refunded or owed on one payment, made or
// not yet: the settlement's refund to the payer, the resale part (for a
// seller the credit of the sale of their time, for a holder of bought
// time the SLA credit of its hours) and the dispute credits granted.
type PaymentRefunds struct {
	Settlement Cents
	Resale     Cents
	Disputes   Cents
}

// Total is the sum of the refunds.
func (p PaymentRefunds) Total() Cents { return p.Settlement + p.Resale + p.Disputes }

// MaxDisputeCredit is the most a dispute may credit the buyer: what was
// paid less what has been refunded or credited already (never negative).
func MaxDisputeCredit(paid, refunded Cents) Cents {
	return max(paid-refunded, 0)
}

// SplitCredit divides a credit among the providers of a reservation in
// proportion to what each was paid (shares), in whole cents: each gets the
// floor of its exact share and the cents left over go one each to the
// largest remainders, ties to the lower provider id. The parts add up to
// credit. With no positive share the whole credit is unallocated (empty).
func SplitCredit(credit Cents, shares map[int64]Cents) map[int64]Cents {
	var total int64
	ids := make([]int64, 0, len(shares))
	for id, s := range shares {
		if s > 0 {
			total += int64(s)
			ids = append(ids, id)
		}
	}
	out := map[int64]Cents{}
	if total == 0 || credit <= 0 {
		return out
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	type rem struct {
		id int64
		r  int64
	}
	var rems []rem
	var given int64
	for _, id := range ids {
		num := int64(credit) * int64(shares[id])
		part := num / total
		out[id] = Cents(part)
		given += part
		rems = append(rems, rem{id, num % total})
	}
	sort.SliceStable(rems, func(i, j int) bool { return rems[i].r > rems[j].r })
	for i := 0; given < int64(credit); i++ {
		out[rems[i%len(rems)].id]++
		given++
	}
	return out
}

// DisputeKey is the idempotency key of one money movement of a dispute's
// credit: "dispute_12_refund", "dispute_12_credit_p7". The same key goes on
// the ledger row and on the processor call, so a retried refund never
// moves money twice.
func DisputeKey(disputeID int64, kind string, providerID int64) string {
	k := "dispute_" + strconv.FormatInt(disputeID, 10) + "_" + kind
	if providerID != 0 {
		k += "_p" + strconv.FormatInt(providerID, 10)
	}
	return k
}

// DisputeDecision is an admin's decision on a dispute, with what decides
// whether it may be made: whether the dispute is still open, and for a
// chargeback (one raised through the buyer's bank) whether the bank has
// ruled against the marketplace.
type DisputeDecision struct {
	Reason     string // told to both parties
	Credit     Cents  // 0 rejects the dispute
	Open       bool
	Chargeback bool
	BankLost   bool
}

// CheckDisputeDecision checks a decision before any money is looked at: a
// reason for both parties, a credit that is not negative, an open dispute,
// and for a chargeback the bank's ruling against the marketplace (if it
// rules for it, the money comes back and the case closes by itself).
func CheckDisputeDecision(d DisputeDecision) error {
	switch {
	case strings.TrimSpace(d.Reason) == "":
		return &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"reason": "Give both parties the reason for the decision."}}
	case d.Credit < 0:
		return &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"credit": "The credit cannot be negative."}}
	case !d.Open:
		return Errorf(CodeConflict, "This dispute has already been decided.")
	case d.Chargeback && !d.BankLost:
		return Errorf(CodeConflict, "The buyer's bank has not ruled on this chargeback yet. If it rules for the marketplace the money comes back and the case closes by itself; if against, decide here what the providers bear.")
	}
	return nil
}

// CheckDisputeCredit checks a credit against the most the dispute may
// still credit (max: what was paid, less every refund made or owed on that
// payment; MaxDisputeCredit).
func CheckDisputeCredit(credit, max, paid, refunded Cents) error {
	if credit > max {
		return &Error{Code: CodeInvalid, Message: "Please correct the highlighted fields.",
			Fields: map[string]string{"credit": "The credit can be at most " + max.String() + ": " + paid.String() + " paid, less " + refunded.String() + " refunded or credited already."}}
	}
	return nil
}
