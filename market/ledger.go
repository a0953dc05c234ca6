package market

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Ledger entry kinds: every movement of money the platform records.
const (
	EntryCharge   = "charge"   // the buyer paid at booking
	EntryCredit   = "credit"   // part of a provider's takings goes back to the buyer (SLA credits, time not charged)
	EntryRefund   = "refund"   // money returned to the buyer's card
	EntryFee      = "fee"      // the platform's fee out of a provider's takings
	EntryTransfer = "transfer" // money paid out to the provider's connected account
	// EntryLoss is a credit to the buyer that the platform bears (a dispute
	// credit no provider payout is left to cover).
	EntryLoss = "loss"
	// EntryFeeReversal gives a provider back the part of the platform fee
	// that a dispute credit removed from what they keep.
	EntryFeeReversal = "fee_reversal"
	// EntryChargeback is money the buyer's bank took back (Dr buyer, Cr cash);
	// EntryChargebackReversal is that money returned when the platform won.
	EntryChargeback         = "chargeback"
	EntryChargebackReversal = "chargeback_reversal"
	// EntryResale passes what a buyer paid for resold time to its seller
	// (Dr the buyer's account, Cr the seller's; see ResaleEntries).
	EntryResale = "resale"
	// EntryReplacement pays a replacement's provider, out of what the
	// buyer paid the failing provider for the remaining time and the
	// failing provider's share (Dr the failing provider's account, Cr the
	// replacement's; see replace.go).
	EntryReplacement = "replacement"
)

// Platform accounts. Buyers and providers have one account each, named by
// BuyerAccount and ProviderAccount.
//
//   - platform:cash is the platform's Stripe balance (an asset: debits are
//     money in).
//   - platform:fees is the platform's fee income.
//   - platform:losses is what the platform bore itself (an expense: debits
//     are losses), such as a dispute credit no payout was left to cover.
//   - provider:<id> is what the platform owes a provider; buyer:<id> what it
//     owes a buyer.
//
// A charge credits the providers with what the buyer paid for their pieces
// (Dr cash, Cr provider). Settlement moves refunds from the provider to the
// buyer (credit: Dr provider, Cr buyer), pays them out (refund: Dr buyer,
// Cr cash), takes the fee (fee: Dr provider, Cr fees) and pays the provider
// (transfer: Dr provider, Cr cash). After settlement every buyer and
// provider account of the reservation is at zero and the cash left is the
// fee.
const (
	AccountPlatformCash   = "platform:cash"
	AccountPlatformFees   = "platform:fees"
	AccountPlatformLosses = "platform:losses"
)

// BuyerAccount names a buyer's ledger account, e.g. "buyer:12".
func BuyerAccount(userID int64) string { return "buyer:" + strconv.FormatInt(userID, 10) }

// ProviderAccount names a provider's ledger account, e.g. "provider:7".
func ProviderAccount(userID int64) string { return "provider:" + strconv.FormatInt(userID, 10) }

// TransferGroup is the Stripe transfer group tying a reservation's charge to
// its transfers: "res_<id>".
func TransferGroup(reservationID int64) string { return "res_" + strconv.FormatInt(reservationID, 10) }

// BuyerRefund is the ledger entry of money returned to a buyer's card from
// the platform's cash (Dr the buyer, Cr cash), under the key of the step
// that makes the refund and the processor's reference.
func BuyerRefund(reservationID, buyerID int64, amount Cents, stripeRef, key string, at time.Time) LedgerEntry {
	return LedgerEntry{ReservationID: reservationID, Kind: EntryRefund, Debit: BuyerAccount(buyerID), Credit: AccountPlatformCash,
		Amount: amount, StripeRef: stripeRef, IdempotencyKey: key, At: at}
}

// EntryKey is the idempotency key of one step of a reservation's money
// movements: "res_12_refund", "res_12_transfer_p7" (with a provider). The
// same key goes on the ledger row and on the Stripe call that makes the
// movement, so a retried step never moves money twice.
func EntryKey(reservationID int64, kind string, providerID int64) string {
	k := TransferGroup(reservationID) + "_" + kind
	if providerID != 0 {
		k += "_p" + strconv.FormatInt(providerID, 10)
	}
	return k
}

// LedgerEntry is one double-entry movement: Amount moves from the Credit
// account to the Debit account. Amount is always positive.
type LedgerEntry struct {
	ReservationID  int64
	Kind           string // one of the Entry kinds above
	Debit, Credit  string // account names
	Amount         Cents
	StripeRef      string // the Stripe object behind the movement (payment intent, refund, transfer), if any
	IdempotencyKey string // unique per movement; see EntryKey
	At             time.Time
}

// EntryKindLabel names a ledger entry kind in words: "Refund",
// "Platform fee given back".
func EntryKindLabel(kind string) string {
	switch kind {
	case EntryCharge:
		return "Payment"
	case EntryCredit:
		return "Credit to the buyer"
	case EntryRefund:
		return "Refund"
	case EntryFee:
		return "Platform fee"
	case EntryTransfer:
		return "Payout"
	case EntryLoss:
		return "Credit borne by the platform"
	case EntryFeeReversal:
		return "Platform fee given back"
	case EntryChargeback:
		return "Chargeback"
	case EntryChargebackReversal:
		return "Chargeback reversed"
	case EntryResale:
		return "Resale"
	case EntryReplacement:
		return "Replacement after a host failure"
	}
	return "Money movement"
}

