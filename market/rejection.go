package market

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The buyer's acceptance period (issue 11, rule of issue 23;
// docs/rejection.md): for the first RejectMinutes of a rental, frozen on
// each piece from its offer at booking, the buyer may reject the rental.
//
//   - A rental that failed its contract — an agent's acceptance test fell
//     short of the guaranteed figure or could not run, or the agent measured
//     an outage during it — is refunded in full; the provider keeps nothing.
//   - Any other rejection (unfounded: the buyer's word only) pays for the
//     minutes used, rounded up, at least RejectMinimumMinutes
//     (RejectionCharge), and the rest is refunded.
//   - A buyer may make at most RejectLimit unfounded rejections in a
//     trailing RejectLimitWindow; the next is refused with a message.
//   - Won spot hours (interruptible pieces) cannot be rejected but on a
//     failed acceptance test.
//
// An offer sets 0 to allow no rejection.
const (
	// DefaultRejectMinutes is an offer's acceptance period unless its
	// provider says otherwise.
	DefaultRejectMinutes = 30
	// MaxRejectMinutes bounds it: a day.
	MaxRejectMinutes = 24 * 60
	// MaxRejectReason bounds the buyer's reason for a rejection.
	MaxRejectReason = 1000
	// RejectMinimumMinutes is the least an unfounded rejection pays for.
	RejectMinimumMinutes = 10
	// RejectLimit unfounded rejections per buyer per RejectLimitWindow.
	RejectLimit       = 3
	RejectLimitWindow = 7 * 24 * time.Hour
)

// RejectionGrounds is the evidence a rejection stands on, as the store
// finds it when the buyer rejects, and the buyer's record.
type RejectionGrounds struct {
	// FailedAcceptance: an agent's acceptance result on a piece of the
	// rental fell short of the guaranteed figure, or the test could not run.
	FailedAcceptance bool
	// MeasuredOutage: an outage the agent measured during the rental.
	MeasuredOutage bool
	// RecentUnfounded is how many unfounded rejections the buyer made in
	// the RejectLimitWindow before now.
	RecentUnfounded int
}

// Founded reports whether the rental failed its contract: a full refund.
func (g RejectionGrounds) Founded() bool { return g.FailedAcceptance || g.MeasuredOutage }

// RejectionCharge is what an unfounded rejection of piece p at now charges:
// the piece's amount for the minutes used (from the piece's start, rounded
// up to whole minutes, at least RejectMinimumMinutes, at most the piece's
// length), pro rata, rounded half up to the cent once. Before the start it
// is zero.
func RejectionCharge(p ReservationPiece, now time.Time) Cents {
	total := int64(p.End.Sub(p.Start) / time.Minute)
	if total <= 0 || p.AmountCents <= 0 || now.Before(p.Start) {
		return 0
	}
	used := int64((now.Sub(p.Start) + time.Minute - 1) / time.Minute)
	used = min(max(used, RejectMinimumMinutes), total)
	return Cents((int64(p.AmountCents)*used*2 + total) / (2 * total))
}

// RejectionPolicyText describes a piece's or an offer's acceptance period.
func RejectionPolicyText(minutes int) string {
	if minutes <= 0 {
		return "No acceptance period: once started, the rental cannot be rejected."
	}
	return fmt.Sprintf("You may reject the rental within the first %s of its start: in full if the agent measured a failed acceptance test or an outage, otherwise paying for the minutes used (at least %d).",
		minutesText(minutes), RejectMinimumMinutes)
}

// minutesText writes a period of minutes: "30 minutes", "1 hour", "1 hour 30 minutes".
func minutesText(m int) string {
	plural := func(n int, unit string) string {
		if n == 1 {
			return "1 " + unit
		}
		return fmt.Sprintf("%d %ss", n, unit)
	}
	switch {
	case m < 60:
		return plural(m, "minute")
	case m%60 == 0:
		return plural(m/60, "hour")
	}
	return plural(m/60, "hour") + " " + plural(m%60, "minute")
}

// RejectionWindow is when r may be rejected: from its start (the earliest
// piece's) until the earliest of its pieces' acceptance deadlines (each
// piece's start plus its RejectMinutes). A full refund takes every piece's
// amount from its provider, so every piece's contract must allow it: ok is
// false when a piece has no acceptance period.
func RejectionWindow(r Reservation) (from, until time.Time, ok bool) {
	if len(r.Pieces) == 0 {
		return time.Time{}, time.Time{}, false
	}
	for i, p := range r.Pieces {
		if p.RejectMinutes <= 0 {
			return time.Time{}, time.Time{}, false
		}
		deadline := p.Start.Add(time.Duration(p.RejectMinutes) * time.Minute)
		if i == 0 || deadline.Before(until) {
			until = deadline
		}
	}
	return r.Start(), until, true
}

