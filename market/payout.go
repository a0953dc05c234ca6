package market

import (
	"fmt"
	"sort"
	"time"
)

// Share is bp basis points of amount, rounded half away from zero. It is the
// one rounding rule for every share of money the marketplace computes: the
// platform fee, a cancellation fee, a credit cap, a percentage credit. 25%
// of $881.99 is $220.50 wherever it appears.
func Share(amount Cents, bp int) Cents {
	return Cents(MulDivRound(int64(amount), int64(bp), 10000))
}

// PlatformFee is the platform's fee on what a provider keeps of a
// reservation after every credit to the buyer: feeBP basis points of kept,
// rounded by Share. It is computed once per provider and reservation, on the
// provider's total, so a provider with several pieces pays exactly the rate.
func PlatformFee(kept Cents, feeBP int) Cents {
	if kept <= 0 {
		return 0
	}
	return Share(kept, feeBP)
}

// allocate divides total over weights in whole cents, in proportion to the
// weights: the floor of each exact share, then the cents left over one each
// to the largest remainders (ties to the lower index). The parts add up to
// total; with no positive weight everything goes to the first part.
func allocate(total Cents, weights []Cents) []Cents {
	out := make([]Cents, len(weights))
	if len(weights) == 0 {
		return out
	}
	var sum int64
	for _, w := range weights {
		if w > 0 {
			sum += int64(w)
		}
	}
	if sum == 0 {
		out[0] = total
		return out
	}
	type rem struct {
		i int
		r int64
	}
	rems := make([]rem, 0, len(weights))
	var given int64
	for i, w := range weights {
		if w <= 0 {
			continue
		}
		num := int64(total) * int64(w)
		out[i] = Cents(num / sum)
		given += num / sum
		rems = append(rems, rem{i, num % sum})
	}
	sort.SliceStable(rems, func(a, b int) bool { return rems[a].r > rems[b].r })
	for k := 0; given < int64(total); k++ {
		out[rems[k%len(rems)].i]++
		given++
	}
	return out
}

// applyProviderFees sets each piece's fee from its provider's fee
// (PlatformFee of the provider's total kept, allocated over the provider's
// pieces by what each kept) and recomputes the payouts and the totals.
func (s *Statement) applyProviderFees() {
	byProvider := map[int64][]int{}
	var order []int64
	for i, p := range s.Pieces {
		if _, ok := byProvider[p.ProviderID]; !ok {
			order = append(order, p.ProviderID)
		}
		byProvider[p.ProviderID] = append(byProvider[p.ProviderID], i)
	}
	s.Fee, s.Payout = 0, 0
	for _, id := range order {
		idx := byProvider[id]
		var kept Cents
		weights := make([]Cents, len(idx))
		for k, i := range idx {
			kept += s.Pieces[i].Kept
			weights[k] = s.Pieces[i].Kept
		}
		fees := allocate(PlatformFee(kept, s.PlatformFeeBP), weights)
		for k, i := range idx {
			s.Pieces[i].Fee = fees[k]
			s.Pieces[i].Payout = s.Pieces[i].Kept - fees[k]
			s.Fee += fees[k]
			s.Payout += s.Pieces[i].Payout
		}
	}
}

// DisputeCredit is what a granted dispute credit (or a chargeback the
// platform attributes to a provider) did to one provider's side of a
// statement.
//
// The rule: a credit is split over the reservation's providers in proportion
// to what the buyer paid each (SplitCredit). Each provider's part is taken
// from what that provider keeps of the reservation and has not yet been paid
// out; the fee is then recomputed on what the provider keeps after the
// credit (PlatformFee), so the platform's fee shrinks with it. Whatever a
// provider's part cannot be taken from — the payout was already sent, or the
// part exceeds what the provider still keeps — is borne by the platform and
// recorded as its loss (AccountPlatformLosses), never as a negative payout.
type DisputeCredit struct {
	DisputeID   int64
	ProviderID  int64
	Credit      Cents // the provider's part of the credit
	Taken       Cents // taken from what the provider keeps
	Loss        Cents // borne by the platform: Credit - Taken
	FeeBefore   Cents // the provider's fee before the credit
	FeeAfter    Cents // the fee on what the provider keeps after it
	PayoutAfter Cents // what the provider is paid after it
	Chargeback  bool  // the buyer's bank took the money back; no refund is made
	// PayerID is who the credit went to when not the statement's buyer:
	// the holder of its time bought on resale (ApplyDisputeCreditTo).
	PayerID int64 `json:",omitempty"`
}

