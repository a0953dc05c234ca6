package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// settlementNote writes, for a buyer (providerID 0) or a provider, where
// the reservation's settlement stands, and reports whether it has started.
func (h *Handler) settlementNote(ctx context.Context, reservationID, providerID int64, note *string) bool {
	s, err := h.db.FindSettlement(ctx, reservationID)
	if err != nil {
		if market.ErrorCode(err) != market.CodeNotFound {
			h.log.Error("find settlement", "reservation_id", reservationID, "err", err)
		}
		return false
	}
	*note = settlementStateText(s, providerID)
	return true
}

func settlementStateText(s store.Settlement, providerID int64) string {
	switch s.State {
	case store.SettlementDone:
		return "Settled on " + formatTime(s.SettledAt) + "."
	case store.SettlementPending:
		if s.Attempts > 0 {
			return "Settlement pending: retrying (the payment processor did not answer; nothing is lost and nothing is paid twice)."
		}
		return "Settlement in progress."
	case store.SettlementFailed:
		return "Settlement pending: the marketplace's team is looking into a problem with the payment processor."
	case store.SettlementWaiting:
		for _, t := range s.Transfers {
			if providerID != 0 && t.ProviderID != providerID {
				continue
			}
			if t.State == store.TransferHeld {
				if providerID != 0 {
					return "Refund made. Your payout is held until you connect payouts on the Bookings page; it is released automatically then."
				}
				return "Refund made. The provider's payout is held until they finish connecting payouts."
			}
			if t.State == store.TransferFrozen {
				return "Refund made. The provider's payout is frozen while a dispute is open."
			}
		}
		return "Refund made; other providers' payouts are still waiting."
	}
	return string(s.State)
}

func (h *Handler) handleBuyerStatement(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	s, err := h.db.FindSettlement(c.Request().Context(), r.ID)
	if err != nil {
		return err
	}
	v, err := h.statementView(c.Request().Context(), s, 0)
	if err != nil {
		return err
	}
	v.BackURL = fmt.Sprintf("/reservations/%d", r.ID)
	if v.Extras, err = h.statementExtras(c.Request().Context(), r); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.Statement(h.page(c, fmt.Sprintf("Statement %d", r.ID)), v))
}

func (h *Handler) handleProviderStatement(c echo.Context) error {
	r, _, err := h.providerReservation(c)
	if err != nil {
		return err
	}
	s, err := h.db.FindSettlement(c.Request().Context(), r.ID)
	if err != nil {
		return err
	}
	v, err := h.statementView(c.Request().Context(), s, currentUser(c).ID)
	if err != nil {
		return err
	}
	v.BackURL = fmt.Sprintf("/provider/bookings/%d", r.ID)
	return render(c, http.StatusOK, views.Statement(h.page(c, fmt.Sprintf("Statement %d", r.ID)), v))
}

