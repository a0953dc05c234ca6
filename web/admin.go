package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

func (h *Handler) handleAdminOffers(c echo.Context) error {
	rows, err := h.db.ListOffersForReview(c.Request().Context())
	if err != nil {
		return err
	}
	v := views.AdminReviewView{}
	for _, l := range rows {
		o := l.Offer
		id := strconv.FormatInt(o.ID, 10)
		v.Rows = append(v.Rows, views.ReviewRow{
			ID: id, Title: o.Title, URL: "/offers/" + id, Provider: providerName(l), Summary: offerSummary(o),
			Price: o.PriceCentsPerDeviceHour.String(), Submitted: formatTime(o.UpdatedAt), Action: "/admin/offers/" + id + "/review",
		})
	}
	return render(c, http.StatusOK, views.AdminReview(h.page(c, "Review queue"), v))
}

func (h *Handler) handleAdminReview(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	decision := market.ReviewState(c.FormValue("decision"))
	note := strings.TrimSpace(c.FormValue("note"))
	switch decision {
	case market.ReviewApproved:
	case market.ReviewRejected:
		if note == "" {
			h.setFlash(c, "error", "Give the provider a reason when rejecting an offer.")
			return c.Redirect(http.StatusSeeOther, "/admin/offers")
		}
	default:
		return market.Errorf(market.CodeInvalid, "Choose approve or reject.")
	}
	if err := h.db.ReviewOffer(c.Request().Context(), id, decision, note, h.now()); err != nil {
		return err
	}
	h.refreshOffer(c.Request().Context(), id)
	logger(c).Info("offer reviewed", "offer_id", id, "decision", decision, "admin_id", currentUser(c).ID)
	h.setFlash(c, "ok", fmt.Sprintf("Offer %d %s.", id, decision))
	return c.Redirect(http.StatusSeeOther, "/admin/offers")
}
