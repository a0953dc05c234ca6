package market

import (
	"fmt"
	"strconv"
	"time"
)

// Resale of reserved time. The holder of a paid reservation that has not
// started (confirmed), or of a running one (active), may list the time
// that remains from a whole hour From to the end of every piece, all
// pieces together, at a price of their own. A sale moves that time to the
// buyer: a new reservation whose pieces are the original's from From (the
// same offers, devices, nodes and frozen terms), while the original
// reservation keeps holding the capacity and keeps settling the provider
// for the whole time it booked, so the provider's payout is exactly what
// it would have been without the sale. The buyer pays the price; the
// platform keeps its fee (PlatformFeeBP of the price) and the seller is
// credited the rest as a refund on the payment they booked with — so the
// price may not exceed what they paid for the time sold (ResalePriceCap).

// ResaleMargin is how far ahead of now a running reservation's remaining
// time may be listed from: the first whole hour at least this far ahead.
const ResaleMargin = 15 * time.Minute

// ListingState is where a resale listing stands.
type ListingState string

// Listing states. An open listing lapses, without a write, once its start
// passes or its reservation leaves confirmed/active (ListingOpen).
const (
	ListingOpen      ListingState = "open"
	ListingWithdrawn ListingState = "withdrawn"
	ListingSold      ListingState = "sold"
)

// ResaleListing is an offer to sell a reservation's remaining time.
type ResaleListing struct {
	ID            int64
	ReservationID int64
	SellerID      int64
	From          time.Time // the whole hour the time sold starts at
	Price         Cents     // what the buyer pays for all of it
	State         ListingState
	CreatedAt     time.Time
	UpdatedAt     time.Time

	// Set by the sale.
	BuyerID           int64
	SoldReservationID int64
	SoldAt            time.Time
	ChargeRef         string // the buyer's payment
	Fee               Cents  // the platform's fee
	Credit            Cents  // Price − Fee, refunded to the seller
	CreditDone        bool
	CreditRef         string // the processor's refund of the credit
	Attempts          int
	LastError         string
	// SLACredit is what the original's settlement owes the buyer for
	// incidents in the resold hours (ResaleSLACredit), refunded to their
	// payment; SLACreditDone once refunded (or when there is none).
	SLACredit     Cents
	SLACreditDone bool
}

// Live reports whether the listing can be bought at now, given its
// reservation r: open, its start still ahead, and r still confirmed or
// active and not resold.
func (l ResaleListing) Live(r Reservation, now time.Time) bool {
	return l.State == ListingOpen && now.Before(l.From) && CanResell(r) == nil
}

// StatusLabel says where the listing stands at now for people.
func (l ResaleListing) StatusLabel(r Reservation, now time.Time) string {
	switch {
	case l.State == ListingSold:
		return "sold"
	case l.State == ListingWithdrawn:
		return "withdrawn"
	case l.Live(r, now):
		return "open"
	}
	return "lapsed"
}

// CanResell returns nil when r's remaining time may be listed: it is paid
// and not finished (confirmed or active), was not bought on resale itself,
// has not been resold already and holds no interruptible (spot) piece,
// which the provider may preempt; otherwise a conflict saying why.
func CanResell(r Reservation) error {
	if r.State != ReservationConfirmed && r.State != ReservationActive {
		return Errorf(CodeConflict, "Only a paid reservation that has not ended can be resold; this one is %s.", r.State.Label())
	}
	if r.ResaleOf != 0 {
		return Errorf(CodeConflict, "Time bought on resale cannot be resold again.")
	}
	if !r.ResoldAt.IsZero() {
		return Errorf(CodeConflict, "This reservation's remaining time has already been sold.")
	}
	if len(r.Pieces) == 0 {
		return Errorf(CodeConflict, "This reservation has no pieces to resell.")
	}
	for _, p := range r.Pieces {
		if p.Interruptible {
			return Errorf(CodeConflict, "Interruptible time cannot be resold: the provider may preempt it.")
		}
	}
	return nil
}

