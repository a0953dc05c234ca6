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

// disputeReasonOptions are the reasons a buyer may give, for the form.
func disputeReasonOptions() []views.Option {
	opts := []views.Option{{Value: "", Label: "Choose…"}}
	for _, r := range market.DisputeReasons {
		opts = append(opts, views.Option{Value: string(r), Label: r.Label()})
	}
	return opts
}

// reservationDisputes lists a reservation's disputes for its page and says
// where the buyer may open one (paid reservations without an open dispute).
func (h *Handler) reservationDisputes(ctx context.Context, r market.Reservation) ([]views.DisputeLink, string, error) {
	ds, err := h.db.ListReservationDisputeCases(ctx, r.ID)
	if err != nil {
		return nil, "", err
	}
	var links []views.DisputeLink
	open := false
	for _, d := range ds {
		links = append(links, views.DisputeLink{URL: fmt.Sprintf("/disputes/%d", d.ID), Label: fmt.Sprintf("Dispute %d: %s", d.ID, d.Reason.Label()), Status: d.Status})
		open = open || (d.Status == store.DisputeOpen && d.Source == store.DisputeSourceBuyer)
	}
	openURL := ""
	if !open {
		if p, err := h.db.FindPayment(ctx, r.ID); err == nil && p.Status == store.PaymentPaid {
			openURL = fmt.Sprintf("/reservations/%d/disputes/new", r.ID)
		}
	}
	return links, openURL, nil
}

func (h *Handler) disputeForm(c echo.Context, status int, r market.Reservation, reason, statement string, errs map[string]string) error {
	v := views.DisputeFormView{Reservation: strconv.FormatInt(r.ID, 10), Action: fmt.Sprintf("/reservations/%d/disputes", r.ID),
		BackURL: fmt.Sprintf("/reservations/%d", r.ID), Reasons: disputeReasonOptions(), Reason: reason, Statement: statement, Errors: errs}
	return render(c, status, views.DisputeForm(h.page(c, "Open a dispute"), v))
}

func (h *Handler) handleDisputeNew(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	return h.disputeForm(c, http.StatusOK, r, "", "", nil)
}

