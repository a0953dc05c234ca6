package workflow

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Difference is one way the ledger and the processor disagree, the ledger
// disagrees with itself, or money is owed that has not moved.
type Difference struct {
	ReservationID int64 // 0 for the ledger as a whole
	What          string
	Ledger        string
	Processor     string
}

// ReconcileOptions controls Reconcile.
type ReconcileOptions struct {
	// LedgerOnly skips retrieving processor objects.
	LedgerOnly bool
}

// Reconcile lists every difference, each a reason for `gpumarket reconcile`
// to exit non-zero:
//
//   - the ledger's own checks: every reservation balances; every finished
//     settlement (a settled reservation, or a cancelled paid one) leaves
//     nothing owed;
//   - money owed and not moved: a paid reservation that was cancelled or
//     expired and is not refunded, a settlement that failed, a late or
//     mismatched payment not refunded, a granted dispute credit not
//     refunded;
//   - balances and metered rentals (reconcileMetered): per buyer balance =
//     top-ups − draws − refunds, per rental draws = minutes × price;
//   - charges recorded before they were made and not finished past their
//     grace (market.ChargeIntent): money may have moved unrecorded;
//   - the processor's objects: per payment intent the charges against the
//     amount received, per refund and transfer the amount (and the account
//     and transfer group), the processor's reported refund total against
//     the ledger's refunds; and every succeeded payment, refund and
//     transfer the processor lists that no ledger entry explains.
func (s *Service) Reconcile(ctx context.Context, opts ReconcileOptions) ([]Difference, error) {
	db := s.db
	entries, err := db.ListAllLedger(ctx)
	if err != nil {
		return nil, err
	}
	payments, err := db.ListPayments(ctx)
	if err != nil {
		return nil, err
	}
	settlements, err := db.ListSettlements(ctx)
	if err != nil {
		return nil, err
	}
	exceptions, err := db.ListPaymentExceptions(ctx)
	if err != nil {
		return nil, err
	}
	pendingDisputes, err := db.ListPendingDisputeRefunds(ctx)
	if err != nil {
		return nil, err
	}
	var out []Difference
	add := func(id int64, what, ledger, processor string) {
		out = append(out, Difference{ReservationID: id, What: what, Ledger: ledger, Processor: processor})
	}
	if err := market.CheckBalanced(entries); err != nil {
		add(0, "ledger does not balance", err.Error(), "")
	}
	settled := map[int64]store.Settlement{}
	for _, st := range settlements {
		settled[st.ReservationID] = st
		switch st.State {
		case store.SettlementDone:
			if err := market.CheckSettled(entries, st.ReservationID); err != nil {
				add(st.ReservationID, "settled but accounts left open", err.Error(), "")
			}
		case store.SettlementFailed:
			add(st.ReservationID, "settlement failed: money owed has not moved", st.LastError, "")
		}
	}
	charged := map[string]market.Cents{}
	chargeRes := map[string]int64{}
	refundedByRes := map[int64]market.Cents{}
	for _, e := range entries {
		switch e.Kind {
		case market.EntryCharge:
			charged[e.StripeRef] += e.Amount
			chargeRes[e.StripeRef] = e.ReservationID
		case market.EntryRefund:
			refundedByRes[e.ReservationID] += e.Amount
		}
	}
	for _, p := range payments {
		paid := p.Status == store.PaymentPaid || p.Status == store.PaymentRefundPending || p.Status == store.PaymentRefunded
		if paid && charged[p.PaymentIntentID] != p.Amount {
			add(p.ReservationID, "payment recorded but charge entries differ", charged[p.PaymentIntentID].String(), p.Amount.String())
		}
		if p.RefundedCents != 0 && p.RefundedCents != refundedByRes[p.ReservationID] {
			add(p.ReservationID, "processor reports a different refund total", refundedByRes[p.ReservationID].String(), p.RefundedCents.String())
		}
		if p.Status == store.PaymentRefundPending {
			add(p.ReservationID, "late payment not refunded yet", p.Amount.String(), p.LastError)
		}
		if p.Status == store.PaymentPaid {
			r, err := db.FindReservation(ctx, p.ReservationID)
			if err != nil {
				return nil, err
			}
			st, ok := settled[r.ID]
			switch {
			case (r.State == market.ReservationCancelled || r.State == market.ReservationExpired) && !ok:
				add(r.ID, fmt.Sprintf("paid reservation %s but never settled or refunded", r.State), p.Amount.String(), "")
			case (r.State == market.ReservationCancelled || r.State == market.ReservationExpired) && !st.RefundDone:
				add(r.ID, fmt.Sprintf("paid reservation %s, refund not made yet", r.State), st.RefundCents.String(), st.LastError)
			}
		}
	}
	for _, e := range exceptions {
		if e.State == store.PaymentRefundPending {
			add(e.ReservationID, "mismatched payment "+e.PaymentIntentID+" not refunded yet ("+e.Reason+")", e.Amount.String()+" "+e.Currency, e.LastError)
		}
	}
	for _, d := range pendingDisputes {
		add(d.ReservationID, fmt.Sprintf("dispute %d credit granted but not refunded yet", d.ID), d.CreditCents.String(), "")
	}
	// Resale (resale.go): sellers' credits and unsold payments not yet refunded.
	credits, err := db.ListPendingResaleCredits(ctx)
	if err != nil {
		return nil, err
	}
	for _, c := range credits {
		add(c.Listing.ReservationID, fmt.Sprintf("resale listing %d: seller's credit not refunded yet", c.Listing.ID), c.Listing.Credit.String(), c.Listing.LastError)
	}
	slaCredits, err := db.ListDueResaleSLACredits(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	for _, c := range slaCredits {
		add(c.Listing.ReservationID, fmt.Sprintf("resale listing %d: SLA credit of the resold hours not refunded yet", c.Listing.ID), c.Amount.String(), c.Listing.LastError)
	}
	unsold, err := db.ListDueResaleRefunds(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	for _, f := range unsold {
		add(f.ReservationID, fmt.Sprintf("resale listing %d: unsold payment %s not refunded yet", f.ListingID, f.PaymentIntentID), f.Amount.String(), f.LastError)
	}
	// Replaced rentals (replace.go): paid = delivered + replacement + refunds.
	replaced, err := s.reconcileReplacements(ctx, entries)
	if err != nil {
		return nil, err
	}
	out = append(out, replaced...)
	// Charges recorded before they were made (charge.go) and not finished
	// past their grace: money may have moved with no outcome recorded.
	intents, err := db.ListDueChargeIntents(ctx, time.Time{})
	if err != nil {
		return nil, err
	}
	for _, ci := range intents {
		if s.now().Sub(ci.CreatedAt) < market.ChargeRetryGrace {
			continue // being made right now
		}
		add(ci.ReservationID, fmt.Sprintf("charge %d (%s, %s) recorded but not finished after %d attempts", ci.ID, ci.Purpose, ci.Amount, ci.Attempts),
			ci.Amount.String(), ci.LastError)
	}
	// Spot holds on a buyer's card that no clearing will capture and that
	// are not released yet (releaseSpotHolds tries each tick).
	holds, err := db.ListSpotAuthorizationsToRelease(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range holds {
		if s.now().Sub(a.CreatedAt) < market.ChargeRetryGrace {
			continue // being released right now
		}
		add(0, fmt.Sprintf("spot hold %d (bid %d, %s) not released after its hour cleared", a.ID, a.BidID, a.Hour.Format(time.RFC3339)),
			a.Amount.String(), a.PaymentIntentID)
	}
	// Balances and metered rentals (metered.go).
	metered, balanceRefs, err := s.reconcileMetered(ctx, opts.LedgerOnly)
	if err != nil {
		return nil, err
	}
	out = append(out, metered...)
	if opts.LedgerOnly {
		return out, nil
	}
	unexplained, err := s.unexplainedProcessorObjects(ctx, entries, intents, balanceRefs)
	if err != nil {
		return nil, err
	}
	out = append(out, unexplained...)
	for pi, amount := range charged {
		if pi == "" {
			add(chargeRes[pi], "charge without a payment reference", amount.String(), "")
			continue
		}
		p, err := s.pay.RetrievePayment(ctx, pi)
		switch {
		case err != nil:
			add(chargeRes[pi], "payment "+pi+" cannot be retrieved", amount.String(), remoteError(err))
		case !p.Succeeded:
			add(chargeRes[pi], "payment "+pi+" has not succeeded", amount.String(), p.Status)
		case p.AmountReceived != amount:
			add(chargeRes[pi], "payment "+pi+" amount differs", amount.String(), p.AmountReceived.String())
		}
	}
	for _, e := range entries {
		switch {
		case e.Kind == market.EntryRefund:
			if e.StripeRef == "" {
				add(e.ReservationID, "refund without a processor reference", e.Amount.String(), "")
				continue
			}
			r, err := s.pay.RetrieveRefund(ctx, e.StripeRef)
			switch {
			case err != nil:
				add(e.ReservationID, "refund "+e.StripeRef+" cannot be retrieved", e.Amount.String(), remoteError(err))
			case r.Amount != e.Amount:
				add(e.ReservationID, "refund "+e.StripeRef+" amount differs", e.Amount.String(), r.Amount.String())
			case r.Status == "failed" || r.Status == "canceled":
				add(e.ReservationID, "refund "+e.StripeRef+" did not go through", e.Amount.String(), r.Status)
			}
		case e.Kind == market.EntryTransfer:
			if e.StripeRef == "" {
				add(e.ReservationID, "transfer without a processor reference", e.Amount.String(), "")
				continue
			}
			t, err := s.pay.RetrieveTransfer(ctx, e.StripeRef)
			switch {
			case err != nil:
				add(e.ReservationID, "transfer "+e.StripeRef+" cannot be retrieved", e.Amount.String(), remoteError(err))
			case t.Amount != e.Amount:
				add(e.ReservationID, "transfer "+e.StripeRef+" amount differs", e.Amount.String(), t.Amount.String())
			case t.TransferGroup != "" && t.TransferGroup != market.TransferGroup(e.ReservationID):
				add(e.ReservationID, "transfer "+e.StripeRef+" is in another transfer group", market.TransferGroup(e.ReservationID), t.TransferGroup)
			}
		}
	}
	return out, nil
}

// unexplainedProcessorObjects lists the processor's succeeded payments,
// refunds and transfers that no row explains: none of the ledger's entries
// references them, and no pending charge (reported on its own) made them.
// A charge made outside the record — the crash window the charge intents
// close — shows up here.
func (s *Service) unexplainedProcessorObjects(ctx context.Context, entries []market.LedgerEntry, pending []market.ChargeIntent, balanceRefs map[string]bool) ([]Difference, error) {
	known := map[string]bool{}
	for ref := range balanceRefs { // top-ups, balance refunds, metered payouts
		known[ref] = true
	}
	for _, e := range entries {
		if e.StripeRef != "" {
			known[e.StripeRef] = true
		}
	}
	pendingIntent := map[int64]bool{}
	for _, ci := range pending {
		pendingIntent[ci.ID] = true
		if ci.PaymentIntentID != "" {
			known[ci.PaymentIntentID] = true
		}
	}
	var out []Difference
	payments, err := s.pay.ListPayments(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("workflow: reconcile: list processor payments: %w", err)
	}
	for _, p := range payments {
		if !p.Succeeded || known[p.ID] || pendingIntent[market.ChargeIntentID(p.Metadata)] {
			continue
		}
		what := "processor payment " + p.ID + " is recorded nowhere"
		if id := market.ChargeIntentID(p.Metadata); id != 0 {
			what += fmt.Sprintf(" (made for charge %d)", id)
		}
		out = append(out, Difference{ReservationID: p.ReservationID, What: what, Processor: p.AmountReceived.String()})
	}
	refunds, err := s.pay.ListRefunds(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("workflow: reconcile: list processor refunds: %w", err)
	}
	for _, r := range refunds {
		if known[r.ID] || r.Status == "failed" || r.Status == "canceled" {
			continue
		}
		out = append(out, Difference{What: "processor refund " + r.ID + " of payment " + r.PaymentIntentID + " is recorded nowhere", Processor: r.Amount.String()})
	}
	transfers, err := s.pay.ListTransfers(ctx, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("workflow: reconcile: list processor transfers: %w", err)
	}
	for _, t := range transfers {
		if known[t.ID] {
			continue
		}
		out = append(out, Difference{What: "processor transfer " + t.ID + " to " + t.AccountID + " is recorded nowhere", Processor: t.Amount.String()})
	}
	return out, nil
}

// remoteError is a processor error as a reconciliation line: the safe
// message of a market error, else the error's text (admins only).
func remoteError(err error) string {
	var me *market.Error
	if errors.As(err, &me) {
		return me.Message
	}
	return err.Error()
}