// statementView itemises a settlement: for the buyer (providerID 0) every
// piece, for a provider only their own pieces and payout.
func (h *Handler) statementView(ctx context.Context, s store.Settlement, providerID int64) (views.StatementView, error) {
	st := s.Statement
	v := views.StatementView{ReservationID: strconv.FormatInt(s.ReservationID, 10), ForProvider: providerID != 0,
		State: string(s.State), StateNote: settlementStateText(s, providerID), Simulated: h.simulated(),
		FeeRate: market.FormatPercentBP(st.PlatformFeeBP) + "%"}
	var paid, credits, refund, fee, payout market.Cents
	var reserved, promised, delivered int64
	cache := map[int64]pieceInfo{}
	for _, p := range st.Pieces {
		if providerID != 0 && p.ProviderID != providerID {
			continue
		}
		info, err := h.pieceInfo(ctx, p.OfferID, cache)
		if err != nil {
			return v, err
		}
		pv := views.StatementPieceView{
			Title: info.title, Basis: string(p.Basis), Window: formatTime(p.Start) + " – " + formatTime(p.End), Paid: p.Paid.String(),
			Reserved: market.FormatDeviceHours(p.ReservedDeviceSeconds), Delivered: market.FormatDeviceHours(p.DeliveredDeviceSeconds),
			Uptime: market.FormatPercentBP(p.UptimeBP) + "%", Guarantee: market.FormatPercentBP(p.GuaranteeBP) + "%",
			Refund: p.Refund.String(), Fee: p.Fee.String(), Payout: p.Payout.String(),
		}
		for _, cl := range p.Clauses {
			kind := "not charged"
			if cl.SLA {
				kind = "SLA credit"
			}
			dh := "—"
			if cl.DeviceSeconds > 0 {
				dh = market.FormatDeviceHours(cl.DeviceSeconds)
			}
			pv.Clauses = append(pv.Clauses, views.StatementClauseRow{Label: cl.Label, DeviceHours: dh,
				Rate: market.FormatPercentBP(cl.RateBP) + "%", Amount: cl.Cents.String(), Kind: kind})
		}
		if p.CreditsBeforeCap > p.Credits {
			pv.CreditsNote = fmt.Sprintf("SLA credits of %s are capped at %s by the offer's terms.", p.CreditsBeforeCap, p.CreditCap)
		}
		v.Pieces = append(v.Pieces, pv)
		paid += p.Paid
		credits += p.NotCharged + p.Credits
		refund += p.Refund
		fee += p.Fee
		payout += p.Payout
		reserved += p.ReservedDeviceSeconds
		promised += p.PromisedDeviceSeconds
		delivered += p.DeliveredDeviceSeconds
	}
	v.Paid, v.Credits, v.Refund, v.Fee, v.Payout = paid.String(), credits.String(), refund.String(), fee.String(), payout.String()
	v.Reserved, v.Delivered = market.FormatDeviceHours(reserved), market.FormatDeviceHours(delivered)
	uptime := 10000
	if promised > 0 {
		uptime = int(delivered * 10000 / promised)
	}
	v.Uptime = market.FormatPercentBP(uptime) + "%"
	for _, t := range s.Transfers {
		if providerID != 0 && t.ProviderID != providerID {
			continue
		}
		if providerID != 0 {
			v.PayoutState = "Payout " + transferStateText(t)
		}
	}
	if len(st.Pending) > 0 {
		v.Pending = fmt.Sprintf("%d incident report(s) were not acknowledged and are not counted; they went to the admins as disputes.", len(st.Pending))
	}
	return v, nil
}

func transferStateText(t store.SettlementTransfer) string {
	switch t.State {
	case store.TransferDone:
		if t.Amount == 0 {
			return "— nothing to pay."
		}
		return fmt.Sprintf("of %s paid to your connected account.", t.Amount)
	case store.TransferHeld:
		return fmt.Sprintf("of %s held until you connect payouts.", t.Amount)
	case store.TransferFrozen:
		return fmt.Sprintf("of %s frozen while a dispute is open.", t.Amount)
	}
	return fmt.Sprintf("of %s pending.", t.Amount)
}

// providerPayouts builds the payout panel of the provider's bookings page.
func (h *Handler) providerPayouts(ctx context.Context, providerID int64, pieces []store.ProviderPiece) (views.ProviderPayouts, error) {
	v := views.ProviderPayouts{Simulated: h.simulated(), ConnectURL: "/provider/payouts/connect", ConnectText: "Connect payouts", State: "not connected"}
	acct, err := h.db.FindPayoutAccount(ctx, providerID)
	switch {
	case err == nil && acct.Onboarded():
		v.Onboarded, v.State = true, "connected — payouts enabled"
	case err == nil:
		v.State, v.ConnectText = "onboarding not finished — payouts held", "Finish connecting payouts"
	case market.ErrorCode(err) != market.CodeNotFound:
		return v, err
	}
	seen := map[int64]bool{}
	for _, p := range pieces {
		if seen[p.ReservationID] || (p.State != market.ReservationCompleted && p.State != market.ReservationSettled) {
			continue
		}
		seen[p.ReservationID] = true
		id := strconv.FormatInt(p.ReservationID, 10)
		row := views.ProviderSettlementRow{ReservationID: id, BookingURL: "/provider/bookings/" + id, State: "not yet settled", Payout: "—"}
		s, err := h.db.FindSettlement(ctx, p.ReservationID)
		if err == nil {
			row.StatementURL = "/provider/bookings/" + id + "/statement"
			row.State = settlementStateText(s, providerID)
			for _, t := range s.Transfers {
				if t.ProviderID == providerID {
					row.Payout = t.Amount.String()
				}
			}
		} else if market.ErrorCode(err) != market.CodeNotFound {
			return v, err
		}
		v.Settlements = append(v.Settlements, row)
	}
	return v, nil
}