func (h *Handler) handleDisputeOpen(c echo.Context) error {
	r, err := h.buyerReservation(c)
	if err != nil {
		return err
	}
	reason, statement := c.FormValue("reason"), c.FormValue("statement")
	d, err := h.wf.OpenDispute(c.Request().Context(), currentUser(c).ID, r.ID, market.DisputeReason(reason), statement)
	if market.ErrorCode(err) == market.CodeInvalid {
		return h.disputeForm(c, http.StatusUnprocessableEntity, r, reason, statement, market.FieldErrors(err))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", "Dispute opened. The provider has been told and can answer; an administrator will decide.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/disputes/%d", d.ID))
}

// disputeView builds the page model of a dispute for its reader: the
// buyer or a provider of it (role "buyer", "provider"), or an admin ("").
func disputeView(d store.DisputeCase, role string) views.DisputeView {
	v := views.DisputeView{
		ID: strconv.FormatInt(d.ID, 10), Reservation: fmt.Sprintf("#%d", d.ReservationID), Reason: d.Reason.Label(),
		Source: d.Source, Status: d.Status, Opened: formatTime(d.CreatedAt),
	}
	opener := "The buyer (" + d.BuyerName + ")"
	switch d.Source {
	case store.DisputeSourceBuyer:
	case store.DisputeSourceIncident:
		opener = "Opened automatically: an incident report not acknowledged in time"
	case store.DisputeSourceStripe:
		opener = "Opened automatically: a chargeback from the buyer's bank"
	default:
		opener = "Opened automatically"
	}
	buyer := "the buyer"
	if role == "buyer" {
		buyer = "you"
	}
	v.Statements = append(v.Statements, views.DisputeStatementRow{Who: opener, At: formatTime(d.CreatedAt), Body: d.Statement, Role: "buyer"})
	for _, m := range d.Messages {
		v.Statements = append(v.Statements, views.DisputeStatementRow{Who: fmt.Sprintf("The %s (%s)", m.Role, m.AuthorName), At: formatTime(m.CreatedAt), Body: m.Body, Role: m.Role})
	}
	switch d.Status {
	case store.DisputeGranted:
		v.Outcome = fmt.Sprintf("Decided on %s: a credit of %s to %s. Reason: %s", formatTime(d.DecidedAt), d.CreditCents, buyer, d.DecisionReason)
	case store.DisputeRejected:
		v.Outcome = fmt.Sprintf("Decided on %s: rejected, no credit. Reason: %s", formatTime(d.DecidedAt), d.DecisionReason)
	}
	switch d.RefundState {
	case store.DisputeRefundPending:
		v.Refund = fmt.Sprintf("The refund of %s is being made.", d.CreditCents)
	case store.DisputeRefundDone:
		card := "the buyer's card"
		if role == "buyer" {
			card = "your card"
		}
		v.Refund, v.RefundRef = fmt.Sprintf("Refunded %s to %s.", d.CreditCents, card), d.RefundRef
	}
	return v
}

func (h *Handler) handleDisputeShow(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.disputePage(c, http.StatusOK, id, "", "")
}

// disputePage is dispute id's page for its buyer, a provider of it or an
// admin, with the answer form holding value and its message problem.
func (h *Handler) disputePage(c echo.Context, status int, id int64, value, problem string) error {
	u := currentUser(c)
	d, err := h.db.FindDispute(c.Request().Context(), id)
	if err != nil {
		return err
	}
	role := ""
	if d.BuyerID == u.ID {
		role = "buyer"
	}
	for _, p := range d.ProviderIDs {
		if p == u.ID {
			role = "provider"
		}
	}
	if role == "" && !u.IsAdmin {
		return market.Errorf(market.CodeNotFound, "That dispute could not be found.")
	}
	v := disputeView(d, role)
	v.ReservationURL = fmt.Sprintf("/reservations/%d", d.ReservationID)
	if role == "provider" {
		v.ReservationURL = fmt.Sprintf("/provider/bookings/%d", d.ReservationID)
	}
	if role != "" && d.Status == store.DisputeOpen {
		v.CanAnswer, v.AnswerAction = true, fmt.Sprintf("/disputes/%d/statements", d.ID)
		v.AnswerLabel = "Add to your statement"
		if role == "provider" {
			v.AnswerLabel = "Your answer"
		}
		v.Value, v.Error = value, problem
	}
	return render(c, status, views.Dispute(h.page(c, "Dispute "+v.ID), v))
}

func (h *Handler) handleDisputeStatement(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	err = h.wf.AddDisputeStatement(c.Request().Context(), currentUser(c).ID, id, c.FormValue("statement"))
	if market.ErrorCode(err) == market.CodeInvalid {
		msg := market.FieldErrors(err)["statement"]
		if msg == "" {
			msg = market.ErrorMessage(err)
		}
		return h.disputePage(c, http.StatusUnprocessableEntity, id, c.FormValue("statement"), msg)
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", "Statement added. The other party and the administrators can read it.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/disputes/%d", id))
}

func (h *Handler) handleAdminDisputes(c echo.Context) error {
	ds, err := h.db.ListDisputes(c.Request().Context())
	if err != nil {
		return err
	}
	v := views.AdminDisputesView{}
	for _, d := range ds {
		credit := "—"
		if d.Status == store.DisputeGranted {
			credit = d.CreditCents.String()
		}
		v.Rows = append(v.Rows, views.AdminDisputeRow{ID: strconv.FormatInt(d.ID, 10), URL: fmt.Sprintf("/admin/disputes/%d", d.ID),
			Reservation: fmt.Sprintf("#%d", d.ReservationID), Buyer: d.BuyerName, Reason: d.Reason.Label(), Status: d.Status,
			Opened: formatTime(d.CreatedAt), Credit: credit})
	}
	return render(c, http.StatusOK, views.AdminDisputes(h.page(c, "Disputes"), v))
}

func (h *Handler) timelineRows(ctx context.Context, reservationID int64) ([]views.TimelineRow, error) {
	evs, err := h.db.ReservationTimeline(ctx, reservationID)
	if err != nil {
		return nil, err
	}
	rows := make([]views.TimelineRow, 0, len(evs))
	for _, e := range evs {
		rows = append(rows, views.TimelineRow{At: formatTime(e.At), Kind: e.Kind, Text: e.Text, Ref: e.Ref, Record: e.Record})
	}
	return rows, nil
}

func (h *Handler) handleAdminReservation(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	rows, err := h.timelineRows(c.Request().Context(), id)
	if err != nil {
		return err
	}
	obs, err := h.db.ListReservationObservations(c.Request().Context(), id)
	if err != nil {
		return err
	}
	t, err := h.db.AdminReservationThread(c.Request().Context(), id)
	if err != nil {
		return err
	}
	replaceable, err := h.adminReplaceable(c.Request().Context(), id)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.AdminReservation(h.page(c, fmt.Sprintf("Reservation %d", id)),
		views.AdminReservationView{ID: strconv.FormatInt(id, 10), Timeline: rows, Observations: observationRows(obs),
			Thread: threadView(t, currentUser(c).ID, ""), Replaceable: replaceable}))
}

func (h *Handler) adminDisputePage(c echo.Context, status int, id int64, credit, reason string, errs map[string]string) error {
	ctx := c.Request().Context()
	d, err := h.db.FindDispute(ctx, id)
	if err != nil {
		return err
	}
	v := disputeView(d, "")
	v.Admin, v.ReservationURL = true, fmt.Sprintf("/admin/reservations/%d", d.ReservationID)
	if v.Timeline, err = h.timelineRows(ctx, d.ReservationID); err != nil {
		return err
	}
	obs, err := h.db.ListReservationObservations(ctx, d.ReservationID)
	if err != nil {
		return err
	}
	v.Observations = observationRows(obs)
	t, err := h.db.AdminReservationThread(ctx, d.ReservationID)
	if err != nil {
		return err
	}
	v.Thread = threadView(t, currentUser(c).ID, "")
	if d.Status == store.DisputeOpen {
		v.DecideAction, v.CreditValue, v.ReasonValue, v.Errors = fmt.Sprintf("/admin/disputes/%d/decide", d.ID), credit, reason, errs
		v.MaxCredit = "what was paid"
		if lim, err := h.db.FindDisputeCreditLimit(ctx, d.ID); err == nil {
			v.MaxCredit = fmt.Sprintf("%s (%s paid less %s)", lim.Max, lim.Paid, lim.Refunds.Total())
		}
	}
	if d.RefundState == store.DisputeRefundPending {
		v.RefundAction = fmt.Sprintf("/admin/disputes/%d/refund", d.ID)
	}
	return render(c, status, views.AdminDispute(h.page(c, "Dispute "+v.ID), v))
}

func (h *Handler) handleAdminDispute(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	return h.adminDisputePage(c, http.StatusOK, id, "", "", nil)
}

func (h *Handler) handleAdminDisputeDecide(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	creditText, reason := c.FormValue("credit"), c.FormValue("reason")
	var credit market.Cents
	if c.FormValue("decision") == "grant" {
		credit, err = market.ParseCents(creditText)
		if err != nil || credit <= 0 {
			return h.adminDisputePage(c, http.StatusUnprocessableEntity, id, creditText, reason, map[string]string{"credit": "Enter the credit in dollars, e.g. 12.50, or reject the dispute."})
		}
	}
	d, refunded, err := h.wf.DecideDispute(ctx, currentUser(c).ID, id, credit, reason)
	if market.ErrorCode(err) == market.CodeInvalid {
		return h.adminDisputePage(c, http.StatusUnprocessableEntity, id, creditText, reason, market.FieldErrors(err))
	}
	if err != nil {
		return err
	}
	logger(c).Info("dispute decided", "dispute_id", id, "status", d.Status, "credit_cents", int64(credit), "admin_id", currentUser(c).ID)
	switch {
	case !refunded:
		h.setFlash(c, "error", "The credit is granted but the refund did not go through yet; it is retried automatically, or retry it from this page.")
	case credit == 0:
		h.setFlash(c, "ok", "Dispute rejected; both parties have been told.")
	case d.Source == store.DisputeSourceStripe:
		h.setFlash(c, "ok", fmt.Sprintf("The providers bear %s of the chargeback; the rest is the platform's loss. Both parties have been told.", credit))
	default:
		h.setFlash(c, "ok", fmt.Sprintf("Credit of %s granted and refunded; both parties have been told.", credit))
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/admin/disputes/%d", id))
}

func (h *Handler) handleAdminDisputeRefund(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.RefundDispute(c.Request().Context(), id); err != nil {
		if market.ErrorCode(err) == market.CodeConflict || market.ErrorCode(err) == market.CodeNotFound {
			return err
		}
		logger(c).Error("dispute refund failed", "dispute_id", id, "err", err)
		h.setFlash(c, "error", "The refund did not go through; try again later.")
	} else {
		h.setFlash(c, "ok", "Refund made.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/admin/disputes/%d", id))
}
