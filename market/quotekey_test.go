package market

import (
	"strings"
	"testing"
	"time"
)

// keyQuote is a two-piece quote: 8 devices of offer 7 and 4 interruptible
// devices of offer 3, 12 hours each, starting at start.
func keyQuote(start time.Time) Quote {
	piece := func(offer int64, devices int, price Cents, intr bool) Piece {
		return Piece{OfferID: offer, Devices: devices, Start: start, End: start.Add(12 * time.Hour), Interruptible: intr,
			PriceCents: price, Cost: CostBreakdown{Instance: price * Cents(devices) * 12, Storage: 40, Egress: 5, Orchestration: 900}}
	}
	return Quote{Rank: 1, Pieces: []Piece{piece(7, 8, 229, false), piece(3, 4, 120, true)}, Start: start, End: start.Add(12 * time.Hour)}
}

func TestQuoteKeyRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	q := keyQuote(at.Add(3 * time.Second))
	k := NewQuoteKey(q, at.Add(400*time.Millisecond))
	s := k.String()
	// Pieces in offer order; the amount is instance + storage + egress, not the estimates.
	want := "q1.1796115600.3-4-1796115603-43200-1-120-5805_7-8-1796115603-43200-0-229-22029"
	if s != want {
		t.Fatalf("key %q, want %q", s, want)
	}
	back, err := ParseQuoteKey(s)
	if err != nil {
		t.Fatal(err)
	}
	if back.String() != s || !back.QuotedAt.Equal(at) || !back.ValidUntil().Equal(at.Add(5*time.Minute)) {
		t.Fatalf("round trip: %q quoted %s valid until %s", back.String(), back.QuotedAt, back.ValidUntil())
	}
}

func TestParseQuoteKeyRefusesGarbage(t *testing.T) {
	for _, s := range []string{
		"", "x", "q1.", "q1.5", "q1.5.", "q2.5.1-1-1-1-0-1-1", "q1.-5.1-1-1-1-0-1-1", "q1.5.1-1-1-1-0-1",
		"q1.5.1-0-1-1-0-1-1", "q1.5.1-1-1-0-0-1-1", "q1.5.1-1-1-1-2-1-1", "q1.5.1-1-1-1-0--1-1", "q1.5.1-1-1-1-0-1-1_",
		"7:8:1796115600:1796158800:0", "q1.5." + strings.Repeat("1-1-1-1-0-1-1_", 300) + "1-1-1-1-0-1-1",
	} {
		if _, err := ParseQuoteKey(s); ErrorCode(err) != CodeInvalid || FieldErrors(err)["quote_id"] == "" {
			t.Errorf("ParseQuoteKey(%q) = %v, want invalid naming quote_id", s, err)
		}
	}
}

func FuzzParseQuoteKey(f *testing.F) {
	f.Add("q1.1796115600.3-4-1796115603-43200-1-120-5805_7-8-1796115603-43200-0-229-22029")
	f.Add("q1.0.1-1-0-1-0-0-0")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseQuoteKey(s)
		if err != nil {
			return
		}
		again, err := ParseQuoteKey(k.String())
		if err != nil || again.String() != k.String() {
			t.Fatalf("%q parsed to %q, which reads back as %q (%v)", s, k.String(), again.String(), err)
		}
	})
}