// DisputeCreditTotal is the sum of the dispute credits on the statement.
func (s Statement) DisputeCreditTotal() Cents {
	var t Cents
	for _, d := range s.DisputeCredits {
		t += d.Credit
	}
	return t
}

// ApplyDisputeCredit applies a credit of a decided dispute to a statement
// under the rule of DisputeCredit. paidOut names the providers whose payout
// for the reservation has already been sent. It returns the statement with
// the credit recorded (Payouts reflects it) and the ledger entries that
// record it: per provider the part taken (credit: Dr provider, Cr buyer), the
// platform's loss (loss: Dr losses, Cr buyer) and the fee given back (fee
// reversal: Dr fees, Cr provider); then, unless chargeback, the refund to the
// buyer of the whole credit (refund: Dr buyer, Cr cash) with an empty
// StripeRef for the caller to fill in. A chargeback's money already went
// back through the bank (the chargeback entry), so it gets no refund entry.
func ApplyDisputeCredit(s Statement, disputeID int64, credit Cents, paidOut map[int64]bool, chargeback bool, at time.Time) (Statement, []LedgerEntry, error) {
	return ApplyDisputeCreditTo(s, disputeID, s.BuyerID, credit, paidOut, chargeback, at)
}

// ApplyDisputeCreditTo is ApplyDisputeCredit for a credit owed to payerID,
// who paid for part of the statement's time: the statement's buyer, or the
// holder of its time bought on resale (whose payment is refunded; the
// providers bear it as any credit). Its entries name payerID's account.
func ApplyDisputeCreditTo(s Statement, disputeID, payerID int64, credit Cents, paidOut map[int64]bool, chargeback bool, at time.Time) (Statement, []LedgerEntry, error) {
	if credit <= 0 {
		return s, nil, Errorf(CodeInvalid, "A dispute credit must be positive.")
	}
	for _, d := range s.DisputeCredits {
		if d.DisputeID == disputeID {
			return s, nil, Errorf(CodeConflict, "Dispute %d was already applied to the statement.", disputeID)
		}
	}
	shares := map[int64]Cents{}
	for _, p := range s.Pieces {
		shares[p.ProviderID] += p.Paid
	}
	parts := SplitCredit(credit, shares)
	if len(parts) == 0 {
		return s, nil, Errorf(CodeConflict, "Nothing was paid to any provider of reservation %d, so there is nothing to credit.", s.ReservationID)
	}
	before := map[int64]ProviderPayout{}
	for _, pp := range s.Payouts() {
		before[pp.ProviderID] = pp
	}
	out := s
	out.DisputeCredits = append([]DisputeCredit(nil), s.DisputeCredits...)
	buyer := BuyerAccount(payerID)
	var entries []LedgerEntry
	for _, id := range ledgerSortedIDs(parts) {
		part := parts[id]
		if part <= 0 {
			continue
		}
		pp := before[id]
		dc := DisputeCredit{DisputeID: disputeID, ProviderID: id, Credit: part, FeeBefore: pp.Fee, FeeAfter: pp.Fee, PayoutAfter: pp.Payout, Chargeback: chargeback}
		if payerID != s.BuyerID {
			dc.PayerID = payerID
		}
		if !paidOut[id] {
			dc.Taken = min(part, pp.Kept)
			dc.FeeAfter = PlatformFee(pp.Kept-dc.Taken, s.PlatformFeeBP)
			dc.PayoutAfter = pp.Kept - dc.Taken - dc.FeeAfter
		}
		dc.Loss = part - dc.Taken
		out.DisputeCredits = append(out.DisputeCredits, dc)
		prov := ProviderAccount(id)
		if dc.Taken > 0 {
			entries = append(entries, LedgerEntry{ReservationID: s.ReservationID, Kind: EntryCredit, Debit: prov, Credit: buyer,
				Amount: dc.Taken, IdempotencyKey: DisputeKey(disputeID, EntryCredit, id), At: at})
		}
		if dc.Loss > 0 {
			entries = append(entries, LedgerEntry{ReservationID: s.ReservationID, Kind: EntryLoss, Debit: AccountPlatformLosses, Credit: buyer,
				Amount: dc.Loss, IdempotencyKey: DisputeKey(disputeID, EntryLoss, id), At: at})
		}
		if back := dc.FeeBefore - dc.FeeAfter; back > 0 {
			entries = append(entries, LedgerEntry{ReservationID: s.ReservationID, Kind: EntryFeeReversal, Debit: AccountPlatformFees, Credit: prov,
				Amount: back, IdempotencyKey: DisputeKey(disputeID, EntryFeeReversal, id), At: at})
		}
	}
	if !chargeback {
		entries = append(entries, LedgerEntry{ReservationID: s.ReservationID, Kind: EntryRefund, Debit: buyer, Credit: AccountPlatformCash,
			Amount: credit, IdempotencyKey: DisputeKey(disputeID, EntryRefund, 0), At: at})
	}
	return out, entries, nil
}

