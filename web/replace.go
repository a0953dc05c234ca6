package web

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// Replacement after a host failure (docs/replacement.md): the page where
// a buyer with the ask policy confirms the replacement offered, and the
// confirmation, which books through the workflow.

// handleReplacementShow shows a replacement offered to the buyer.
func (h *Handler) handleReplacementShow(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	rep, err := h.db.FindReplacement(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.ReplacementConfirm(h.page(c, "Confirm the replacement"), replacementView(rep, h)))
}

// handleReplacementConfirm books the offered replacement (workflow
// ConfirmReplacement); a conflict (lapsed, or nothing fits any more) is
// shown on the page with status 409.
func (h *Handler) handleReplacementConfirm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx, user := c.Request().Context(), currentUser(c)
	rep, err := h.wf.ConfirmReplacement(ctx, user.ID, id)
	if market.ErrorCode(err) == market.CodeConflict {
		cur, ferr := h.db.FindReplacement(ctx, user.ID, id)
		if ferr != nil {
			return ferr
		}
		v := replacementView(cur, h)
		v.Message = market.ErrorMessage(err)
		return render(c, http.StatusConflict, views.ReplacementConfirm(h.page(c, "Confirm the replacement"), v))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Your rental was moved to the replacement from %s.", formatTime(rep.From)))
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", rep.ReservationID))
}

// replacementView is the confirm page's model of rep.
func replacementView(rep store.Replacement, h *Handler) views.ReplacementConfirmView {
	now := h.now()
	status := strings.ReplaceAll(rep.State, "_", " ")
	if rep.State == store.ReplacementOffered && !rep.OfferLive(now) {
		status = "lapsed"
	}
	return views.ReplacementConfirmView{
		ID: strconv.FormatInt(rep.ID, 10), URL: fmt.Sprintf("/reservations/%d", rep.ReservationID),
		ActionURL: fmt.Sprintf("/replacements/%d/confirm", rep.ID),
		Failed: fmt.Sprintf("The provider's agent measured a %s on node %d of reservation #%d at %s.",
			strings.ToLower(rep.Kind.Label()), rep.FailedNode+1, rep.ReservationID, formatTime(rep.CreatedAt)),
		Offered: rep.Reason, Expires: formatTime(rep.OfferExpiresAt), Status: status, Live: rep.OfferLive(now),
	}
}

