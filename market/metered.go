package market

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Metered rentals (docs/metered.md): started now, with no end, billed per
// minute of usable time from the buyer's prepaid balance.
//
// The clock runs from the moment the machine is usable — every node of the
// rental has reported the buyer's access handed over and its acceptance test
// run, or the buyer's container running — to the buyer's stop or the
// agent's confirmed removal, whichever is first. Minutes in which the agent
// measured the host as failed or short of devices are not billed: the SLA
// of metered time is "you don't pay for what you can't use".
//
// One rounding rule, in the buyer's favour: only whole minutes of billable
// time are billed (a started minute is free until it is complete, and the
// last partial minute is never billed), and the money of m minutes is the
// floor of m × price × devices / 60 in cents. Both are computed on the
// cumulative total and each draw takes the difference from what was drawn
// before, so batches never bill a minute (or a cent) twice and their sum is
// exactly the total's rounding, however the batches fall.

// MeteredSLA is what an offer that allows metered rentals states about
// metered time.
const MeteredSLA = "You don't pay for what you can't use: the meter starts when the machine is usable (access handed over and the acceptance test run, or your container running) and skips every minute the host's agent measured it as failed or short of devices."

// Limits of metered rentals.
const (
	// MeteredDefaultNoticeMinutes is the provider's notice to stop a
	// metered rental when the offer names none: the rental holds its
	// capacity this far ahead, and is stopped before a forward booking's
	// start with at least this much warning.
	MeteredDefaultNoticeMinutes = 60
	// MeteredMaxNoticeMinutes bounds the notice an offer may ask for.
	MeteredMaxNoticeMinutes = 24 * 60
	// MeteredStartCoverMinutes is how many minutes the balance must cover
	// for a rental to start.
	MeteredStartCoverMinutes = 10
	// MeteredWarnMinutes: below this many minutes of balance left the
	// buyer is warned (once per rental until topped up).
	MeteredWarnMinutes = 15
	// MeteredStopCoverMinutes: a rental whose balance cannot cover this
	// many more minutes is stopped (the agent then removes access).
	MeteredStopCoverMinutes = 2
	// MeteredMinTopUp and MeteredMaxTopUp bound one top-up.
	MeteredMinTopUp Cents = 500
	MeteredMaxTopUp Cents = 1_000_000
)

// Span is a half-open interval of time [Start, End).
type Span struct{ Start, End time.Time }

// MeteredBillableSeconds is the billable time of a rental whose clock ran
// [start, stop), less the union of the outages within it (overlapping
// outages counted once). A zero start (the clock never started) or a stop
// not after start is no time.
func MeteredBillableSeconds(start, stop time.Time, outages []Span) int64 {
	if start.IsZero() || !stop.After(start) {
		return 0
	}
	clipped := make([]Span, 0, len(outages))
	for _, o := range outages {
		s, e := o.Start, o.End
		if s.Before(start) {
			s = start
		}
		if e.After(stop) {
			e = stop
		}
		if e.After(s) {
			clipped = append(clipped, Span{s, e})
		}
	}
	sort.Slice(clipped, func(i, j int) bool { return clipped[i].Start.Before(clipped[j].Start) })
	var out time.Duration
	var cur Span
	for i, o := range clipped {
		switch {
		case i == 0:
			cur = o
		case !o.Start.After(cur.End):
			if o.End.After(cur.End) {
				cur.End = o.End
			}
		default:
			out += cur.End.Sub(cur.Start)
			cur = o
		}
	}
	if len(clipped) > 0 {
		out += cur.End.Sub(cur.Start)
	}
	return int64((stop.Sub(start) - out) / time.Second)
}

// MeteredMinutes is the billable whole minutes of a rental whose clock ran
// [start, stop) with the outages excluded: the floor of its billable
// seconds over 60 (see the rounding rule above).
func MeteredMinutes(start, stop time.Time, outages []Span) int64 {
	return MeteredBillableSeconds(start, stop, outages) / 60
}

