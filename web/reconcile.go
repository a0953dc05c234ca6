package web

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

func (h *Handler) handleAdminReconciliation(c echo.Context) error {
	ctx := c.Request().Context()
	diffs, err := h.wf.Reconcile(ctx, workflow.ReconcileOptions{})
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
		row := views.SettlementAdminRow{ReservationID: strconv.FormatInt(s.ReservationID, 10), URL: fmt.Sprintf("/admin/reservations/%d", s.ReservationID),
			State: settlementAdminState(s), Attempts: strconv.Itoa(s.Attempts), NextAttempt: formatTime(s.NextAttemptAt), LastError: s.LastError}
		if s.State == store.SettlementFailed {
			row.RetryURL = fmt.Sprintf("/admin/settlements/%d/retry", s.ReservationID)
		}
		v.Settlements = append(v.Settlements, row)
	}
	// Completed reservations whose settlement has not started because a
	// buyer's report awaits the provider's acknowledgement.
	incs, err := h.db.ListIncidentsAwaitingAcknowledgement(ctx)
	if err != nil {
		return err
	}
	byReservation := map[int64][]store.Incident{}
	var waiting []int64
	for _, i := range incs {
		if _, ok := byReservation[i.ReservationID]; !ok {
			waiting = append(waiting, i.ReservationID)
		}
		byReservation[i.ReservationID] = append(byReservation[i.ReservationID], i)
	}
	sort.Slice(waiting, func(a, b int) bool { return waiting[a] < waiting[b] })
	for _, id := range waiting {
		until := awaitingUntil(byReservation[id])
		if until.IsZero() {
			continue
		}
		v.Settlements = append(v.Settlements, views.SettlementAdminRow{ReservationID: strconv.FormatInt(id, 10), URL: fmt.Sprintf("/admin/reservations/%d", id),
			State:    fmt.Sprintf("not started. %s Unacknowledged buyer reports: %d; after that they become disputes and the booking is settled without them.", awaitingHead(until), len(byReservation[id])),
			Attempts: "0", NextAttempt: formatTime(until)})
	}
	ds, err := h.db.ListOpenDisputes(ctx)
	if err != nil {
		return err
	}
	for _, d := range ds {
		v.Disputes = append(v.Disputes, fmt.Sprintf("#%d on reservation %d (%s, %s): %s", d.ID, d.ReservationID, disputeSourceLabel(d.Source), formatTime(d.CreatedAt), d.Statement))
	}
	return render(c, http.StatusOK, views.Reconciliation(h.page(c, "Reconciliation"), v))
}

// disputeSourceLabel says who opened a dispute.
func disputeSourceLabel(source string) string {
	switch source {
	case store.DisputeSourceBuyer:
		return "opened by the buyer"
	case store.DisputeSourceIncident:
		return "an incident report not acknowledged in time"
	case store.DisputeSourceStripe:
		return "a chargeback"
	}
	return "opened automatically"
}

func settlementAdminState(s store.Settlement) string {
	var parts []string
	for _, t := range s.Transfers {
		if t.State != store.TransferDone {
			parts = append(parts, fmt.Sprintf("provider #%d's payout %s", t.ProviderID, t.State.Label()))
		}
	}
	out := s.State.Label()
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
	if err := h.wf.RetrySettlement(c.Request().Context(), id); err != nil {
		return err
	}
	logger(c).Info("settlement retry requested", "reservation_id", id, "admin_id", currentUser(c).ID)
	h.setFlash(c, "ok", fmt.Sprintf("Settlement of reservation %d retried; its state is below.", id))
	return c.Redirect(http.StatusSeeOther, "/admin/reconciliation")
}
