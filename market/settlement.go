package market

// SettlementState is where a reservation's settlement stands.
type SettlementState string

// Settlement states.
const (
	// SettlementPending has steps left; the retrier runs them when due.
	SettlementPending SettlementState = "pending"
	// SettlementWaiting has made the refund and every payout it can; the
	// rest are held until the provider finishes onboarding or frozen by a
	// dispute.
	SettlementWaiting SettlementState = "waiting"
	// SettlementFailed gave up after the attempts allowed; an admin retries.
	SettlementFailed SettlementState = "failed"
	// SettlementDone: refund and payouts made.
	SettlementDone SettlementState = "done"
)

// PayoutState is where one provider's payout of a settlement stands.
type PayoutState string

// Payout states.
const (
	PayoutPending PayoutState = "pending" // to send when the retrier runs
	PayoutHeld    PayoutState = "held"    // the provider has not finished onboarding
	PayoutFrozen  PayoutState = "frozen"  // a dispute of the reservation is open
	PayoutDone    PayoutState = "done"    // sent, or nothing to send
)

// Label names the settlement state in words for staff: "in progress",
// "payouts waiting", "stopped: needs a retry", "settled".
func (s SettlementState) Label() string {
	switch s {
	case SettlementPending:
		return "in progress"
	case SettlementWaiting:
		return "refund made, payouts waiting"
	case SettlementFailed:
		return "stopped: needs a retry"
	case SettlementDone:
		return "settled"
	}
	return "unknown"
}

// Label names the payout state in words: "to be sent", "held until
// payouts are connected", "frozen by a dispute", "paid".
func (p PayoutState) Label() string {
	switch p {
	case PayoutPending:
		return "to be sent"
	case PayoutHeld:
		return "held until payouts are connected"
	case PayoutFrozen:
		return "frozen by a dispute"
	case PayoutDone:
		return "paid"
	}
	return "unknown"
}

// PayoutStateFor is where a payout of amount stands: done when there is
// nothing to pay (a zero payout is a completed step, never a transfer),
// frozen while a dispute of the reservation is open, pending when the
// provider can be paid, held otherwise.
func PayoutStateFor(amount Cents, disputed, onboarded bool) PayoutState {
	switch {
	case amount <= 0:
		return PayoutDone
	case disputed:
		return PayoutFrozen
	case onboarded:
		return PayoutPending
	}
	return PayoutHeld
}

// NextSettlementState is a settlement's state from its steps: done when
// the refund and every payout are made; waiting when only held or frozen
// payouts are left; failed while an admin has not retried a failed one;
// pending otherwise.
func NextSettlementState(current SettlementState, refundDone bool, payouts []PayoutState) SettlementState {
	var pending, blocked int
	for _, p := range payouts {
		switch p {
		case PayoutPending:
			pending++
		case PayoutHeld, PayoutFrozen:
			blocked++
		}
	}
	switch {
	case refundDone && pending == 0 && blocked == 0:
		return SettlementDone
	case refundDone && pending == 0:
		return SettlementWaiting
	case current == SettlementFailed:
		return SettlementFailed
	}
	return SettlementPending
}