// MeteredCents is the money of minutes of a rental of devices at
// pricePerDeviceHour: floor(minutes × price × devices / 60), in cents.
func MeteredCents(minutes int64, pricePerDeviceHour Cents, devices int) Cents {
	if minutes <= 0 || pricePerDeviceHour <= 0 || devices <= 0 {
		return 0
	}
	return Cents(minutes * int64(pricePerDeviceHour) * int64(devices) / 60)
}

// MeteredDraw is the next draw of a rental that has drawn drawnCents for
// drawnMinutes, now at totalMinutes: the minutes and cents not yet drawn.
// A total at or below what was drawn draws nothing (minutes never go back).
func MeteredDraw(drawnMinutes int64, drawnCents Cents, totalMinutes int64, pricePerDeviceHour Cents, devices int) (minutes int64, cents Cents) {
	if totalMinutes <= drawnMinutes {
		return 0, 0
	}
	return totalMinutes - drawnMinutes, MeteredCents(totalMinutes, pricePerDeviceHour, devices) - drawnCents
}

// MeteredPerMinute is what the next minute of a rental costs at most,
// rounded up: what the balance must hold per minute to cover it.
func MeteredPerMinute(pricePerDeviceHour Cents, devices int) Cents {
	return Cents((int64(pricePerDeviceHour)*int64(devices) + 59) / 60)
}

// MeteredMustStop reports whether a running rental with balance left must
// stop: it cannot cover the minutes not drawn yet (MeteredDrawLag) and
// MeteredStopCoverMinutes more.
func MeteredMustStop(balance, pricePerDeviceHour Cents, devices int) bool {
	return !MeteredCovers(balance, MeteredStopCoverMinutes+int64(MeteredDrawLag/time.Minute), pricePerDeviceHour, devices)
}

// MeteredRunsLow reports whether the buyer of a running rental is to be
// warned: the balance covers less than MeteredWarnMinutes more.
func MeteredRunsLow(balance, pricePerDeviceHour Cents, devices int) bool {
	return !MeteredCovers(balance, MeteredWarnMinutes+int64(MeteredDrawLag/time.Minute), pricePerDeviceHour, devices)
}

// MeteredCovers reports whether balance covers minutes more of a rental.
func MeteredCovers(balance Cents, minutes int64, pricePerDeviceHour Cents, devices int) bool {
	return balance >= Cents(minutes)*MeteredPerMinute(pricePerDeviceHour, devices)
}

// ValidateMeteredNotice checks an offer's notice for stopping a metered
// rental (0: the default).
func ValidateMeteredNotice(minutes int) error {
	if minutes < 0 || minutes > MeteredMaxNoticeMinutes {
		return Errorf(CodeInvalid, "The notice to stop a metered rental must be between 0 and %d minutes.", MeteredMaxNoticeMinutes)
	}
	return nil
}

// ValidateTopUp checks the amount of a top-up.
func ValidateTopUp(amount Cents) error {
	if amount < MeteredMinTopUp || amount > MeteredMaxTopUp {
		return Errorf(CodeInvalid, "A top-up must be between %s and %s.", MeteredMinTopUp, MeteredMaxTopUp)
	}
	return nil
}

// Balance ledger: the buyers' prepaid balances and the metered rentals'
// money, a double-entry ledger of its own (a top-up belongs to no
// reservation). Every entry names the buyer whose balance it concerns.
const (
	// EntryTopUp is money paid into a buyer's balance (Dr cash, Cr balance).
	EntryTopUp = "top_up"
	// EntryDraw is metered time paid out of a buyer's balance to the
	// provider (Dr balance, Cr provider).
	EntryDraw = "draw"
	// EntryBalanceRefund is unused balance returned to the card that paid
	// it (Dr balance, Cr cash).
	EntryBalanceRefund = "balance_refund"
)

// BalanceAccount names a buyer's prepaid balance, e.g. "balance:12": what
// the platform holds for the buyer to draw on.
func BalanceAccount(buyerID int64) string { return "balance:" + strconv.FormatInt(buyerID, 10) }

