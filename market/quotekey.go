package market

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// QuoteValidity is how long a quote is honoured: booked within it, a quote
// whose capacity and prices still hold is reserved at its price or lower.
const QuoteValidity = 5 * time.Minute

// maxQuoteKeyPieces bounds what ParseQuoteKey accepts; no quote has more
// pieces than a request has devices, and requests are bounded far below.
const maxQuoteKeyPieces = 256

// QuoteKey identifies a quote the buyer saw, so that "Reserve" books that
// quote or fails with fresh ones: when it was made and, per piece, the
// offer, devices, start, duration, interruptible or not, the price per
// device-hour and the amount charged.
//
// The key is not signed and needs no secret: nothing in it is trusted. A
// booking re-runs the matcher and books the live quote that honours the key
// (Honour), at the live prices, which may only be the key's or lower; the
// store re-checks capacity in its transaction. A forged key can therefore
// book only what a fresh quote would offer at that moment, never a lower
// price, and an old one is refused once QuoteValidity has passed.
type QuoteKey struct {
	QuotedAt time.Time
	Pieces   []QuoteKeyPiece
}

// QuoteKeyPiece is one piece of a QuoteKey.
type QuoteKeyPiece struct {
	OfferID       int64
	Devices       int
	Start         time.Time
	Seconds       int64 // duration: End − Start
	Interruptible bool
	PriceCents    Cents // per device-hour
	AmountCents   Cents // instance + storage + egress: what is charged
}

// NewQuoteKey is the key of q, quoted at quotedAt (whole seconds, as the
// matcher counts).
func NewQuoteKey(q Quote, quotedAt time.Time) QuoteKey {
	k := QuoteKey{QuotedAt: time.Unix(quotedAt.Unix(), 0).UTC(), Pieces: make([]QuoteKeyPiece, len(q.Pieces))}
	for i, p := range q.Pieces {
		k.Pieces[i] = keyPiece(p)
	}
	sortKeyPieces(k.Pieces)
	return k
}

func keyPiece(p Piece) QuoteKeyPiece {
	return QuoteKeyPiece{OfferID: p.OfferID, Devices: p.Devices, Start: p.Start.UTC(),
		Seconds: p.End.Unix() - p.Start.Unix(), Interruptible: p.Interruptible,
		PriceCents: p.PriceCents, AmountCents: p.Cost.Charged()}
}

// sortKeyPieces orders pieces by what identifies them, so two keys of the
// same quote compare piece by piece whatever order the matcher used.
func sortKeyPieces(ps []QuoteKeyPiece) {
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i], ps[j]
		if a.OfferID != b.OfferID {
			return a.OfferID < b.OfferID
		}
		if a.Interruptible != b.Interruptible {
			return !a.Interruptible
		}
		if a.Devices != b.Devices {
			return a.Devices < b.Devices
		}
		if a.Seconds != b.Seconds {
			return a.Seconds < b.Seconds
		}
		return a.Start.Before(b.Start)
	})
}

// ValidUntil is when the quote stops being honoured.
func (k QuoteKey) ValidUntil() time.Time { return QuoteValidUntil(k.QuotedAt) }

// QuoteValidUntil is when a quote made at quotedAt stops being honoured:
// QuoteValidity after it, counted from its whole second.
func QuoteValidUntil(quotedAt time.Time) time.Time {
	return time.Unix(quotedAt.Unix(), 0).UTC().Add(QuoteValidity)
}

// String encodes the key for a form field or the API's quote_id:
// "q1.<quoted at>.<piece>_<piece>…", each piece
// "<offer>-<devices>-<start>-<seconds>-<interruptible 0|1>-<price>-<amount>",
// times in Unix seconds and money in cents.
func (k QuoteKey) String() string {
	var b strings.Builder
	b.WriteString("q1.")
	b.WriteString(strconv.FormatInt(k.QuotedAt.Unix(), 10))
	b.WriteByte('.')
	for i, p := range k.Pieces {
		if i > 0 {
			b.WriteByte('_')
		}
		intr := 0
		if p.Interruptible {
			intr = 1
		}
		fmt.Fprintf(&b, "%d-%d-%d-%d-%d-%d-%d", p.OfferID, p.Devices, p.Start.Unix(), p.Seconds, intr, p.PriceCents, p.AmountCents)
	}
	return b.String()
}

