package market

import (
	"fmt"
	"time"
)

// Commitment holds some of an offer's devices over the half-open interval
// [Start, End): a reservation, or a piece of one.
type Commitment struct {
	ID      int64
	OfferID int64
	Devices int
	Start   time.Time
	End     time.Time
}

// FitsCapacity reports whether the commitments in add can be booked on offer
// beside existing (commitments of other offers in either list are ignored).
// It returns nil when they fit; an invalid *Error for a malformed piece; a
// conflict *Error when a piece lies outside the offer's availability window
// or rental limits, or when at some instant the devices committed would
// exceed what the offer has. The store calls it inside its write
// transaction to re-check capacity at booking time.
func FitsCapacity(offer Offer, existing []Commitment, add []Commitment) error {
	total := offer.Devices()
	var spans []span
	for _, c := range existing {
		if c.OfferID == offer.ID && c.End.After(c.Start) && c.Devices > 0 {
			spans = append(spans, newSpan(c))
		}
	}
	for i, c := range add {
		if c.OfferID != offer.ID {
			continue
		}
		switch {
		case c.Devices < 1:
			return Errorf(CodeInvalid, "Piece %d must hold at least one device.", i+1)
		case !c.End.After(c.Start):
			return Errorf(CodeInvalid, "Piece %d must end after it starts.", i+1)
		case c.Devices > total:
			return Errorf(CodeConflict, "Offer %d has %d devices; piece %d asks for %d.", offer.ID, total, i+1, c.Devices)
		case c.Start.Before(offer.AvailableFrom) || c.End.After(offer.AvailableUntil):
			return Errorf(CodeConflict, "Offer %d is not available for the whole of piece %d.", offer.ID, i+1)
		}
		d := c.End.Sub(c.Start)
		if d < time.Duration(offer.MinRentalHours)*time.Hour || (offer.MaxRentalHours > 0 && d > time.Duration(offer.MaxRentalHours)*time.Hour) {
			return Errorf(CodeConflict, "Offer %d rents for %d to %d hours; piece %d lasts %s.", offer.ID, offer.MinRentalHours, offer.MaxRentalHours, i+1, d)
		}
		spans = append(spans, newSpan(c))
	}
	for _, c := range add {
		if c.OfferID != offer.ID {
			continue
		}
		if used := maxUsage(spans, c.Start.Unix(), c.End.Unix()); used > int64(total) {
			return &Error{Code: CodeConflict, Message: fmt.Sprintf(
				"Offer %d would be overbooked: %d of its %d devices committed at once. Someone may have booked it a moment ago; ask for a new quote.",
				offer.ID, used, total)}
		}
	}
	return nil
}

// span is a commitment in the matcher's compact form: seconds since
// compactEpoch, saturating at both ends (before 2000 nothing is matched, and
// after 2136 nothing is asked).
type span struct {
	start, end uint32
	devices    int32
}

// compactEpoch is 2000-01-01T00:00:00Z in unix seconds.
const compactEpoch = 946_684_800

// compactTime stores a unix time in 32 bits, saturating.
func compactTime(unix int64) uint32 {
	return uint32(min(max(unix-compactEpoch, 0), 1<<32-1))
}

func newSpan(c Commitment) span {
	return span{start: compactTime(c.Start.Unix()), end: compactTime(c.End.Unix()), devices: int32(c.Devices)}
}

func (s span) from() int64 { return int64(s.start) + compactEpoch }
func (s span) to() int64   { return int64(s.end) + compactEpoch }

// maxUsage is the largest number of devices the spans hold at any instant
// of [from, to). Usage only rises at a span's start, so it is enough to look
// at from and at every span start inside the interval.
func maxUsage(spans []span, from, to int64) int64 {
	var best int64
	for i := -1; i < len(spans); i++ {
		t := from
		if i >= 0 {
			t = spans[i].from()
			if t < from || t >= to {
				continue
			}
		}
		var u int64
		for _, s := range spans {
			if s.from() <= t && t < s.to() {
				u += int64(s.devices)
			}
		}
		if u > best {
			best = u
		}
	}
	return best
}

// earliestStart returns the earliest s in [lo, hi] at which devices more
// devices are free throughout [s, s+dur), given total devices and the
// spans. The answer is lo or the end of some span: moving a start left to
// the previous such point never adds an overlapping span.
func earliestStart(spans []span, total, devices int32, lo, hi, dur int64) (int64, bool) {
	if lo > hi || devices > total {
		return 0, false
	}
	limit := int64(total - devices)
	// The spans overlapping [lo, lo+dur) bound its usage from above, so
	// their sum settles most offers without maxUsage's quadratic walk.
	var over int64
	for _, s := range spans {
		if s.from() < lo+dur && s.to() > lo {
			over += int64(s.devices)
		}
	}
	if over <= limit || maxUsage(spans, lo, lo+dur) <= limit {
		return lo, true
	}
	best, ok := int64(0), false
	for _, s := range spans {
		t := s.to()
		if t <= lo || t > hi || (ok && t >= best) {
			continue
		}
		if maxUsage(spans, t, t+dur) <= limit {
			best, ok = t, true
		}
	}
	return best, ok
}

// maxFree returns the most devices free throughout some window [s, s+dur)
// with s in [lo, hi], and the earliest such s.
func maxFree(spans []span, total int32, lo, hi, dur int64) (int32, int64) {
	if lo > hi {
		return 0, 0
	}
	var all int64
	for _, s := range spans {
		all += int64(s.devices)
	}
	if all == 0 {
		return total, lo
	}
	best, at := int64(total)-maxUsage(spans, lo, lo+dur), lo
	if best == int64(total) {
		return int32(best), at
	}
	for _, s := range spans {
		t := s.to()
		if t <= lo || t > hi {
			continue
		}
		f := int64(total) - maxUsage(spans, t, t+dur)
		if f > best || (f == best && t < at) {
			best, at = f, t
		}
	}
	if best < 0 {
		best = 0
	}
	return int32(best), at
}