// TopUpKey, DrawKey and BalanceRefundKey are the idempotency keys of a
// balance's movements: a top-up by its id, a rental's draw by the minute
// range it bills ([from, to) minutes since its clock start), a refund of
// a top-up by the refund request and the top-up.
func TopUpKey(topUpID int64) string { return "topup_" + strconv.FormatInt(topUpID, 10) }

// DrawKey is the key of a rental's draw of the minutes [from, to).
func DrawKey(reservationID, from, to int64) string {
	return fmt.Sprintf("metered_%d_min_%d_%d", reservationID, from, to)
}

// BalanceRefundKey is the key of a refund request's part on one top-up.
func BalanceRefundKey(requestID, topUpID int64) string {
	return fmt.Sprintf("balrefund_%d_topup_%d", requestID, topUpID)
}

// MeteredPayoutKey is the key of a stopped rental's payout step (fee or
// transfer) to its provider.
func MeteredPayoutKey(reservationID int64, kind string) string {
	return fmt.Sprintf("metered_%d_%s", reservationID, kind)
}

// BalanceEntry is a movement of the balance ledger: a LedgerEntry whose
// reservation is set only for a rental's draws and payouts.
type BalanceEntry struct {
	BuyerID int64
	LedgerEntry
}

// CheckBalanceLedger checks the balance ledger: every entry well formed
// (a buyer, a known kind, two different accounts, a positive amount, a key
// used once), and per buyer balance = top-ups − draws − refunds.
func CheckBalanceLedger(entries []BalanceEntry) error {
	var errs []error
	keys := map[string]bool{}
	for i, e := range entries {
		switch {
		case e.BuyerID <= 0:
			errs = append(errs, fmt.Errorf("balance entry %d: no buyer", i))
		case e.Kind != EntryTopUp && e.Kind != EntryDraw && e.Kind != EntryBalanceRefund && e.Kind != EntryFee && e.Kind != EntryTransfer:
			errs = append(errs, fmt.Errorf("balance entry %d: unknown kind %q", i, e.Kind))
		case e.Debit == "" || e.Credit == "" || e.Debit == e.Credit:
			errs = append(errs, fmt.Errorf("balance entry %d: needs two different accounts", i))
		case e.Amount <= 0:
			errs = append(errs, fmt.Errorf("balance entry %d: amount %d is not positive", i, e.Amount))
		case e.IdempotencyKey == "" || keys[e.IdempotencyKey]:
			errs = append(errs, fmt.Errorf("balance entry %d: key %q empty or used twice", i, e.IdempotencyKey))
		}
		keys[e.IdempotencyKey] = true
	}
	if len(errs) > 0 {
		return fmt.Errorf("market: balance ledger: %w", errors.Join(errs...))
	}
	return nil
}

// BalanceSummary is one buyer's balance from the balance ledger.
type BalanceSummary struct {
	TopUps, Draws, Refunds Cents
	Balance                Cents // what the ledger's balance account holds
}

// SummarizeBalance adds up one buyer's balance entries.
func SummarizeBalance(buyerID int64, entries []BalanceEntry) BalanceSummary {
	acct := BalanceAccount(buyerID)
	var s BalanceSummary
	for _, e := range entries {
		if e.BuyerID != buyerID {
			continue
		}
		switch e.Kind {
		case EntryTopUp:
			s.TopUps += e.Amount
		case EntryDraw:
			s.Draws += e.Amount
		case EntryBalanceRefund:
			s.Refunds += e.Amount
		}
		if e.Credit == acct {
			s.Balance += e.Amount
		}
		if e.Debit == acct {
			s.Balance -= e.Amount
		}
	}
	return s
}

// RefundPlan divides a refund of amount over the top-ups it goes back to,
// newest first, never more on one than it has left (paid less refunded
// before): the parts by index of left. An amount over the sum is cut to it.
func RefundPlan(amount Cents, left []Cents) []Cents {
	out := make([]Cents, len(left))
	for i := len(left) - 1; i >= 0 && amount > 0; i-- {
		take := min(amount, left[i])
		if take > 0 {
			out[i] = take
			amount -= take
		}
	}
	return out
}