// replacementPanel is the reservation page's account of r's host failures
// and replacements: the original piece and the replacement side by side.
func (h *Handler) replacementPanel(ctx context.Context, r market.Reservation, now time.Time) (views.ReplacementPanelView, error) {
	reps, err := h.db.ListReplacements(ctx, r.ID)
	if err != nil {
		return views.ReplacementPanelView{}, err
	}
	pieces := map[int64]market.ReservationPiece{}
	for _, p := range r.Pieces {
		pieces[p.ID] = p
	}
	var incs []store.Incident
	if len(reps) > 0 {
		if incs, err = h.db.ListIncidents(ctx, r.ID); err != nil {
			return views.ReplacementPanelView{}, err
		}
	}
	var v views.ReplacementPanelView
	for _, rep := range reps {
		row := views.ReplacementRow{
			What: fmt.Sprintf("%s on node %d, measured %s.", rep.Kind.Label(), rep.FailedNode+1, formatTime(rep.CreatedAt)),
		}
		switch rep.State {
		case store.ReplacementBooked:
			row.Status = "replaced"
		case store.ReplacementOffered:
			row.Status, row.Reason = "offered", "Offered: "+rep.Reason
			if rep.OfferLive(now) {
				row.ConfirmURL = fmt.Sprintf("/replacements/%d", rep.ID)
			} else {
				row.Status = "lapsed"
			}
		case store.ReplacementNotWanted:
			row.Status, row.Reason = "not replaced", "Your request's replacement policy is never; the SLA credit for the outage applies."
		case store.ReplacementUnfilled:
			row.Status, row.Reason = "not replaced", rep.Reason+" The SLA credit for the outage applies."
			if rep.PremiumRef != "" {
				state := "being refunded"
				if rep.RefundDone {
					state = "refunded"
				}
				row.Reason += fmt.Sprintf(" The %s charged for the replacement is %s to your card.", rep.Split.Refund, state)
			}
		case store.ReplacementCharging:
			row.Status, row.Reason = "being paid", fmt.Sprintf("A replacement is found; %s of it is being charged to your saved card, and it is booked as soon as the payment goes through.", rep.Split.BuyerShare)
		default:
			row.Status = strings.ReplaceAll(rep.State, "_", " ")
		}
		if rep.State == store.ReplacementBooked {
			o := pieces[rep.PieceID]
			row.Original = fmt.Sprintf("Offer #%d, %s, settles for %s of the %s paid for it", o.OfferID, market.FormatSpan(o.Start, o.End),
				rep.Split.OriginalAmount(), rep.Split.Delivered+rep.Split.Remaining)
			var parts []string
			for _, id := range rep.PieceIDs {
				p := pieces[id]
				parts = append(parts, fmt.Sprintf("Offer #%d, %d device(s), %s, %s", p.OfferID, p.Devices, market.FormatSpan(p.Start, p.End), p.AmountCents))
			}
			row.Replacement = strings.Join(parts, "; ")
			row.Incident = replacementIncident(rep, incs)
			switch {
			case rep.Split.BuyerShare > 0:
				row.Difference = fmt.Sprintf("%s dearer: %s borne by the failing provider, %s charged to your saved card",
					rep.Split.ProviderShare+rep.Split.BuyerShare, rep.Split.ProviderShare, rep.Split.BuyerShare)
			case rep.Split.Refund > 0:
				state := "being refunded"
				if rep.RefundDone {
					state = "refunded"
				}
				row.Difference = fmt.Sprintf("%s cheaper, %s to your card", rep.Split.Refund, state)
			case rep.Split.ProviderShare > 0:
				row.Difference = fmt.Sprintf("%s dearer, borne by the failing provider", rep.Split.ProviderShare)
			default:
				row.Difference = "none"
			}
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// replacementIncident says what became of rep's outage as an incident of
// the original piece, from the reservation's incidents incs.
func replacementIncident(rep store.Replacement, incs []store.Incident) string {
	for _, inc := range incs {
		if inc.PieceID == rep.PieceID && inc.Kind == rep.Kind && inc.End.Equal(rep.From) {
			return fmt.Sprintf("Incident #%d: %s, %s (%d min down); its SLA credit is on the original piece's statement.",
				inc.ID, inc.Kind.Label(), market.FormatSpan(inc.Start, inc.End), int(inc.End.Sub(inc.Start).Round(time.Minute)/time.Minute))
		}
	}
	return "The outage is an incident of the original piece once it ends; its SLA credit is on the original piece's statement."
}

// markReplacementPieces marks, on provider providerID's statement v of
// r, each of their pieces that was booked as the replacement for another
// provider's failed piece, with the incident's kind and when it began —
// not whose piece failed. v.Pieces follow st.Pieces less the other
// providers' pieces, as statementView builds them.
func (h *Handler) markReplacementPieces(ctx context.Context, v *views.StatementView, r market.Reservation, st market.Statement, providerID int64) error {
	reps, err := h.db.ListReplacements(ctx, r.ID)
	if err != nil {
		return err
	}
	owner := map[int64]int64{}
	for _, p := range r.Pieces {
		owner[p.ID] = p.ProviderID
	}
	var incs []store.Incident
	marks := map[int64]string{}
	for _, rep := range reps {
		if rep.State != store.ReplacementBooked || owner[rep.PieceID] == providerID {
			continue
		}
		if incs == nil {
			if incs, err = h.db.ListIncidents(ctx, r.ID); err != nil {
				return err
			}
		}
		mark := fmt.Sprintf("A replacement for another provider's failed piece: %s, began %s.",
			strings.ToLower(rep.Kind.Label()), formatTime(replacementBegan(rep, incs)))
		for _, id := range rep.PieceIDs {
			marks[id] = mark
		}
	}
	i := 0
	for _, p := range st.Pieces {
		if p.ProviderID != providerID {
			continue
		}
		if i < len(v.Pieces) {
			v.Pieces[i].ReplacementFor = marks[p.PieceID]
		}
		i++
	}
	return nil
}

// replacementBegan is when the failure rep replaced began: the start of
// the incident it was triggered from or became, else when the
// replacement took over.
func replacementBegan(rep store.Replacement, incs []store.Incident) time.Time {
	for _, inc := range incs {
		if (rep.IncidentID != 0 && inc.ID == rep.IncidentID) ||
			(inc.PieceID == rep.PieceID && inc.Kind == rep.Kind && inc.End.Equal(rep.From)) {
			return inc.Start
		}
	}
	return rep.From
}

// providerReplacementPanel is a provider's statement's account of their
// pieces of r that failed and were replaced: the piece and the
// replacement side by side, with the incident, and what moved out of what
// the buyer paid for the piece — the time after the failure, and the
// provider's share of a dearer replacement under the offer's SLA credit
// cap. Another provider's replacement is described as the buyer's
// statement describes it less its offer: devices, time and cost, never
// who.
func (h *Handler) providerReplacementPanel(ctx context.Context, r market.Reservation, providerID int64) (views.ProviderReplacementPanelView, error) {
	var v views.ProviderReplacementPanelView
	reps, err := h.db.ListReplacements(ctx, r.ID)
	if err != nil {
		return v, err
	}
	pieces := map[int64]market.ReservationPiece{}
	for _, p := range r.Pieces {
		pieces[p.ID] = p
	}
	var incs []store.Incident
	for _, rep := range reps {
		orig := pieces[rep.PieceID]
		if rep.State != store.ReplacementBooked || orig.ProviderID != providerID {
			continue
		}
		if incs == nil {
			if incs, err = h.db.ListIncidents(ctx, r.ID); err != nil {
				return v, err
			}
		}
		sp := rep.Split
		paid := sp.Delivered + sp.Remaining
		row := views.ProviderReplacementRow{
			What: fmt.Sprintf("%s on node %d of your offer #%d, measured %s.", rep.Kind.Label(), rep.FailedNode+1, orig.OfferID, formatTime(rep.CreatedAt)),
			Original: fmt.Sprintf("Your offer #%d, %d device(s), booked %s; ran until %s", orig.OfferID, orig.Devices,
				market.FormatSpan(orig.Start, rep.Until), formatTime(rep.From)),
			Incident: replacementIncident(rep, incs),
		}
		var parts []string
		for _, id := range rep.PieceIDs {
			p := pieces[id]
			where := "Another provider's offer"
			if p.ProviderID == providerID {
				where = fmt.Sprintf("Your offer #%d", p.OfferID)
			}
			parts = append(parts, fmt.Sprintf("%s, %d device(s), %s, %s", where, p.Devices, market.FormatSpan(p.Start, p.End), p.AmountCents))
		}
		row.Replacement = strings.Join(parts, "; ")
		row.Lines = []views.StatementLine{
			{Label: "Paid for your piece", Amount: paid.String(), TestID: "repl-paid"},
			{Label: "The time after the failure, moved off your piece", Amount: "−" + sp.Remaining.String(), TestID: "repl-moved"},
		}
		if sp.ProviderShare > 0 {
			row.Lines = append(row.Lines, views.StatementLine{Label: "Your share of the dearer replacement", Amount: "−" + sp.ProviderShare.String(), TestID: "repl-your-share"})
		}
		row.Lines = append(row.Lines, views.StatementLine{Label: "Your piece settles for", Amount: sp.OriginalAmount().String(), TestID: "repl-settles", Total: true})
		row.Cost = []views.StatementLine{{Label: "The replacement costs", Amount: sp.Cost.String(), TestID: "repl-cost"}}
		capAmount := market.Share(paid, orig.Terms.CreditCapBP)
		switch {
		case sp.Refund > 0:
			row.Cost = append(row.Cost,
				views.StatementLine{Label: "Paid from the time moved off your piece", Amount: sp.Cost.String(), TestID: "repl-from-moved"},
				views.StatementLine{Label: "The rest of that time, refunded to the buyer", Amount: sp.Refund.String(), TestID: "repl-refund"})
			row.Check = fmt.Sprintf("%s paid = %s your piece settles for + %s moved off it; the %s moved = %s for the replacement + %s refunded to the buyer.",
				paid, sp.OriginalAmount(), sp.Remaining, sp.Remaining, sp.Cost, sp.Refund)
		case sp.ProviderShare > 0:
			row.Cost = append(row.Cost,
				views.StatementLine{Label: "Paid from the time moved off your piece", Amount: sp.Remaining.String(), TestID: "repl-from-moved"},
				views.StatementLine{Label: fmt.Sprintf("Borne by you: the least of the extra %s, your SLA credit cap (%s%% of %s = %s) and the %s delivered",
					sp.ProviderShare+sp.BuyerShare, market.FormatPercentBP(orig.Terms.CreditCapBP), paid, capAmount, sp.Delivered),
					Amount: sp.ProviderShare.String(), TestID: "repl-borne"})
			if sp.BuyerShare > 0 {
				row.Cost = append(row.Cost, views.StatementLine{Label: "Charged to the buyer's saved card, within their maximum premium", Amount: sp.BuyerShare.String(), TestID: "repl-buyer-share"})
			}
			row.Check = fmt.Sprintf("%s paid = %s your piece settles for + %s moved off it + %s your share; the replacement's %s = %s + %s + %s from the buyer.",
				paid, sp.OriginalAmount(), sp.Remaining, sp.ProviderShare, sp.Cost, sp.Remaining, sp.ProviderShare, sp.BuyerShare)
		default:
			row.Cost = append(row.Cost, views.StatementLine{Label: "Paid from the time moved off your piece", Amount: sp.Cost.String(), TestID: "repl-from-moved"})
			row.Check = fmt.Sprintf("%s paid = %s your piece settles for + %s moved off it, which pays the replacement.", paid, sp.OriginalAmount(), sp.Remaining)
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// adminReplaceable lists the incidents of reservation id an admin may
// trigger a replacement from: host failures and fewer devices on a piece
// that runs now with time enough left, not decided yet. The workflow
// checks all of it again.
func (h *Handler) adminReplaceable(ctx context.Context, id int64) ([]views.AdminReplaceRow, error) {
	r, err := h.db.FindReservation(ctx, id)
	if err != nil {
		return nil, err
	}
	incs, err := h.db.ListIncidents(ctx, id)
	if err != nil {
		return nil, err
	}
	reps, err := h.db.ListReplacements(ctx, id)
	if err != nil {
		return nil, err
	}
	decided := map[int64]bool{}
	for _, rep := range reps {
		decided[rep.IncidentID] = true
	}
	now := h.now()
	var out []views.AdminReplaceRow
	for _, inc := range incs {
		var piece market.ReservationPiece
		for _, p := range r.Pieces {
			if p.ID == inc.PieceID {
				piece = p
			}
		}
		if decided[inc.ID] || r.State != market.ReservationActive || piece.ID == 0 || !market.TriggersReplacement(inc.Kind, true, piece, now) {
			continue
		}
		row := views.AdminReplaceRow{ID: strconv.FormatInt(inc.ID, 10),
			What: fmt.Sprintf("Incident #%d: %s, %d device(s), reported by the %s %s.", inc.ID, inc.Kind.Label(), inc.DevicesAffected,
				inc.ReportedBy, formatTime(inc.CreatedAt)),
			Action: fmt.Sprintf("/admin/reservations/%d/incidents/%d/replace", id, inc.ID)}
		for _, n := range piece.Nodes {
			row.Nodes = append(row.Nodes, views.Option{Value: strconv.Itoa(n.Node), Label: fmt.Sprintf("Node %d of offer #%d", n.Node+1, piece.OfferID)})
		}
		out = append(out, row)
	}
	return out, nil
}

// handleAdminReplace triggers a replacement from an incident (workflow
// TriggerReplacement) and says what was decided.
func (h *Handler) handleAdminReplace(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	incidentID, err := strconv.ParseInt(c.Param("incident"), 10, 64)
	if err != nil {
		return market.Errorf(market.CodeNotFound, "That incident could not be found.")
	}
	node, err := strconv.Atoi(c.FormValue("node"))
	if err != nil {
		node = -1
	}
	back := fmt.Sprintf("/admin/reservations/%d", id)
	rep, err := h.wf.TriggerReplacement(c.Request().Context(), currentUser(c).ID, id, incidentID, node)
	switch code := market.ErrorCode(err); {
	case err == nil:
	case code == market.CodeConflict || code == market.CodeInvalid:
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, back)
	default:
		return err
	}
	msg := "Replacement decided: " + strings.ReplaceAll(rep.State, "_", " ") + "."
	if rep.Reason != "" {
		msg += " " + rep.Reason
	}
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, back)
}
