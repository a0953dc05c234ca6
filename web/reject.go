package web

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// rejectPanelView is the acceptance period on the buyer's reservation page
// at now (market.CheckRejection decides), with the agents' acceptance
// results. It is hidden when no piece's contract has an acceptance period,
// or once the rental is over and was not rejected.
func rejectPanelView(r market.Reservation, acceptance []store.AcceptanceRecord, g market.RejectionGrounds, now time.Time) views.RejectPanelView {
	v := views.RejectPanelView{URL: fmt.Sprintf("/reservations/%d/reject", r.ID), Acceptance: acceptanceText(acceptance)}
	if !r.RejectedAt.IsZero() {
		v.Show, v.Rejected = true, true
		v.Message = fmt.Sprintf("You rejected this rental on %s, within its acceptance period (docs: rejection rule); its statement shows what was refunded.",
			formatTime(r.RejectedAt))
		return v
	}
	from, until, ok := market.RejectionWindow(r)
	if !ok || (r.State != market.ReservationConfirmed && r.State != market.ReservationActive) {
		return v
	}
	v.Show, v.Until = true, formatTime(until)
	err := market.CheckRejection(r, now, g)
	switch {
	case err == nil:
		v.CanReject = true
		v.Message = rejectionOutcome(r, g, now)
	case now.Before(from):
		v.Message = fmt.Sprintf("Once it starts at %s, you may reject this rental until %s: in full if the provider's agent's acceptance test fails or it measures an outage, "+
			"otherwise paying for the minutes used (at least %d).", formatTime(from), formatTime(until), market.RejectMinimumMinutes)
	default:
		v.Message = market.ErrorMessage(err)
	}
	return v
}

