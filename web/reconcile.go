package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// Difference is one way the ledger and the processor disagree, or the
// ledger disagrees with itself.
type Difference struct {
	ReservationID int64 // 0 for the ledger as a whole
	What          string
	Ledger        string
	Processor     string
}

// ReconcileOptions controls Reconcile.
type ReconcileOptions struct {
	// LedgerOnly skips retrieving processor objects (the local test
	// processor of another process remembers none).
	LedgerOnly bool
}

// Reconcile compares the ledger with the processor objects it references
// and lists every difference: per payment intent the charges against the
// amount received, per refund and transfer the amount (and the account and
// transfer group) against the processor's object, the processor's reported
// refund total against the ledger's refunds, and the ledger's own checks —
// every reservation balances, and every settled one leaves nothing owed.
func Reconcile(ctx context.Context, db *store.DB, pay billing.Processor, opts ReconcileOptions) ([]Difference, error) {
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
	var out []Difference
	add := func(id int64, what, ledger, processor string) {
		out = append(out, Difference{ReservationID: id, What: what, Ledger: ledger, Processor: processor})
	}
	if err := market.CheckBalanced(entries); err != nil {
		add(0, "ledger does not balance", err.Error(), "")
	}
	for _, s := range settlements {
		if s.State == store.SettlementDone {
			if err := market.CheckSettled(entries, s.ReservationID); err != nil {
				add(s.ReservationID, "settled but accounts left open", err.Error(), "")
			}
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
	}
	if opts.LedgerOnly {
		return out, nil
	}
	for pi, amount := range charged {
		if pi == "" {
			add(chargeRes[pi], "charge without a payment reference", amount.String(), "")
			continue
		}
		p, err := pay.RetrievePayment(ctx, pi)
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
			r, err := pay.RetrieveRefund(ctx, e.StripeRef)
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
			t, err := pay.RetrieveTransfer(ctx, e.StripeRef)
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

// remoteError is a processor error as a reconciliation line: the safe
// message of a market error, else the error's text (admins only).
func remoteError(err error) string {
	var me *market.Error
	if errors.As(err, &me) {
		return me.Message
	}
	return err.Error()
}

func (h *Handler) handleAdminReconciliation(c echo.Context) error {
	ctx := c.Request().Context()
	diffs, err := Reconcile(ctx, h.db, h.pay, ReconcileOptions{})
	if err != nil {
		return err
	}
	v := views.ReconciliationView{Simulated: h.simulated(), Checked: "Checked " + formatTime(h.now()) + "."}
	for _, d := range diffs {
		res := "ledger"
		if d.ReservationID != 0 {
			res = "#" + strconv.FormatInt(d.ReservationID, 10)
		}
		v.Differences = append(v.Differences, views.ReconciliationRow{Reservation: res, What: d.What, Ledger: d.Ledger, Processor: d.Processor})
	}
	ss, err := h.db.ListSettlements(ctx)
	if err != nil {
		return err
	}
	for _, s := range ss {
		if s.State == store.SettlementDone {
			continue
		}
		row := views.SettlementAdminRow{ReservationID: strconv.FormatInt(s.ReservationID, 10), State: settlementAdminState(s),
			Attempts: strconv.Itoa(s.Attempts), NextAttempt: formatTime(s.NextAttemptAt), LastError: s.LastError}
		if s.State == store.SettlementFailed {
			row.RetryURL = fmt.Sprintf("/admin/settlements/%d/retry", s.ReservationID)
		}
		v.Settlements = append(v.Settlements, row)
	}
	ds, err := h.db.ListOpenDisputes(ctx)
	if err != nil {
		return err
	}
	for _, d := range ds {
		v.Disputes = append(v.Disputes, fmt.Sprintf("#%d on reservation %d (%s, %s): %s", d.ID, d.ReservationID, d.Source, formatTime(d.CreatedAt), d.Statement))
	}
	return render(c, http.StatusOK, views.Reconciliation(h.page(c, "Reconciliation"), v))
}

func settlementAdminState(s store.Settlement) string {
	var parts []string
	for _, t := range s.Transfers {
		if t.State != store.TransferDone {
			parts = append(parts, fmt.Sprintf("provider %d %s", t.ProviderID, t.State))
		}
	}
	out := string(s.State)
	if !s.RefundDone {
		out += ", refund pending"
	}
	if len(parts) > 0 {
		out += ", " + strings.Join(parts, ", ")
	}
	return out
}

func (h *Handler) handleAdminSettlementRetry(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.db.RetrySettlement(c.Request().Context(), id, h.now()); err != nil {
		return err
	}
	logger(c).Info("settlement retry requested", "reservation_id", id, "admin_id", currentUser(c).ID)
	h.setFlash(c, "ok", fmt.Sprintf("Settlement of reservation %d will be retried on the next run.", id))
	return c.Redirect(http.StatusSeeOther, "/admin/reconciliation")
}
