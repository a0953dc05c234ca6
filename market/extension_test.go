package market

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// runningOn is an active reservation of one piece on o over [t0, t0+12h).
func runningOn(o Offer, devices int, nodes []NodeShare) Reservation {
	return Reservation{ID: 40, BuyerID: 9, State: ReservationActive, Pieces: []ReservationPiece{{
		ID: 400, OfferID: o.ID, ProviderID: o.ProviderID, Devices: devices, Start: t0, End: t0.Add(12 * time.Hour),
		PriceCents: 150, Gang: true, Nodes: nodes,
	}}}
}

// TestExtensionPieces: an extension is the same pieces from where they
// end, priced as a new booking at the offer's price now, storage of the
// dataset included and no egress; only a running reservation extends.
func TestExtensionPieces(t *testing.T) {
	o := nodeOffer(3, 2, 8, true, 200) // $2.00 per device-hour now
	o.StorageCentsPerGBMonth, o.EgressCentsPerGB = 7, 9
	o.MinRentalHours, o.MaxRentalHours = 2, 48
	o.FreeCancelHours, o.CancelFeeBP = 6, 1500
	r := runningOn(o, 4, []NodeShare{{Node: 1, Devices: 4}})
	offers := map[int64]Offer{3: o}
	now := t0.Add(3 * time.Hour)

	ext, err := ExtensionPieces(r, offers, 6, 500, now)
	if err != nil {
		t.Fatal(err)
	}
	// 4 devices × 6 h × 200¢ = 4,800¢; storage 500 GB × 7¢ × 6 h / 730 h = 21,000/730 = 28.77 → 29¢.
	const want = 4800 + 29
	if len(ext.Pieces) != 1 || ext.Amount != want || ext.Hours != 6 {
		t.Fatalf("extension %+v: want one piece of %d¢", ext, want)
	}
	p := ext.Pieces[0]
	if p.OfferID != 3 || p.Devices != 4 || !p.Gang || !slices.Equal(p.Nodes, []NodeShare{{Node: 1, Devices: 4}}) ||
		!p.Start.Equal(t0.Add(12*time.Hour)) || !p.End.Equal(t0.Add(18*time.Hour)) || p.PriceCents != 200 ||
		p.AmountCents != want || p.Interruptible || p.FreeCancelHours != 6 || p.CancelFeeBP != 1500 || p.ProviderID != o.ProviderID {
		t.Fatalf("piece %+v", p)
	}
	if err := CheckExtension(r, ext.Pieces, now); err != nil {
		t.Fatalf("CheckExtension of its own pieces: %v", err)
	}

	// Interruptible stays interruptible at today's interruptible price.
	io := o
	io.Interruptible, io.InterruptibleCentsPerDH = true, 80
	ir := r
	ir.Pieces = slices.Clone(r.Pieces)
	ir.Pieces[0].Interruptible = true
	ext, err = ExtensionPieces(ir, map[int64]Offer{3: io}, 2, 0, now)
	if err != nil || ext.Amount != 4*2*80 || !ext.Pieces[0].Interruptible || ext.Pieces[0].PriceCents != 80 {
		t.Fatalf("interruptible extension %+v, %v: want 640¢", ext, err)
	}

	for _, tc := range []struct {
		name  string
		r     Reservation
		hours int
		now   time.Time
		code  Code
		field string
	}{
		{"confirmed, not running", withState(r, ReservationConfirmed), 6, now, CodeConflict, ""},
		{"completed", withState(r, ReservationCompleted), 6, now, CodeConflict, ""},
		{"piece already ended", r, 6, t0.Add(12 * time.Hour), CodeConflict, ""},
		{"under the minimum rental", r, 1, now, CodeInvalid, "hours"},
		{"over the maximum rental", r, 49, now, CodeInvalid, "hours"},
		{"zero hours", r, 0, now, CodeInvalid, "hours"},
	} {
		_, err := ExtensionPieces(tc.r, offers, tc.hours, 0, tc.now)
		if ErrorCode(err) != tc.code || (tc.field != "" && FieldErrors(err)[tc.field] == "") {
			t.Errorf("%s: %v; want %s on %q", tc.name, err, tc.code, tc.field)
		}
	}
	short := o
	short.AvailableUntil = t0.Add(14 * time.Hour)
	if _, err := ExtensionPieces(r, map[int64]Offer{3: short}, 4, 0, now); ErrorCode(err) != CodeConflict || !strings.Contains(ErrorMessage(err), "at most 2 hours") {
		t.Errorf("past the offer's window: %v", err)
	}
	paused := o
	paused.State = OfferPaused
	if _, err := ExtensionPieces(r, map[int64]Offer{3: paused}, 4, 0, now); ErrorCode(err) != CodeConflict {
		t.Errorf("paused offer: %v", err)
	}

	// CheckExtension refuses other devices, other nodes, a gap and unequal lengths.
	good, _ := ExtensionPieces(r, offers, 6, 0, now)
	for name, mod := range map[string]func(p *ReservationPiece){
		"other node":      func(p *ReservationPiece) { p.Nodes = []NodeShare{{Node: 0, Devices: 4}} },
		"more devices":    func(p *ReservationPiece) { p.Devices = 5 },
		"a gap":           func(p *ReservationPiece) { p.Start = p.Start.Add(time.Hour) },
		"part of an hour": func(p *ReservationPiece) { p.End = p.End.Add(time.Minute) },
	} {
		bad := slices.Clone(good.Pieces)
		mod(&bad[0])
		if err := CheckExtension(r, bad, now); ErrorCode(err) != CodeInvalid {
			t.Errorf("CheckExtension with %s: %v", name, err)
		}
	}
}