// acceptanceText says what the agents' acceptance tests measured, node by
// node: the median and lowest device against the guaranteed figure.
func acceptanceText(rs []store.AcceptanceRecord) string {
	var parts []string
	for _, a := range rs {
		k := a.Result.Metric
		if a.Result.Error != "" {
			parts = append(parts, fmt.Sprintf("The acceptance test on node %d could not run: %s.", a.Node, a.Result.Error))
			continue
		}
		vals := append([]int64(nil), a.Result.PerDeviceMilli...)
		if len(vals) == 0 {
			continue
		}
		sort.Slice(vals, func(i, j int) bool { return vals[i] < vals[j] })
		s := fmt.Sprintf("The acceptance test on node %d measured %s per device (median; lowest %s)", a.Node,
			market.MilliFigure(k, market.NearestRank(vals, 50)), market.MilliFigure(k, vals[0]))
		switch {
		case a.Guaranteed <= 0:
			s += "; the offer guarantees no figure for it."
		case a.DevicesBelow > 0:
			s += fmt.Sprintf(" against the guaranteed %s: %d device(s) more than %s%% below it, an underperformance incident.",
				market.FormatFigure(k, a.Guaranteed), a.DevicesBelow, market.FormatPercentBP(market.AcceptanceToleranceBP))
		default:
			s += fmt.Sprintf(": every device within %s%% of the guaranteed %s.", market.FormatPercentBP(market.AcceptanceToleranceBP), market.FormatFigure(k, a.Guaranteed))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

// rejectConfirmView is the confirmation of rejecting r at now, with the
// reason as typed and its error; CanReject false with the reason when it
// can no longer be rejected.
func rejectConfirmView(r market.Reservation, g market.RejectionGrounds, now time.Time, reason, reasonErr string) views.RejectConfirmView {
	v := views.RejectConfirmView{
		ID: strconv.FormatInt(r.ID, 10), URL: fmt.Sprintf("/reservations/%d", r.ID), ActionURL: fmt.Sprintf("/reservations/%d/reject", r.ID),
		Devices: strconv.Itoa(r.Devices()), Window: formatTime(r.Start()) + " – " + formatTime(r.End()), Amount: r.AmountCents.String(),
		Reason: views.Field{Name: "reason", Label: "What was wrong (optional)", Value: reason, Error: reasonErr,
			Help: fmt.Sprintf("The provider and the admins see it. Up to %d characters.", market.MaxRejectReason)},
	}
	if _, until, ok := market.RejectionWindow(r); ok {
		v.Until = formatTime(until)
	}
	if err := market.CheckRejection(r, now, g); err != nil {
		v.Message = market.ErrorMessage(err)
		return v
	}
	v.CanReject = true
	v.Message = rejectionOutcome(r, g, now)
	v.Amount = rejectionRefund(r, g, now).String()
	return v
}

// rejectionRefund is what rejecting r at now on grounds g refunds
// (market.RejectionStatement's rule).
func rejectionRefund(r market.Reservation, g market.RejectionGrounds, now time.Time) market.Cents {
	if g.Founded() {
		return r.AmountCents
	}
	refund := r.AmountCents
	for _, p := range r.Pieces {
		refund -= market.RejectionCharge(p, now)
	}
	return refund
}

// rejectionOutcome says what rejecting r at now on grounds g would do
// (market.RejectionStatement's rule).
func rejectionOutcome(r market.Reservation, g market.RejectionGrounds, now time.Time) string {
	if g.Founded() {
		return fmt.Sprintf("The rental failed its contract (a failed acceptance test or a measured outage): rejecting it refunds everything you paid, %s.", r.AmountCents)
	}
	refund := rejectionRefund(r, g, now)
	charge := r.AmountCents - refund
	return fmt.Sprintf("No failed acceptance test or measured outage: rejecting it now pays the provider for the minutes used (at least %d), %s, and refunds %s. "+
		"You may make %d such rejections in %d days; you have made %d.", market.RejectMinimumMinutes, charge, refund,
		market.RejectLimit, int(market.RejectLimitWindow.Hours()/24), g.RecentUnfounded)
}

// rejectGrounds reads what a rejection of r now would stand on.
func (h *Handler) rejectGrounds(c echo.Context, r market.Reservation) (market.RejectionGrounds, error) {
	return h.db.FindRejectionGrounds(c.Request().Context(), r, h.now())
}

// handleReservationRejectConfirm asks before rejecting a rental: what is
// refunded and until when it can be rejected. It is a page, so it works
// without JavaScript; its form posts to handleReservationReject. A rental
// that can no longer be rejected says why (409).
func (h *Handler) handleReservationRejectConfirm(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	g, err := h.rejectGrounds(c, r)
	if err != nil {
		return err
	}
	v := rejectConfirmView(r, g, h.now(), "", "")
	status := http.StatusOK
	if !v.CanReject {
		status = http.StatusConflict
	}
	return render(c, status, views.RejectConfirm(h.page(c, fmt.Sprintf("Reject reservation %d?", r.ID)), v))
}

// handleReservationReject rejects the signed-in buyer's rental within its
// acceptance period (workflow.Reject: refunded in full at once). A bad
// reason re-renders the page with 422 and the message next to it; too late
// re-renders it with 409 and why.
func (h *Handler) handleReservationReject(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("Reject reservation %d?", r.ID)
	reason := c.FormValue("reason")
	g, err := h.rejectGrounds(c, r)
	if err != nil {
		return err
	}
	if _, err := market.ValidateRejectReason(reason); err != nil {
		v := rejectConfirmView(r, g, h.now(), reason, market.FieldErrors(err)["reason"])
		return render(c, http.StatusUnprocessableEntity, views.RejectConfirm(h.page(c, title), v))
	}
	got, err := h.wf.Reject(c.Request().Context(), currentUser(c).ID, r.ID, reason)
	if market.ErrorCode(err) == market.CodeConflict {
		v := rejectConfirmView(r, g, h.now(), reason, "")
		v.CanReject, v.Message = false, market.ErrorMessage(err)
		return render(c, http.StatusConflict, views.RejectConfirm(h.page(c, title), v))
	}
	if err != nil {
		return err
	}
	logger(c).Info("rental rejected", "reservation_id", got.ID)
	refund := got.AmountCents
	if st, err := h.db.FindSettlement(c.Request().Context(), got.ID); err == nil {
		refund = st.Statement.Refund
	}
	h.setFlash(c, "ok", fmt.Sprintf("Rental rejected. %s of the %s you paid is refunded to you; your keys are removed from the machines and the devices are released.", refund, got.AmountCents))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", got.ID))
}

// apiRejection is the optional body of POST /api/v1/reservations/:id/reject.
type apiRejection struct {
	Reason string `json:"reason"`
}

// handleAPIReservationReject rejects a rental of the token's owner within
// its acceptance period, as the reservation page does; the answer is the
// reservation, cancelled, with rejected_at.
func (h *Handler) handleAPIReservationReject(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiRejection
	if c.Request().ContentLength != 0 {
		if err := decodeBody(c, &body); err != nil {
			return err
		}
	}
	r, err := h.wf.Reject(c.Request().Context(), currentUser(c).ID, id, body.Reason)
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toAPIReservation(r))
}
