package market

import (
	"fmt"
	"slices"
	"time"
)

// Extending a running reservation books the same pieces again from where
// they end: a new reservation, held until paid like any booking, whose
// pieces are each an original piece's offer, devices, coupling and nodes
// over the extra hours. It is priced as a new booking of those pieces now
// (ExtensionPieces) and checked node by node in the booking transaction,
// all pieces or none.

// ExtensionLimits is how long a running reservation can be extended:
// from MinHours (the longest of its offers' minimum rentals) to MaxHours
// (while every piece's nodes stay free after it, within its offer's
// availability window and maximum rental). It cannot be extended when
// MaxHours < MinHours.
type ExtensionLimits struct {
	MinHours int
	MaxHours int
}

// OK reports whether some extension fits.
func (l ExtensionLimits) OK() bool { return l.MaxHours >= l.MinHours && l.MaxHours > 0 }

// Extension is a priced extension of a reservation.
type Extension struct {
	Hours  int
	Pieces []ReservationPiece
	Amount Cents // the sum of the pieces' amounts
}

// CanExtend returns nil when r can be extended at now: it is running and
// none of its pieces has ended; otherwise a conflict *Error saying why.
func CanExtend(r Reservation, now time.Time) error {
	if r.State != ReservationActive {
		return Errorf(CodeConflict, "Only a running reservation can be extended; this one is %s.", r.State.Label())
	}
	if err := ResaleLocked(r); err != nil {
		return err
	}
	for i, p := range r.Pieces {
		if !p.End.After(now) {
			return Errorf(CodeConflict, "Piece %d of this reservation has already ended, so it can no longer be extended as a whole.", i+1)
		}
	}
	if len(r.Pieces) == 0 {
		return Errorf(CodeConflict, "This reservation has no pieces to extend.")
	}
	return nil
}

// PendingExtension returns the first of a reservation's extensions that
// still holds capacity at now — confirmed or active, or held with its hold
// unexpired — which a further extension would overlap: extend that one
// once it runs instead.
func PendingExtension(exts []Reservation, now time.Time) (Reservation, bool) {
	for _, x := range exts {
		if x.State == ReservationConfirmed || x.State == ReservationActive || (x.State == ReservationHeld && now.Before(x.HoldExpiresAt)) {
			return x, true
		}
	}
	return Reservation{}, false
}

// pieceShares is where a piece's devices are: its nodes, or node 0 when
// it names none (as Commitment counts it).
func pieceShares(p ReservationPiece) []NodeShare {
	if len(p.Nodes) == 0 {
		return []NodeShare{{Node: 0, Devices: p.Devices}}
	}
	return p.Nodes
}