// ResaleFromChoices are the times a listing of r may start at, at now:
// for a reservation that has not started, its start, on the hour or not
// (if it is at least ResaleMargin ahead); for a running one, every whole hour from the
// first one ResaleMargin ahead until before the earliest piece end.
func ResaleFromChoices(r Reservation, now time.Time) []time.Time {
	if CanResell(r) != nil {
		return nil
	}
	earliest := now.Add(ResaleMargin)
	if r.State == ReservationConfirmed {
		// Sold whole from its start, whatever the minute: an ASAP booking
		// or an extension starts off the hour.
		if s := r.Start(); !s.Before(earliest) {
			return []time.Time{s}
		}
		return nil
	}
	end := r.End()
	for _, p := range r.Pieces {
		if p.End.Before(end) {
			end = p.End
		}
	}
	var out []time.Time
	t := earliest.Truncate(time.Hour)
	if t.Before(earliest) {
		t = t.Add(time.Hour)
	}
	for ; t.Before(end); t = t.Add(time.Hour) {
		out = append(out, t)
	}
	return out
}

// CheckResaleFrom checks that from is one of ResaleFromChoices(r, now).
func CheckResaleFrom(r Reservation, from, now time.Time) error {
	if err := CanResell(r); err != nil {
		return err
	}
	for _, t := range ResaleFromChoices(r, now) {
		if t.Equal(from) {
			return nil
		}
	}
	msg := "Choose a whole hour at least 15 minutes from now and before the end of every piece."
	if r.State == ReservationConfirmed {
		msg = "A reservation that has not started is sold whole, from its start, at least 15 minutes ahead."
	}
	return &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{"from": msg}}
}

// ResalePriceCap is the most a listing of r from `from` may ask: what the
// seller paid for the time sold — each piece's amount pro rata to the part
// of it from `from` on, rounded down to the cent — less what has already
// been refunded on their payment. Never negative.
func ResalePriceCap(r Reservation, from time.Time, refunded Cents) Cents {
	var c Cents
	for _, p := range r.Pieces {
		whole := int64(p.End.Sub(p.Start) / time.Second)
		start := p.Start
		if from.After(start) {
			start = from
		}
		part := int64(p.End.Sub(start) / time.Second)
		if whole <= 0 || part <= 0 {
			continue
		}
		c += Cents(int64(p.AmountCents) * part / whole)
	}
	return max(c-refunded, 0)
}

// ValidateResaleListing checks a listing of r from `from` at price at
// now, with refunded already refunded on the seller's payment: the
// reservation can be resold, from is a whole hour it may start at
// (CheckResaleFrom) and the price is within the cap (CheckResalePrice).
// Bad input is one CodeInvalid error with a message per field.
func ValidateResaleListing(r Reservation, from time.Time, price, refunded Cents, now time.Time) error {
	if err := CanResell(r); err != nil {
		return err
	}
	fields := map[string]string{}
	if err := CheckResaleFrom(r, from, now); err != nil {
		fields["from"] = ErrorMessage(err)
	} else if err := CheckResalePrice(price, ResalePriceCap(r, from, refunded)); err != nil {
		fields["price"] = ErrorMessage(err)
	}
	if len(fields) == 0 {
		return nil
	}
	msg := fields["from"]
	if msg == "" {
		msg = fields["price"]
	}
	return &Error{Code: CodeInvalid, Message: msg, Fields: fields}
}

// CheckResalePrice checks a listing's price against its cap: at least one
// cent and at most the cap.
func CheckResalePrice(price, limit Cents) error {
	var msg string
	switch {
	case price <= 0:
		msg = "Ask a price of at least $0.01."
	case price > limit:
		msg = fmt.Sprintf("Ask at most %s: what you paid for this time.", limit)
	default:
		return nil
	}
	return &Error{Code: CodeInvalid, Message: msg, Fields: map[string]string{"price": msg}}
}

// ResaleSplit divides a sale's price: the platform's fee (feeBP of the
// price, by Share) and the seller's credit, the rest. fee + credit == price.
func ResaleSplit(price Cents, feeBP int) (fee, credit Cents) {
	fee = Share(price, feeBP)
	return fee, price - fee
}

// ResalePieces are the pieces the buyer of r's time from `from` holds:
// each of r's pieces from max(its start, from) to its end, on the same
// offer, devices, nodes and coupling, at the same price, under the terms
// and cancellation policy frozen at booking, with amount 0 — the original
// reservation's pieces keep the money.
func ResalePieces(r Reservation, from time.Time) []ReservationPiece {
	out := make([]ReservationPiece, 0, len(r.Pieces))
	for _, p := range r.Pieces {
		q := p
		q.ID = 0
		if from.After(q.Start) {
			q.Start = from
		}
		q.AmountCents = 0
		q.Nodes = append([]NodeShare(nil), pieceShares(p)...)
		out = append(out, q)
	}
	return out
}

