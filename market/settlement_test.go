package market

import "testing"

func TestPayoutStateFor(t *testing.T) {
	for _, c := range []struct {
		amount              Cents
		disputed, onboarded bool
		want                PayoutState
	}{
		{0, true, false, PayoutDone}, // nothing to pay is a completed step, even when disputed
		{-5, false, true, PayoutDone},
		{100, true, true, PayoutFrozen},
		{100, false, true, PayoutPending},
		{100, false, false, PayoutHeld},
	} {
		if got := PayoutStateFor(c.amount, c.disputed, c.onboarded); got != c.want {
			t.Errorf("PayoutStateFor(%d, %v, %v) = %s, want %s", c.amount, c.disputed, c.onboarded, got, c.want)
		}
	}
}

func TestNextSettlementState(t *testing.T) {
	for _, c := range []struct {
		current    SettlementState
		refundDone bool
		payouts    []PayoutState
		want       SettlementState
	}{
		{SettlementPending, true, []PayoutState{PayoutDone, PayoutDone}, SettlementDone},
		{SettlementPending, true, nil, SettlementDone},
		{SettlementPending, true, []PayoutState{PayoutDone, PayoutHeld}, SettlementWaiting},
		{SettlementPending, true, []PayoutState{PayoutFrozen}, SettlementWaiting},
		{SettlementPending, true, []PayoutState{PayoutPending, PayoutHeld}, SettlementPending},
		{SettlementPending, false, []PayoutState{PayoutDone}, SettlementPending},
		{SettlementFailed, false, []PayoutState{PayoutDone}, SettlementFailed},
		{SettlementFailed, true, []PayoutState{PayoutPending}, SettlementFailed},
		{SettlementFailed, true, []PayoutState{PayoutDone}, SettlementDone},
		{SettlementWaiting, true, []PayoutState{PayoutPending}, SettlementPending},
	} {
		if got := NextSettlementState(c.current, c.refundDone, c.payouts); got != c.want {
			t.Errorf("NextSettlementState(%s, %v, %v) = %s, want %s", c.current, c.refundDone, c.payouts, got, c.want)
		}
	}
}