// CheckRejection says whether the buyer may reject r at now on grounds g,
// or returns a conflict *Error saying why not, safe to show: only a paid
// rental (confirmed or active) that has started, within its acceptance
// window [start, deadline). A cancelled, expired, completed or settled
// reservation cannot be rejected; one not yet started is cancelled
// instead. Won spot hours need a failed acceptance test; an unfounded
// rejection beyond RejectLimit in RejectLimitWindow is refused.
func CheckRejection(r Reservation, now time.Time, g RejectionGrounds) error {
	switch r.State {
	case ReservationConfirmed, ReservationActive:
	case ReservationHeld:
		return Errorf(CodeConflict, "This reservation is not paid; cancel it instead.")
	default:
		return Errorf(CodeConflict, "%s reservation cannot be rejected.", r.State.LabelWithArticle())
	}
	from, until, ok := RejectionWindow(r)
	switch {
	case !ok:
		return Errorf(CodeConflict, "This rental's contract has no acceptance period, so it cannot be rejected. If the machines fall short, report an incident.")
	case now.Before(from):
		return Errorf(CodeConflict, "This rental has not started yet; cancel it instead (its cancellation policy applies).")
	case !now.Before(until):
		return Errorf(CodeConflict, "Too late to reject: the acceptance period ended at %s. If the machines fall short, report an incident; its credit applies at settlement.", FormatTime(until))
	}
	for _, p := range r.Pieces {
		if p.Interruptible && !g.FailedAcceptance {
			return Errorf(CodeConflict, "Won spot hours are interruptible and cannot be rejected unless the agent's acceptance test failed. If the machines fall short, report an incident.")
		}
	}
	if !g.Founded() && g.RecentUnfounded >= RejectLimit {
		return Errorf(CodeConflict, "You have rejected %d rentals in the last %d days without a failed acceptance test or a measured outage, the most allowed. "+
			"If the machines fall short, report an incident; its credit applies at settlement.", g.RecentUnfounded, int(RejectLimitWindow/(24*time.Hour)))
	}
	return nil
}

// ValidateRejectReason trims a buyer's reason for rejecting a rental and
// checks it: optional, at most MaxRejectReason characters, printable text.
func ValidateRejectReason(reason string) (string, error) {
	reason = strings.TrimSpace(reason)
	p := Problems{}
	if utf8.RuneCountInString(reason) > MaxRejectReason {
		p.Add("reason", fmt.Sprintf("Keep the reason under %d characters.", MaxRejectReason))
	}
	textField(p, "reason", reason, true)
	return reason, p.Err()
}

// RejectionStatement settles a rental the buyer rejected at now within its
// acceptance period on grounds g (CheckRejection). A founded rejection
// refunds every piece in full: no provider keeps anything, so no platform
// fee and no payout. An unfounded one keeps RejectionCharge of each piece
// for its provider (less the platform fee) and refunds the rest. r is the
// reservation as it was when rejected.
func RejectionStatement(r Reservation, now time.Time, feeBP int, g RejectionGrounds) (Statement, error) {
	if feeBP < 0 || feeBP > 10000 {
		return Statement{}, Errorf(CodeInvalid, "The platform fee must be between 0%% and 100%%.")
	}
	if err := CheckRejection(r, now, g); err != nil {
		return Statement{}, err
	}
	st := Statement{ReservationID: r.ID, BuyerID: r.BuyerID, PlatformFeeBP: feeBP, Cancelled: true, CancelledAt: now.UTC(),
		Rejected: true, UptimeBP: 10000}
	for _, p := range r.Pieces {
		if p.AmountCents < 0 {
			return Statement{}, Errorf(CodeInvalid, "Piece %d has a negative amount.", p.ID)
		}
		ps := PieceStatement{PieceID: p.ID, OfferID: p.OfferID, ProviderID: p.ProviderID, Devices: p.Devices,
			Start: p.Start, End: p.End, Paid: p.AmountCents, UptimeBP: 10000}
		var kept Cents
		label := fmt.Sprintf("Rejected %s after the start, within the %s acceptance period", formatHours(now.Sub(p.Start)), minutesText(p.RejectMinutes))
		switch {
		case g.FailedAcceptance:
			label += ", the acceptance test having failed: refunded in full"
		case g.MeasuredOutage:
			label += ", after an outage the agent measured: refunded in full"
		default:
			kept = RejectionCharge(p, now)
			label += fmt.Sprintf(" with no failed acceptance test or measured outage: the minutes used (at least %d) are paid, the rest refunded", RejectMinimumMinutes)
		}
		rate := 10000
		if p.AmountCents > 0 {
			rate = int(int64(p.AmountCents-kept) * 10000 / int64(p.AmountCents))
		}
		ps.Clauses = []Clause{{Kind: ClauseRejection, Label: label, RateBP: rate, Cents: p.AmountCents - kept}}
		ps.NotCharged, ps.Refund, ps.Kept = p.AmountCents-kept, p.AmountCents-kept, kept
		st.Pieces = append(st.Pieces, ps)
		st.Paid += ps.Paid
		st.NotCharged += ps.NotCharged
		st.Refund += ps.Refund
		st.Kept += ps.Kept
	}
	st.applyProviderFees()
	return st, nil
}