// HeldPieces are the parts of r's pieces its holder still holds: each
// piece up to AccessEnd, without the pieces whose time was all resold.
func HeldPieces(r Reservation) []ReservationPiece {
	var out []ReservationPiece
	for _, p := range r.Pieces {
		p.End = AccessEnd(r, p)
		if p.End.After(p.Start) {
			out = append(out, p)
		}
	}
	return out
}

// ValidateHeldIncident checks an incident r's holder reports on piece:
// ValidateIncident on the part of the piece they still hold (AccessEnd).
// Resold hours are reported on the resale buyer's reservation: reporting
// on a piece sold whole is a conflict, and a time after the resale says so
// by the field rather than "within the booking".
func ValidateHeldIncident(inc *Incident, r Reservation, piece ReservationPiece) error {
	held := piece
	held.End = AccessEnd(r, piece)
	if !held.End.Before(piece.End) {
		return ValidateIncident(inc, held)
	}
	if !held.End.After(held.Start) {
		return Errorf(CodeConflict, "This piece's time was resold: incidents in it are reported on the resale buyer's reservation.")
	}
	err := ValidateIncident(inc, held)
	e, ok := err.(*Error)
	if !ok || e.Fields == nil {
		return err
	}
	sold := fmt.Sprintf("This piece's hours on this reservation end at %s, where the resold time begins; incidents after that are reported on the resale buyer's reservation.",
		held.End.UTC().Format("2 Jan 2006 15:04 UTC"))
	if _, bad := e.Fields["start"]; bad && !inc.Start.Before(held.End) && inc.Start.Before(piece.End) {
		e.Fields["start"] = sold
	}
	if _, bad := e.Fields["end"]; bad && inc.End.After(held.End) && !inc.End.After(piece.End) {
		e.Fields["end"] = sold
	}
	return e
}

// AccessEnd is when r's holder's access to piece p ends: the piece's end,
// or when its remaining time was resold, if earlier.
func AccessEnd(r Reservation, p ReservationPiece) time.Time {
	if !r.ResoldAt.IsZero() && r.ResoldAt.Before(p.End) {
		if r.ResoldAt.Before(p.Start) {
			return p.Start
		}
		return r.ResoldAt
	}
	return p.End
}

// ResaleKey is the idempotency key of one money movement of a resale
// listing: "resale_4_charge", "resale_4_credit".
func ResaleKey(listingID int64, step string) string {
	return "resale_" + strconv.FormatInt(listingID, 10) + "_" + step
}

// ResaleChargeKey is the idempotency key of a buyer's payment for a
// listing, bound to both, so a retried purchase never charges twice.
func ResaleChargeKey(listingID, buyerID int64) string {
	return ResaleKey(listingID, "buyer_"+strconv.FormatInt(buyerID, 10))
}

// ResaleEntries records a sale in the ledger, on the original reservation
// (whose payment the seller's credit is refunded on): the buyer's payment
// (charge: Dr cash, Cr the buyer's account; its reference is the buyer's
// payment), passed to the seller (resale: Dr buyer, Cr the seller's
// account), and the platform's fee out of it (fee: Dr seller, Cr fees).
// The seller's credit is ResaleCreditEntry, once refunded; the provider's
// accounts are not touched.
func ResaleEntries(l ResaleListing, at time.Time) []LedgerEntry {
	buyer, seller := BuyerAccount(l.BuyerID), BuyerAccount(l.SellerID)
	out := []LedgerEntry{
		{ReservationID: l.ReservationID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: buyer,
			Amount: l.Price, StripeRef: l.ChargeRef, IdempotencyKey: ResaleKey(l.ID, EntryCharge), At: at},
		{ReservationID: l.ReservationID, Kind: EntryResale, Debit: buyer, Credit: seller,
			Amount: l.Price, IdempotencyKey: ResaleKey(l.ID, EntryResale), At: at},
	}
	if l.Fee > 0 {
		out = append(out, LedgerEntry{ReservationID: l.ReservationID, Kind: EntryFee, Debit: seller, Credit: AccountPlatformFees,
			Amount: l.Fee, IdempotencyKey: ResaleKey(l.ID, EntryFee), At: at})
	}
	return out
}