// ExtensionRoom says how long r can be extended at now beside the
// commitments cs (of any offers; r's own end where the extension starts,
// so they do not count against it), node by node: each piece keeps its
// nodes, so every node must have the piece's devices on it free
// throughout. offers are the pieces' offers by id; a missing or unlisted
// offer leaves no room.
func ExtensionRoom(r Reservation, offers map[int64]Offer, cs []Commitment, now time.Time) ExtensionLimits {
	l := ExtensionLimits{MinHours: 1, MaxHours: MaxRequestHours}
	if CanExtend(r, now) != nil {
		return ExtensionLimits{MinHours: 1}
	}
	for _, p := range r.Pieces {
		o, ok := offers[p.OfferID]
		if !ok || !o.Listed() {
			return ExtensionLimits{MinHours: 1}
		}
		l.MinHours = max(l.MinHours, o.MinRentalHours)
		hi := int(o.AvailableUntil.Sub(p.End) / time.Hour)
		if o.MaxRentalHours > 0 {
			hi = min(hi, o.MaxRentalHours)
		}
		hi = min(hi, l.MaxHours)
		// Free devices only shrink as the window grows: the longest
		// extension whose nodes stay free is found by halving.
		free := func(h int) bool {
			a := FreeDevices(o, cs, p.End, p.End.Add(time.Duration(h)*time.Hour))
			for _, s := range pieceShares(p) {
				if s.Node < 0 || s.Node >= len(a.Free) || a.Free[s.Node] < s.Devices {
					return false
				}
			}
			return true
		}
		lo := 0
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if free(mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		l.MaxHours = min(l.MaxHours, lo)
	}
	return l
}

// ExtensionPieces prices extending running reservation r by hours at now:
// for each piece, the same offer, devices, coupling and nodes from the
// piece's end for hours more, at the offer's price now — interruptible
// when the piece was and the offer still sells interruptible capacity,
// else on demand — with the offer's cancellation policy and terms now.
// A piece's amount is instance time (devices × hours × price) plus
// keeping the request's dataset of datasetGB on it (GB × the offer's
// storage price per GB-month × hours / 730, rounded once, half away from
// zero); no egress, as the data is there already. It checks what does not
// depend on other bookings — the reservation runs, the offers are listed,
// the hours are within their rentals and windows — and leaves free
// capacity to the booking transaction.
func ExtensionPieces(r Reservation, offers map[int64]Offer, hours, datasetGB int, now time.Time) (Extension, error) {
	if err := CanExtend(r, now); err != nil {
		return Extension{}, err
	}
	if hours < 1 || hours > MaxRequestHours {
		return Extension{}, &Error{Code: CodeInvalid, Message: fmt.Sprintf("Extend by 1 to %d hours.", MaxRequestHours),
			Fields: map[string]string{"hours": fmt.Sprintf("Extend by 1 to %d hours.", MaxRequestHours)}}
	}
	ext := Extension{Hours: hours, Pieces: make([]ReservationPiece, 0, len(r.Pieces))}
	for i, p := range r.Pieces {
		o, ok := offers[p.OfferID]
		if !ok || !o.Listed() {
			return Extension{}, Errorf(CodeConflict, "The offer of piece %d is no longer listed, so the reservation cannot be extended.", i+1)
		}
		if hours < o.MinRentalHours || (o.MaxRentalHours > 0 && hours > o.MaxRentalHours) {
			msg := fmt.Sprintf("The offer of piece %d rents for %d to %d hours at a time; an extension is a new booking of it.", i+1, o.MinRentalHours, o.MaxRentalHours)
			return Extension{}, &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{"hours": msg}}
		}
		end := p.End.Add(time.Duration(hours) * time.Hour)
		if end.After(o.AvailableUntil) {
			return Extension{}, Errorf(CodeConflict, "The offer of piece %d is available until %s; extend by at most %d hours.",
				i+1, FormatTime(o.AvailableUntil), int(o.AvailableUntil.Sub(p.End)/time.Hour))
		}
		intr := p.Interruptible && o.Interruptible && o.InterruptibleCentsPerDH > 0 && o.InterruptibleCentsPerDH <= o.PriceCentsPerDeviceHour
		price := o.PriceCentsPerDeviceHour
		if intr {
			price = o.InterruptibleCentsPerDH
		}
		amount := Cents(int64(p.Devices) * int64(hours) * int64(price))
		if datasetGB > 0 {
			amount += Cents(MulDivRound(int64(datasetGB)*int64(o.StorageCentsPerGBMonth), int64(hours), hoursPerMonth))
		}
		ext.Pieces = append(ext.Pieces, ReservationPiece{
			OfferID: p.OfferID, ProviderID: o.ProviderID, Devices: p.Devices, Start: p.End, End: end,
			Interruptible: intr, PriceCents: price, AmountCents: amount,
			FreeCancelHours: o.FreeCancelHours, CancelFeeBP: o.CancelFeeBP, RejectMinutes: o.RejectMinutes, Terms: TermsOf(o),
			Gang: p.Gang, Nodes: slices.Clone(pieceShares(p)),
		})
		ext.Amount += amount
	}
	return ext, nil
}

// CheckExtension checks, where the extension is booked, that pieces
// continue running reservation r: one per piece of r, in order, each on
// the same offer with the same devices, coupling and nodes, starting where
// the piece ends, all lasting the same whole hours.
func CheckExtension(r Reservation, pieces []ReservationPiece, now time.Time) error {
	if err := CanExtend(r, now); err != nil {
		return err
	}
	if len(pieces) != len(r.Pieces) {
		return Errorf(CodeInvalid, "An extension continues every piece of the reservation: %d pieces, not %d.", len(r.Pieces), len(pieces))
	}
	var d time.Duration
	for i, p := range pieces {
		o := r.Pieces[i]
		if i == 0 {
			d = p.End.Sub(p.Start)
		}
		if p.OfferID != o.OfferID || p.Devices != o.Devices || p.Gang != o.Gang || !slices.Equal(p.Nodes, pieceShares(o)) {
			return Errorf(CodeInvalid, "Piece %d of the extension is not the same devices as the reservation's.", i+1)
		}
		if !p.Start.Equal(o.End) || p.End.Sub(p.Start) != d || d < time.Hour || d%time.Hour != 0 {
			return Errorf(CodeInvalid, "Piece %d of the extension must start where the reservation's ends and last the same whole hours as the others.", i+1)
		}
	}
	return nil
}