func TestQuoteKeyHonour(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	quoted := keyQuote(at) // "as soon as possible": the pieces start when quoted
	key := NewQuoteKey(quoted, at)
	shift := func(q Quote, d time.Duration) Quote {
		out := q
		out.Pieces = append([]Piece(nil), q.Pieces...)
		for i := range out.Pieces {
			out.Pieces[i].Start = out.Pieces[i].Start.Add(d)
			out.Pieces[i].End = out.Pieces[i].End.Add(d)
		}
		return out
	}
	edit := func(q Quote, f func(p *Piece)) Quote {
		out := shift(q, 0)
		f(&out.Pieces[1])
		return out
	}
	reversed := shift(quoted, 4*time.Second)
	reversed.Pieces[0], reversed.Pieces[1] = reversed.Pieces[1], reversed.Pieces[0]
	other := keyQuote(at)
	other.Pieces = other.Pieces[:1]
	for _, tc := range []struct {
		name   string
		live   []Quote
		now    time.Time
		want   int // index in live, or -1 for a conflict
		reason string
	}{
		{"at once", []Quote{quoted}, at, 0, ""},
		{"4 s later, starting 4 s later", []Quote{shift(quoted, 4*time.Second)}, at.Add(4 * time.Second), 0, ""},
		// Booked at 4.5 s: the matcher rounds the start up to 5 s.
		{"4.5 s later, starting 5 s later", []Quote{shift(quoted, 5*time.Second)}, at.Add(4*time.Second + 500*time.Millisecond), 0, ""},
		{"pieces in another order", []Quote{reversed}, at.Add(4 * time.Second), 0, ""},
		{"at the end of the validity", []Quote{shift(quoted, 5*time.Minute)}, at.Add(5 * time.Minute), 0, ""},
		{"one second too late", []Quote{shift(quoted, 5*time.Minute+time.Second)}, at.Add(5*time.Minute + time.Second), -1, "expired"},
		{"slipped by more than the wait", []Quote{shift(quoted, 2*time.Hour)}, at.Add(time.Minute), -1, "no longer available"},
		{"capacity freed: earlier is fine", []Quote{quoted}, at.Add(time.Minute), 0, ""},
		{"a higher price", []Quote{edit(quoted, func(p *Piece) { p.PriceCents++ })}, at, -1, "no longer available"},
		{"a higher amount", []Quote{edit(quoted, func(p *Piece) { p.Cost.Storage++ })}, at, -1, "no longer available"},
		{"a lower price and amount", []Quote{edit(quoted, func(p *Piece) { p.PriceCents--; p.Cost.Instance -= 48 })}, at, 0, ""},
		{"estimates may change", []Quote{edit(quoted, func(p *Piece) { p.Cost.Orchestration += 1000 })}, at, 0, ""},
		{"other devices", []Quote{edit(quoted, func(p *Piece) { p.Devices++ })}, at, -1, "no longer available"},
		{"other duration", []Quote{edit(quoted, func(p *Piece) { p.End = p.End.Add(time.Hour) })}, at, -1, "no longer available"},
		{"not interruptible", []Quote{edit(quoted, func(p *Piece) { p.Interruptible = false })}, at, -1, "no longer available"},
		{"other offer", []Quote{edit(quoted, func(p *Piece) { p.OfferID = 9 })}, at, -1, "no longer available"},
		{"fewer pieces", []Quote{other}, at, -1, "no longer available"},
		{"the honouring one among others", []Quote{other, shift(quoted, 30*time.Second)}, at.Add(30 * time.Second), 1, ""},
	} {
		got, err := key.Honour(tc.live, tc.now)
		if tc.want < 0 {
			if ErrorCode(err) != CodeConflict || !strings.Contains(ErrorMessage(err), tc.reason) || !strings.Contains(ErrorMessage(err), "fresh quotes") {
				t.Errorf("%s: %v, want a conflict saying %q and promising fresh quotes", tc.name, err, tc.reason)
			}
			continue
		}
		if err != nil || NewQuoteKey(got, tc.now).String() != NewQuoteKey(tc.live[tc.want], tc.now).String() {
			t.Errorf("%s: %v, want live quote %d", tc.name, err, tc.want)
		}
	}

	// A start the buyer pinned stays put: the live quote starts when quoted.
	pinned := keyQuote(at.Add(48 * time.Hour))
	if _, err := NewQuoteKey(pinned, at).Honour([]Quote{pinned}, at.Add(3*time.Minute)); err != nil {
		t.Errorf("pinned start: %v", err)
	}
}