// ResaleCreditEntry records the seller's credit refunded to their card
// (refund: Dr the seller's buyer account, Cr cash), with the processor's
// refund as reference. After it the seller's account for the sale is at
// zero and the cash kept is the fee.
func ResaleCreditEntry(l ResaleListing, refundRef string, at time.Time) LedgerEntry {
	return BuyerRefund(l.ReservationID, l.SellerID, l.Credit, refundRef, ResaleKey(l.ID, "credit"), at)
}

// ResaleLocked returns a conflict for a reservation that a resale ties to
// another — its remaining time was sold, or it was bought on resale — and
// nil otherwise. Such a reservation cannot be cancelled, rejected or
// extended: its money settles through the original booking, which a
// cancellation or rejection would undo under the other holder.
func ResaleLocked(r Reservation) error {
	switch {
	case !r.ResoldAt.IsZero():
		return Errorf(CodeConflict, "This reservation's remaining time was sold on resale, so it can no longer be cancelled, rejected or extended.")
	case r.ResaleOf != 0:
		return Errorf(CodeConflict, "Time bought on resale cannot be cancelled, rejected or extended; it runs under the original booking.")
	}
	return nil
}

// UnsoldPaymentEntries record a buyer's payment for a listing that could
// not be sold to them after all (sold to another meanwhile): theirs (charge:
// Dr cash, Cr buyer) until refunded in full (refund: Dr buyer, Cr cash, with
// refundRef, once the processor confirms; pass "" for the charge alone).
// They sit on the listing's reservation, keyed by listing and buyer.
func UnsoldPaymentEntries(l ResaleListing, buyerID int64, paymentIntentID string, amount Cents, refundRef string, at time.Time) []LedgerEntry {
	key := ResaleChargeKey(l.ID, buyerID)
	if refundRef != "" {
		return []LedgerEntry{BuyerRefund(l.ReservationID, buyerID, amount, refundRef, key+"_refund", at)}
	}
	return []LedgerEntry{{ReservationID: l.ReservationID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: BuyerAccount(buyerID),
		Amount: amount, StripeRef: paymentIntentID, IdempotencyKey: key + "_charge", At: at}}
}

// ResaleSettlement is what settling a reservation whose time was resold
// needs beyond the original's SettlementInput: the sale, and what has
// already been refunded or is owed on each party's payment.
type ResaleSettlement struct {
	ListingID int64
	HolderID  int64     // who bought the time
	From      time.Time // where the time was split: the listing's start
	Price     Cents     // what the holder paid for their hours
	// SellerRefunded is what is refunded or owed on the seller's payment
	// before this statement: the sale's credit and any other refund.
	SellerRefunded Cents
	// HolderRefunded is what is refunded or owed on the holder's payment.
	HolderRefunded Cents
}