// MeteredDrawLag is how far behind now a running rental's draws stay: a
// host failure is measured only once the node has been silent past the
// heartbeat grace period (HeartbeatGrace), so minutes younger than this may
// still turn out unusable. Draws never bill them early; the last draw is
// made once the stop is this far in the past.
const MeteredDrawLag = 2 * time.Minute

// NodeReadiness is what a node's agent reported of a metered rental's start
// there: the buyer's access handed over (zero: not yet), the acceptance
// test's result (zero: none yet; failed: it ran with an error), the buyer's
// container running (zero: not reported ready).
type NodeReadiness struct {
	InstalledAt, AcceptedAt time.Time
	AcceptanceFailed        bool
	ContainerReadyAt        time.Time
}

// MeteredUsableAt is when a rental's machine became usable: the last of
// its nodes to become usable, a node being usable once its access is
// handed over and its acceptance test passed (the later of the two), or
// once the buyer's container runs. Not every node usable yet: false.
func MeteredUsableAt(nodes []NodeReadiness) (time.Time, bool) {
	if len(nodes) == 0 {
		return time.Time{}, false
	}
	var at time.Time
	for _, n := range nodes {
		var ready time.Time
		switch {
		case !n.ContainerReadyAt.IsZero():
			ready = n.ContainerReadyAt
		case !n.InstalledAt.IsZero() && !n.AcceptedAt.IsZero() && !n.AcceptanceFailed:
			ready = n.InstalledAt
			if n.AcceptedAt.After(ready) {
				ready = n.AcceptedAt
			}
		default:
			return time.Time{}, false
		}
		if ready.After(at) {
			at = ready
		}
	}
	return at, true
}

// MeteredExcludes reports whether minutes in a measured outage of kind are
// left unbilled: the host failed, or had fewer devices than rented.
func MeteredExcludes(kind IncidentKind) bool {
	return kind == IncidentHostFailure || kind == IncidentFewerDevices
}

// Why a metered rental stopped.
const (
	MeteredStopBuyer   = "buyer"   // the buyer stopped it
	MeteredStopBalance = "balance" // the balance could not cover the next minutes
	MeteredStopNotice  = "notice"  // its capacity is booked ahead: stopped at the provider's notice
	MeteredStopMax     = "max"     // it reached the buyer's maximum
	MeteredStopRemoved = "removed" // the agent removed access first
)

// MeteredStopLabel says in words why a rental stopped.
func MeteredStopLabel(reason string) string {
	switch reason {
	case MeteredStopBuyer:
		return "stopped by you"
	case MeteredStopBalance:
		return "stopped: the balance ran out"
	case MeteredStopNotice:
		return "stopped before a booking of the same devices"
	case MeteredStopMax:
		return "stopped at the maximum you set"
	case MeteredStopRemoved:
		return "access removed by the host"
	}
	return "running"
}

// Automatic top-up: below a threshold the buyer sets, the background work
// tops the balance up by the buyer's amount from the saved card.
const (
	MeteredMinAutoThreshold Cents = 100     // $1.00
	MeteredMaxAutoThreshold Cents = 1000000 // $10,000.00
)

// ValidateAutoTopUp checks an automatic top-up's threshold and amount;
// the problems are keyed "threshold" and "amount". Both zero clears it.
func ValidateAutoTopUp(threshold, amount Cents) error {
	if threshold == 0 && amount == 0 {
		return nil
	}
	p := Problems{}
	if threshold < MeteredMinAutoThreshold || threshold > MeteredMaxAutoThreshold {
		p.Add("threshold", fmt.Sprintf("The threshold must be between %s and %s.", MeteredMinAutoThreshold, MeteredMaxAutoThreshold))
	}
	if err := ValidateTopUp(amount); err != nil {
		p.Add("amount", ErrorMessage(err))
	}
	return p.Err()
}

// AutoTopUpDue says whether a balance is below the buyer's threshold
// (0: no automatic top-up).
func AutoTopUpDue(balance, threshold Cents) bool { return threshold > 0 && balance < threshold }