// ParseQuoteKey reads a key written by String. Anything else is invalid,
// with a message that says to get fresh quotes.
func ParseQuoteKey(s string) (QuoteKey, error) {
	bad := &Error{Code: CodeInvalid, Message: "The quote id could not be read; get fresh quotes and book one of them.",
		Fields: map[string]string{"quote_id": "not a quote id from the quotes"}}
	rest, ok := strings.CutPrefix(s, "q1.")
	if !ok || len(s) > 64*maxQuoteKeyPieces {
		return QuoteKey{}, bad
	}
	at, list, ok := strings.Cut(rest, ".")
	if !ok || list == "" {
		return QuoteKey{}, bad
	}
	quotedAt, err := strconv.ParseInt(at, 10, 64)
	if err != nil || quotedAt < 0 {
		return QuoteKey{}, bad
	}
	parts := strings.Split(list, "_")
	if len(parts) > maxQuoteKeyPieces {
		return QuoteKey{}, bad
	}
	k := QuoteKey{QuotedAt: time.Unix(quotedAt, 0).UTC(), Pieces: make([]QuoteKeyPiece, len(parts))}
	for i, part := range parts {
		f := strings.Split(part, "-")
		if len(f) != 7 {
			return QuoteKey{}, bad
		}
		var n [7]int64
		for j, s := range f {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return QuoteKey{}, bad
			}
			n[j] = v
		}
		if n[1] < 1 || n[1] > 1<<20 || n[3] < 1 || n[4] > 1 {
			return QuoteKey{}, bad
		}
		k.Pieces[i] = QuoteKeyPiece{OfferID: n[0], Devices: int(n[1]), Start: time.Unix(n[2], 0).UTC(), Seconds: n[3],
			Interruptible: n[4] == 1, PriceCents: Cents(n[5]), AmountCents: Cents(n[6])}
	}
	sortKeyPieces(k.Pieces)
	return k, nil
}

// Honour finds, among quotes the matcher gives at now, the best-ranked one
// that honours the key:
//   - now is within QuoteValidity of when the key's quote was made;
//   - the same pieces: offers, devices, durations, interruptible or not;
//   - each piece's price per device-hour and amount charged are the
//     quoted ones or lower;
//   - each piece starts no later than quoted plus the time since the
//     quote. So "as soon as possible" (no earliest start, or one now in the
//     past) moves with the clock and means the earliest start at booking
//     time, while a start the buyer pinned stays put; a piece that slipped
//     further because its capacity was taken is a different quote.
//
// It answers a conflict error, whose message promises fresh quotes, when the
// key has expired or no quote honours it.
func (k QuoteKey) Honour(quotes []Quote, now time.Time) (Quote, error) {
	// The matcher rounds a start up to the whole second (an allowed start
	// is never before now), while QuotedAt is the quote time rounded down;
	// rounding now up too keeps an as-soon-as-possible start inside the
	// slack however the two instants fall within their seconds.
	elapsed := now.Unix() - k.QuotedAt.Unix()
	if now.Nanosecond() != 0 {
		elapsed++
	}
	if elapsed < -60 || elapsed > int64(QuoteValidity/time.Second) {
		return Quote{}, Errorf(CodeConflict, "That quote has expired: quotes are held for %d minutes. Here are fresh quotes.", int(QuoteValidity/time.Minute))
	}
	if elapsed < 0 {
		elapsed = 0 // clocks of two replicas may differ by a little
	}
	for _, q := range quotes {
		if k.honouredBy(q, elapsed) {
			return q, nil
		}
	}
	return Quote{}, Errorf(CodeConflict, "That quote is no longer available: capacity or prices changed. Here are fresh quotes.")
}

func (k QuoteKey) honouredBy(q Quote, elapsed int64) bool {
	if len(q.Pieces) != len(k.Pieces) {
		return false
	}
	live := make([]QuoteKeyPiece, len(q.Pieces))
	for i, p := range q.Pieces {
		live[i] = keyPiece(p)
	}
	sortKeyPieces(live)
	for i, want := range k.Pieces {
		got := live[i]
		if got.OfferID != want.OfferID || got.Devices != want.Devices || got.Seconds != want.Seconds ||
			got.Interruptible != want.Interruptible {
			return false
		}
		if got.PriceCents > want.PriceCents || got.AmountCents > want.AmountCents {
			return false
		}
		if got.Start.Unix()-want.Start.Unix() > elapsed {
			return false
		}
	}
	return true
}