func withState(r Reservation, s ReservationState) Reservation {
	r.State = s
	return r
}

// TestExtensionRoom: how long the same nodes stay free after the
// reservation, node by node — devices free on another node do not count.
func TestExtensionRoom(t *testing.T) {
	o := nodeOffer(3, 2, 8, true, 200)
	o.MinRentalHours, o.MaxRentalHours = 2, 100
	r := runningOn(o, 4, []NodeShare{{Node: 1, Devices: 4}})
	offers := map[int64]Offer{3: o}
	now := t0.Add(time.Hour)
	end := t0.Add(12 * time.Hour)
	own := r.Pieces[0].Commitment()

	if l := ExtensionRoom(r, offers, []Commitment{own}, now); l != (ExtensionLimits{MinHours: 2, MaxHours: 100}) || !l.OK() {
		t.Errorf("nothing after it: %+v; want 2 to 100 (the maximum rental)", l)
	}
	// 5 devices booked on node 1 from hour 20: 3 free there, 4 needed. Node 0 is free but is not the piece's node.
	next := Commitment{OfferID: 3, Devices: 5, Start: end.Add(8 * time.Hour), End: end.Add(20 * time.Hour), Nodes: []NodeShare{{Node: 1, Devices: 5}}}
	if l := ExtensionRoom(r, offers, []Commitment{own, next}, now); l.MaxHours != 8 || !l.OK() {
		t.Errorf("booked on its node after 8 hours: %+v; want at most 8", l)
	}
	// 4 booked there leaves exactly the 4 it needs.
	fits := next
	fits.Devices, fits.Nodes = 4, []NodeShare{{Node: 1, Devices: 4}}
	if l := ExtensionRoom(r, offers, []Commitment{own, fits}, now); l.MaxHours != 100 {
		t.Errorf("4 of 8 booked after it: %+v; want the maximum rental", l)
	}
	soon := next
	soon.Start = end.Add(time.Hour)
	if l := ExtensionRoom(r, offers, []Commitment{own, soon}, now); l.OK() || l.MaxHours != 1 {
		t.Errorf("booked an hour after it, minimum rental 2: %+v; want no room", l)
	}
	if l := ExtensionRoom(withState(r, ReservationConfirmed), offers, nil, now); l.OK() {
		t.Errorf("a confirmed reservation has room: %+v", l)
	}
}