// Describe says in words what an entry did, the way the money went, for
// the holder of account reader ("you", "your"), or for the platform's
// staff when reader is "" (parties named "buyer #3", "provider #7").
// A ledger's Debit and Credit are the accountant's view — a charge
// credits the provider the platform now owes — so people read this
// instead: "Paid by the buyer, owed to you".
func (e LedgerEntry) Describe(reader string) string {
	who := func(acct string) string {
		switch {
		case acct == reader:
			return "you"
		case acct == AccountPlatformCash:
			return "the platform's balance"
		case acct == AccountPlatformFees:
			return "the platform's fees"
		case acct == AccountPlatformLosses:
			return "the platform"
		case strings.HasPrefix(acct, "buyer:"):
			if reader != "" {
				return "the buyer"
			}
			return "buyer #" + strings.TrimPrefix(acct, "buyer:")
		case strings.HasPrefix(acct, "provider:"):
			if reader != "" {
				return "the provider"
			}
			return "provider #" + strings.TrimPrefix(acct, "provider:")
		}
		return acct
	}
	whose := func(acct string) string {
		if w := who(acct); w != "you" {
			return w + "'s"
		}
		return "your"
	}
	switch e.Kind {
	case EntryCharge:
		return "Paid by the buyer, owed to " + who(e.Credit)
	case EntryCredit:
		return "Credit from " + whose(e.Debit) + " takings to " + who(e.Credit)
	case EntryRefund:
		return "Refund to " + whose(e.Debit) + " card"
	case EntryFee:
		return "Platform fee from " + whose(e.Debit) + " takings"
	case EntryFeeReversal:
		return "Platform fee given back to " + who(e.Credit)
	case EntryTransfer:
		return "Payout to " + whose(e.Debit) + " bank account"
	case EntryLoss:
		return "Credit to " + who(e.Credit) + ", borne by the platform"
	case EntryChargeback:
		return "Taken back by " + whose(e.Debit) + " bank (chargeback)"
	case EntryChargebackReversal:
		return "Chargeback reversed: returned by " + whose(e.Credit) + " bank"
	case EntryResale:
		return "Resold time: paid by " + who(e.Debit) + " to " + who(e.Credit)
	case EntryReplacement:
		switch reader {
		case e.Credit:
			return "Paid for your replacement of another provider's failed piece, from their takings"
		case e.Debit:
			return "Paid for the replacement of your failed piece, from your takings to its provider"
		}
		return "Paid for a replacement: from " + whose(e.Debit) + " takings to " + who(e.Credit)
	}
	return e.Kind
}

// ChargeEntries records the buyer's payment of a reservation: one charge per
// provider for the amount of their pieces, each referencing the payment
// intent.
func ChargeEntries(r Reservation, paymentIntentID string, at time.Time) ([]LedgerEntry, error) {
	byProvider := map[int64]Cents{}
	var sum Cents
	for _, p := range r.Pieces {
		if p.AmountCents < 0 {
			return nil, Errorf(CodeInvalid, "Piece %d has a negative amount.", p.ID)
		}
		byProvider[p.ProviderID] += p.AmountCents
		sum += p.AmountCents
	}
	if sum != r.AmountCents {
		return nil, Errorf(CodeInvalid, "The reservation amount %s is not the sum of its pieces (%s).", r.AmountCents, sum)
	}
	var out []LedgerEntry
	for _, id := range ledgerSortedIDs(byProvider) {
		if byProvider[id] == 0 {
			continue
		}
		out = append(out, LedgerEntry{
			ReservationID: r.ID, Kind: EntryCharge, Debit: AccountPlatformCash, Credit: ProviderAccount(id),
			Amount: byProvider[id], StripeRef: paymentIntentID, IdempotencyKey: EntryKey(r.ID, EntryCharge, id), At: at,
		})
	}
	return out, nil
}