// SettleResold computes the statement of a reservation whose time from
// sale.From was resold. in is the original reservation with its terms and
// fee and every incident on its pieces — the holder's, reported on the
// bought pieces, moved onto the original's pieces at the same positions.
//
// The rule (docs/settlement.md). Each piece is split at From into the
// seller's part, before From, and the holder's part, from From; the
// holder's part costs the piece's amount pro rata to its time, rounded
// down (as ResalePriceCap), the seller's part the rest. Each incident
// counts in the part its time falls in, clipped to it. Each part is
// settled by Settle as a piece of its own under the piece's frozen terms:
// its own uptime, its own uptime tier and credit cap, all on the part's
// amount. The holder's parts' refund goes to the holder (ResaleCredit),
// at most Price less HolderRefunded; what is above that goes back to the
// seller, who paid the provider for those hours. The seller's refund —
// their parts' refund and that excess — is at most what is left on their
// payment, its amount less SellerRefunded. Whatever a cap withholds is
// kept by the provider (RefundWithheld), taken off the pieces' refunds in
// proportion to them (SplitCredit). The provider keeps the rest of what
// was paid less the platform fee, as in any statement, so Refund + Fee +
// Payout == Paid.
func SettleResold(in SettlementInput, sale ResaleSettlement) (Statement, error) {
	r := in.Reservation
	from := sale.From
	var sellerPieces, holderPieces []ReservationPiece
	var sellerAmount, holderAmount Cents
	parts := make([][2]int, len(r.Pieces)) // index+1 in sellerPieces, holderPieces; 0 when none
	for i, p := range r.Pieces {
		whole := int64(p.End.Sub(p.Start) / time.Second)
		if whole <= 0 {
			return Statement{}, Errorf(CodeInvalid, "Piece %d has no duration.", p.ID)
		}
		h := p
		if from.After(h.Start) {
			h.Start = from
		}
		held := int64(h.End.Sub(h.Start) / time.Second)
		if held > 0 {
			h.AmountCents = Cents(int64(p.AmountCents) * held / whole)
			holderPieces = append(holderPieces, h)
			holderAmount += h.AmountCents
			parts[i][1] = len(holderPieces)
		} else {
			h.AmountCents = 0
		}
		if from.After(p.Start) {
			s := p
			if from.Before(s.End) {
				s.End = from
			}
			s.AmountCents = p.AmountCents - h.AmountCents
			sellerPieces = append(sellerPieces, s)
			sellerAmount += s.AmountCents
			parts[i][0] = len(sellerPieces)
		}
	}
	var pending []int64
	var sellerIncs, holderIncs []Incident
	for _, inc := range in.Incidents {
		if !inc.Acknowledged {
			pending = append(pending, inc.ID)
			continue
		}
		if c, ok := clipIncident(inc, time.Time{}, from); ok {
			sellerIncs = append(sellerIncs, c)
		}
		if c, ok := clipIncident(inc, from, time.Time{}); ok {
			holderIncs = append(holderIncs, c)
		}
	}
	settlePart := func(pieces []ReservationPiece, amount Cents, incs []Incident) (Statement, error) {
		if len(pieces) == 0 {
			return Statement{}, nil
		}
		part := in
		part.Reservation.Pieces, part.Reservation.AmountCents, part.Incidents = pieces, amount, incs
		return Settle(part)
	}
	seller, err := settlePart(sellerPieces, sellerAmount, sellerIncs)
	if err != nil {
		return Statement{}, err
	}
	holder, err := settlePart(holderPieces, holderAmount, holderIncs)
	if err != nil {
		return Statement{}, err
	}

	st := Statement{ReservationID: r.ID, BuyerID: r.BuyerID, PlatformFeeBP: in.PlatformFeeBP, Pending: pending,
		ResaleBuyerID: sale.HolderID, ResaleListingID: sale.ListingID}
	for i, p := range r.Pieces {
		ps := PieceStatement{PieceID: p.ID, OfferID: p.OfferID, ProviderID: p.ProviderID, Basis: in.Terms[p.OfferID].BillingBasis,
			Devices: p.Devices, Start: p.Start, End: p.End, Paid: p.AmountCents, GuaranteeBP: in.Terms[p.OfferID].UptimeBP}
		for k, label := range []string{"Hours before the resale", "Resold hours"} {
			if parts[i][k] == 0 {
				continue
			}
			src := []Statement{seller, holder}[k].Pieces[parts[i][k]-1]
			ps.ReservedDeviceSeconds += src.ReservedDeviceSeconds
			ps.PromisedDeviceSeconds += src.PromisedDeviceSeconds
			ps.DeliveredDeviceSeconds += src.DeliveredDeviceSeconds
			ps.Breached = ps.Breached || src.Breached
			for _, c := range src.Clauses {
				c.Label = label + ": " + c.Label
				ps.Clauses = append(ps.Clauses, c)
			}
			ps.NotCharged += src.NotCharged
			ps.CreditsBeforeCap += src.CreditsBeforeCap
			ps.CreditCap += src.CreditCap
			ps.Credits += src.Credits
			ps.Refund += src.Refund
		}
		ps.UptimeBP = UptimeBP(ps.DeliveredDeviceSeconds, ps.PromisedDeviceSeconds)
		st.Pieces = append(st.Pieces, ps)
	}

	st.ResaleCredit = min(holder.Refund, max(sale.Price-sale.HolderRefunded, 0))
	sellerOwed := seller.Refund + holder.Refund - st.ResaleCredit
	sellerRefund := min(sellerOwed, max(r.AmountCents-sale.SellerRefunded, 0))
	st.RefundWithheld = sellerOwed - sellerRefund
	if st.RefundWithheld > 0 {
		shares := map[int64]Cents{}
		for i, ps := range st.Pieces {
			shares[int64(i)] = ps.Refund
		}
		for i, cut := range SplitCredit(st.RefundWithheld, shares) {
			st.Pieces[i].Refund -= cut
		}
	}
	for i := range st.Pieces {
		ps := &st.Pieces[i]
		ps.Kept = ps.Paid - ps.Refund
		ps.Payout = ps.Kept
		st.addPiece(*ps)
	}
	st.UptimeBP = UptimeBP(st.DeliveredDeviceSeconds, st.PromisedDeviceSeconds)
	st.applyProviderFees()
	return st, nil
}