// TransferEntry records a provider's payout as it is sent: amount from the
// provider's account to the platform's cash, with the processor's transfer.
// A zero payout makes no entry (nothing is sent).
func TransferEntry(reservationID, providerID int64, amount Cents, transferRef string, at time.Time) []LedgerEntry {
	if amount <= 0 {
		return nil
	}
	return []LedgerEntry{{ReservationID: reservationID, Kind: EntryTransfer, Debit: ProviderAccount(providerID), Credit: AccountPlatformCash,
		Amount: amount, StripeRef: transferRef, IdempotencyKey: EntryKey(reservationID, EntryTransfer, providerID), At: at}}
}

// CancellationFees is, per piece of r in order, the fee a buyer forfeits by
// cancelling at now (see CancellationFee): a piece inside its offer's
// free-cancellation period keeps Share(amount, CancelFeeBP), others nothing.
func CancellationFees(r Reservation, now time.Time) ([]Cents, error) {
	switch r.State {
	case ReservationHeld:
		return make([]Cents, len(r.Pieces)), nil
	case ReservationConfirmed:
	default:
		return nil, Errorf(CodeConflict, "%s reservation cannot be cancelled.", r.State.LabelWithArticle())
	}
	out := make([]Cents, len(r.Pieces))
	for i, p := range r.Pieces {
		if !now.Before(p.Start) {
			return nil, Errorf(CodeConflict, "This reservation has started and can no longer be cancelled.")
		}
		if p.Start.Sub(now) < time.Duration(p.FreeCancelHours)*time.Hour {
			out[i] = Share(p.AmountCents, p.CancelFeeBP)
		}
	}
	return out, nil
}

