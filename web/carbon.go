package web

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

func regionProfile(id string) market.CarbonProfile {
	p, _, _ := market.RegionCarbonProfile(id)
	return p
}

// handleCarbonProfileForm shows the provider's hourly profile form.
func (h *Handler) handleCarbonProfileForm(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	o, err := h.db.FindProviderOffer(c.Request().Context(), currentUser(c).ID, id)
	if err != nil {
		return err
	}
	v := carbonFormView(o)
	if own, err := h.db.FindOfferCarbonProfile(c.Request().Context(), o.ID); err == nil {
		v.Hourly, v.Source, v.HasOwn = own.Profile.String(), own.Source, true
		v.Current = "your own profile (" + own.Source + ")"
	} else if market.ErrorCode(err) != market.CodeNotFound {
		return err
	}
	return render(c, http.StatusOK, views.CarbonProfileForm(h.page(c, "Hourly carbon profile"), v))
}

func carbonFormView(o market.Offer) views.CarbonProfileFormView {
	p := market.OfferCarbonProfile(o.RegionID, o.CarbonGPerKWh, nil)
	_, src, _ := market.RegionCarbonProfile(o.RegionID)
	return views.CarbonProfileFormView{OfferTitle: o.Title, OfferURL: fmt.Sprintf("/offers/%d", o.ID),
		Action: fmt.Sprintf("/provider/offers/%d/carbon", o.ID), DeleteURL: fmt.Sprintf("/provider/offers/%d/carbon/delete", o.ID),
		Hourly: p.String(), Current: "the regional default (" + src + ")"}
}

// handleCarbonProfileSave stores the provider's hourly profile.
func (h *Handler) handleCarbonProfileSave(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	o, err := h.db.FindProviderOffer(ctx, u.ID, id)
	if err != nil {
		return err
	}
	v := carbonFormView(o)
	v.Hourly, v.Source = c.FormValue("hourly_g"), strings.TrimSpace(c.FormValue("source"))
	v.Errors = map[string]string{}
	prof, perr := market.ParseCarbonProfile(v.Hourly)
	if perr != nil {
		v.Errors["hourly_g"] = market.ErrorMessage(perr)
	}
	if v.Source == "" || len([]rune(v.Source)) > 200 {
		v.Errors["source"] = "Say where the figures come from (up to 200 characters)."
	} else if msg := market.TextProblem(v.Source, false); msg != "" {
		v.Errors["source"] = msg
	}
	if len(v.Errors) > 0 {
		return render(c, http.StatusUnprocessableEntity, views.CarbonProfileForm(h.page(c, "Hourly carbon profile"), v))
	}
	if err := h.wf.SetOfferCarbonProfile(ctx, u.ID, o.ID, prof, v.Source); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Hourly carbon profile saved; quotes now use it.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/offers/%d", o.ID))
}

// handleCarbonProfileDelete returns an offer to its region's profile.
func (h *Handler) handleCarbonProfileDelete(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.DeleteOfferCarbonProfile(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "The offer uses its region's carbon profile again.")
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/offers/%d", id))
}