// SettlementEntries records a settlement statement: per provider the credit
// back to the buyer, the platform fee and the transfer; then the one refund
// to the buyer (less a resale credit, passed on to the holder of the
// resold hours: resale, Dr buyer, Cr that holder). Zero amounts make no entry. StripeRef is empty: the caller
// fills it in for the refund and transfers with the ids Stripe returns.
func SettlementEntries(s Statement, at time.Time) []LedgerEntry {
	refunds := map[int64]Cents{}
	for _, p := range s.Pieces {
		refunds[p.ProviderID] += p.Refund
	}
	buyer := BuyerAccount(s.BuyerID)
	var out []LedgerEntry
	add := func(kind, debit, credit string, amount Cents, provider int64) {
		if amount > 0 {
			out = append(out, LedgerEntry{ReservationID: s.ReservationID, Kind: kind, Debit: debit, Credit: credit,
				Amount: amount, IdempotencyKey: EntryKey(s.ReservationID, kind, provider), At: at})
		}
	}
	for _, pp := range s.Payouts() {
		prov := ProviderAccount(pp.ProviderID)
		add(EntryCredit, prov, buyer, refunds[pp.ProviderID], pp.ProviderID)
		add(EntryFee, prov, AccountPlatformFees, pp.Fee, pp.ProviderID)
	}
	if s.ResaleCredit > 0 {
		// The resold hours' credits pass to their holder, refunded on
		// their own payment (ResaleSLARefundEntry).
		out = append(out, LedgerEntry{ReservationID: s.ReservationID, Kind: EntryResale, Debit: buyer, Credit: BuyerAccount(s.ResaleBuyerID),
			Amount: s.ResaleCredit, IdempotencyKey: ResaleKey(s.ResaleListingID, "sla_credit"), At: at})
	}
	add(EntryRefund, buyer, AccountPlatformCash, s.Refund-s.ResaleCredit, 0)
	for _, pp := range s.Payouts() {
		add(EntryTransfer, ProviderAccount(pp.ProviderID), AccountPlatformCash, pp.Payout, pp.ProviderID)
	}
	return out
}

// Balance sums entries per account: debits count positive, credits
// negative. The balances of any set of entries add up to zero.
func Balance(entries []LedgerEntry) map[string]Cents {
	b := map[string]Cents{}
	for _, e := range entries {
		b[e.Debit] += e.Amount
		b[e.Credit] -= e.Amount
	}
	return b
}

// CheckBalanced checks that every entry is well formed (a reservation, a
// known kind, two different accounts, a positive amount), that no
// idempotency key is used twice, and that every reservation's debits equal
// its credits. It reports every problem found.
func CheckBalanced(entries []LedgerEntry) error {
	var errs []error
	keys := map[string]bool{}
	debits, credits := map[int64]Cents{}, map[int64]Cents{}
	for i, e := range entries {
		switch {
		case e.ReservationID <= 0:
			errs = append(errs, fmt.Errorf("entry %d: no reservation", i))
		case !knownEntryKind(e.Kind):
			errs = append(errs, fmt.Errorf("entry %d: unknown kind %q", i, e.Kind))
		case e.Debit == "" || e.Credit == "" || e.Debit == e.Credit:
			errs = append(errs, fmt.Errorf("entry %d: needs two different accounts, got %q and %q", i, e.Debit, e.Credit))
		case e.Amount <= 0:
			errs = append(errs, fmt.Errorf("entry %d: amount %d is not positive", i, e.Amount))
		}
		if e.IdempotencyKey != "" {
			if keys[e.IdempotencyKey] {
				errs = append(errs, fmt.Errorf("entry %d: idempotency key %q used twice", i, e.IdempotencyKey))
			}
			keys[e.IdempotencyKey] = true
		}
		debits[e.ReservationID] += e.Amount
		credits[e.ReservationID] += e.Amount
	}
	for _, id := range ledgerSortedIDs(debits) {
		if debits[id] != credits[id] {
			errs = append(errs, fmt.Errorf("reservation %d: debits %d != credits %d", id, debits[id], credits[id]))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("market: ledger does not balance: %w", errors.Join(errs...))
	}
	return nil
}

// CheckSettled checks that a settled reservation's entries leave nothing
// owed: every buyer and provider account at zero, and the cash kept equal
// to the fee income less the platform's losses. It checks CheckBalanced first.
func CheckSettled(entries []LedgerEntry, reservationID int64) error {
	var mine []LedgerEntry
	for _, e := range entries {
		if e.ReservationID == reservationID {
			mine = append(mine, e)
		}
	}
	if err := CheckBalanced(mine); err != nil {
		return err
	}
	b := Balance(mine)
	var errs []error
	accounts := make([]string, 0, len(b))
	for a := range b {
		accounts = append(accounts, a)
	}
	sort.Strings(accounts)
	for _, a := range accounts {
		if (strings.HasPrefix(a, "buyer:") || strings.HasPrefix(a, "provider:")) && b[a] != 0 {
			errs = append(errs, fmt.Errorf("%s is owed %s", a, -b[a]))
		}
	}
	if b[AccountPlatformCash] != -b[AccountPlatformFees]-b[AccountPlatformLosses] {
		errs = append(errs, fmt.Errorf("cash kept %s differs from fees %s less losses %s", b[AccountPlatformCash], -b[AccountPlatformFees], b[AccountPlatformLosses]))
	}
	if len(errs) > 0 {
		return fmt.Errorf("market: reservation %d is not settled: %w", reservationID, errors.Join(errs...))
	}
	return nil
}

func knownEntryKind(k string) bool {
	switch k {
	case EntryCharge, EntryCredit, EntryRefund, EntryFee, EntryTransfer, EntryLoss, EntryFeeReversal,
		EntryChargeback, EntryChargebackReversal, EntryResale, EntryReplacement:
		return true
	}
	return false
}

func ledgerSortedIDs[V any](m map[int64]V) []int64 {
	ids := make([]int64, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	return ids
}