// clipIncident is inc clipped to [from, to) (a zero bound is open), and
// false when nothing of it is left there.
func clipIncident(inc Incident, from, to time.Time) (Incident, bool) {
	if !from.IsZero() && inc.Start.Before(from) {
		inc.Start = from
	}
	if !to.IsZero() && inc.End.After(to) {
		inc.End = to
	}
	return inc, inc.End.After(inc.Start)
}

// ResaleSLARefundEntry records the resold hours' credit refunded to their
// holder's payment (refund: Dr the holder's account, Cr cash).
func ResaleSLARefundEntry(l ResaleListing, amount Cents, refundRef string, at time.Time) LedgerEntry {
	return BuyerRefund(l.ReservationID, l.BuyerID, amount, refundRef, ResaleKey(l.ID, "sla_refund"), at)
}

// ResalePricePerDeviceHour is a listing's price per device-hour over the
// pieces sold, rounded up to the cent (so a price limit it is within is
// never exceeded); false when the pieces hold no device-time.
func ResalePricePerDeviceHour(price Cents, pieces []ReservationPiece) (Cents, bool) {
	var deviceSeconds int64
	for _, p := range pieces {
		deviceSeconds += int64(p.Devices) * int64(p.End.Sub(p.Start)/time.Second)
	}
	if deviceSeconds <= 0 {
		return 0, false
	}
	return Cents((int64(price)*3600 + deviceSeconds - 1) / deviceSeconds), true
}

// ResaleMatches reports whether buying listing l of reservation r (whose
// pieces' offers are offers, with their providers' reliability in
// reliabilityBP by provider id) would answer req at now. The listing is
// bought whole, so req must ask for exactly its devices, in one piece for
// a gang (training); its price per device-hour (rounded up) and total
// must be within the request's price limit and budget; and every piece
// must pass the matcher's own checks of the request's hard constraints —
// accelerator, memory, interconnect, network, region and residency,
// reliability, carbon, software versions, and the job fitting the time
// window — run on the piece's offer as if it were free exactly over the
// piece's part of the listing (Match on that one candidate).
func ResaleMatches(l ResaleListing, r Reservation, offers map[int64]Offer, reliabilityBP map[int64]int, req Request, now time.Time) bool {
	pieces := ResalePieces(r, l.From)
	devices := 0
	for _, p := range pieces {
		devices += p.Devices
	}
	perDH, ok := ResalePricePerDeviceHour(l.Price, pieces)
	c := req.Constraints
	switch {
	case len(pieces) == 0 || devices != req.Workload.Devices || !ok:
		return false
	case req.Workload.Kind == WorkTraining && len(pieces) != 1:
		return false
	case c.BudgetCents > 0 && l.Price > c.BudgetCents:
		return false
	case c.MaxPricePerDeviceHour > 0 && perDH > c.MaxPricePerDeviceHour:
		return false
	}
	for _, p := range pieces {
		o, ok := offers[p.OfferID]
		if !ok || (p.Interruptible && !c.AllowInterruption) {
			return false
		}
		o.Review, o.State = ReviewApproved, OfferActive
		o.AvailableFrom, o.AvailableUntil = p.Start, p.End
		o.MinRentalHours, o.MaxRentalHours = 1, MaxRequestHours
		one := req
		one.Workload.Devices = p.Devices
		if one.Workload.MinPieceDevices > p.Devices {
			one.Workload.MinPieceDevices = p.Devices
		}
		one.Constraints.MaxPricePerDeviceHour, one.Constraints.BudgetCents, one.Constraints.OfferIDs = 0, 0, nil
		if one.Constraints.EarliestStart.Before(p.Start) {
			one.Constraints.EarliestStart = p.Start
		}
		if one.Constraints.Deadline.IsZero() || one.Constraints.Deadline.After(p.End) {
			one.Constraints.Deadline = p.End
		}
		one.Limit = 1
		res, err := Match([]Candidate{{Offer: o, ReliabilityBP: reliabilityBP[o.ProviderID]}}, nil, one, now)
		if err != nil || len(res.Quotes) == 0 {
			return false
		}
	}
	return true
}