// CancellationStatement settles a paid reservation that the buyer cancelled
// at now: per piece the buyer is refunded what was paid less the piece's
// cancellation fee (CancellationFees), the provider keeps the fee, and the
// platform fee is taken from what the provider keeps exactly as at the end
// of a booking (PlatformFee per provider). r is the reservation as it was
// when cancelled (confirmed, not started).
func CancellationStatement(r Reservation, now time.Time, feeBP int) (Statement, error) {
	if feeBP < 0 || feeBP > 10000 {
		return Statement{}, Errorf(CodeInvalid, "The platform fee must be between 0%% and 100%%.")
	}
	fees, err := CancellationFees(r, now)
	if err != nil {
		return Statement{}, err
	}
	st := Statement{ReservationID: r.ID, BuyerID: r.BuyerID, PlatformFeeBP: feeBP, Cancelled: true, CancelledAt: now.UTC()}
	for i, p := range r.Pieces {
		if p.AmountCents < 0 {
			return Statement{}, Errorf(CodeInvalid, "Piece %d has a negative amount.", p.ID)
		}
		ps := PieceStatement{PieceID: p.ID, OfferID: p.OfferID, ProviderID: p.ProviderID, Devices: p.Devices,
			Start: p.Start, End: p.End, Paid: p.AmountCents, UptimeBP: 10000}
		label := "Cancelled free of charge: refunded in full"
		if fees[i] > 0 {
			label = fmt.Sprintf("Cancelled %s before the start, inside the %d-hour free period: %s%% cancellation fee kept",
				formatHours(p.Start.Sub(now)), p.FreeCancelHours, FormatPercentBP(p.CancelFeeBP))
		}
		ps.Clauses = []Clause{{Kind: ClauseCancellation, Label: label, RateBP: 10000 - p.CancelFeeBP*boolBP(fees[i] > 0), Cents: p.AmountCents - fees[i]}}
		ps.NotCharged = p.AmountCents - fees[i]
		ps.Refund = ps.NotCharged
		ps.Kept = fees[i]
		st.Pieces = append(st.Pieces, ps)
		st.Paid += ps.Paid
		st.NotCharged += ps.NotCharged
		st.Refund += ps.Refund
		st.Kept += ps.Kept
	}
	st.UptimeBP = 10000
	st.applyProviderFees()
	return st, nil
}

func boolBP(b bool) int {
	if b {
		return 1
	}
	return 0
}

// formatHours writes a duration as whole hours and minutes, e.g. "5h 30m".
func formatHours(d time.Duration) string {
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh %02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

// ChargebackEntries records a chargeback when the processor reports it: the
// buyer's bank took amount back from the platform's cash (chargeback: Dr
// buyer, Cr cash), with the processor's dispute as reference. Until the
// dispute is decided the buyer's account shows what the bank returned.
func ChargebackEntries(reservationID, disputeID, buyerID int64, amount Cents, processorDisputeID string, at time.Time) []LedgerEntry {
	if amount <= 0 {
		return nil
	}
	return []LedgerEntry{{ReservationID: reservationID, Kind: EntryChargeback, Debit: BuyerAccount(buyerID), Credit: AccountPlatformCash,
		Amount: amount, StripeRef: processorDisputeID, IdempotencyKey: DisputeKey(disputeID, EntryChargeback, 0), At: at}}
}

// ChargebackLossEntries records the decision on a chargeback of amount:
// what the providers bear (credit, applied by ApplyDisputeCredit with
// chargeback set) comes from their payouts, and the rest of what the bank
// took is the platform's loss (loss: Dr losses, Cr buyer), so the buyer's
// account closes at zero.
func ChargebackLossEntries(reservationID, disputeID, buyerID int64, amount, credit Cents, at time.Time) []LedgerEntry {
	if amount-credit <= 0 {
		return nil
	}
	return []LedgerEntry{{ReservationID: reservationID, Kind: EntryLoss, Debit: AccountPlatformLosses, Credit: BuyerAccount(buyerID),
		Amount: amount - credit, IdempotencyKey: DisputeKey(disputeID, EntryLoss, 0), At: at}}
}

// ChargebackReversalEntries records a chargeback the platform won before
// anything was decided on it: the bank returns the money (Dr cash, Cr
// buyer), which closes the buyer's account the chargeback opened.
func ChargebackReversalEntries(reservationID, disputeID, buyerID int64, amount Cents, processorDisputeID string, at time.Time) []LedgerEntry {
	if amount <= 0 {
		return nil
	}
	return []LedgerEntry{{ReservationID: reservationID, Kind: EntryChargebackReversal, Debit: AccountPlatformCash, Credit: BuyerAccount(buyerID),
		Amount: amount, StripeRef: processorDisputeID, IdempotencyKey: DisputeKey(disputeID, EntryChargebackReversal, 0), At: at}}
}
