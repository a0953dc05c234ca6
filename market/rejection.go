package market

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// The buyer's acceptance period (issue 11): for the first RejectMinutes of
// a rental, frozen on each piece from its offer at booking, the buyer may
// reject the rental for a full refund — the acceptance test showed the
// machines short of what was sold, or they are not what was expected. The
// provider keeps nothing of a rejected rental. An offer sets 0 to allow no
// rejection.
const (
	// DefaultRejectMinutes is an offer's acceptance period unless its
	// provider says otherwise.
	DefaultRejectMinutes = 30
	// MaxRejectMinutes bounds it: a day.
	MaxRejectMinutes = 24 * 60
	// MaxRejectReason bounds the buyer's reason for a rejection.
	MaxRejectReason = 1000
)

// RejectionPolicyText describes a piece's or an offer's acceptance period.
func RejectionPolicyText(minutes int) string {
	if minutes <= 0 {
		return "No acceptance period: once started, the rental cannot be rejected."
	}
	return fmt.Sprintf("You may reject the rental for a full refund within the first %s of its start.", minutesText(minutes))
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

// CheckRejection says whether the buyer may reject r at now, or returns a
// conflict *Error saying why not, safe to show: only a paid rental
// (confirmed or active) that has started, within its acceptance window
// [start, deadline). A cancelled, expired, completed or settled reservation
// cannot be rejected; one not yet started is cancelled instead.
func CheckRejection(r Reservation, now time.Time) error {
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
// acceptance period (CheckRejection): every piece is refunded in full, no
// provider keeps anything, so no platform fee and no payout. r is the
// reservation as it was when rejected.
func RejectionStatement(r Reservation, now time.Time, feeBP int) (Statement, error) {
	if feeBP < 0 || feeBP > 10000 {
		return Statement{}, Errorf(CodeInvalid, "The platform fee must be between 0%% and 100%%.")
	}
	if err := CheckRejection(r, now); err != nil {
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
		label := fmt.Sprintf("Rejected %s after the start, within the %s acceptance period: refunded in full",
			formatHours(now.Sub(p.Start)), minutesText(p.RejectMinutes))
		ps.Clauses = []Clause{{Kind: ClauseRejection, Label: label, RateBP: 10000, Cents: p.AmountCents}}
		ps.NotCharged, ps.Refund = p.AmountCents, p.AmountCents
		st.Pieces = append(st.Pieces, ps)
		st.Paid += ps.Paid
		st.NotCharged += ps.NotCharged
		st.Refund += ps.Refund
	}
	st.applyProviderFees()
	return st, nil
}
