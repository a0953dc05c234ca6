package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

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
