package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// pathID reads the :id path parameter; a malformed id is simply not found.
func pathID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, market.Errorf(market.CodeNotFound, "There is nothing at this address.")
	}
	return id, nil
}

func (h *Handler) handleProviderOffers(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	offers, err := h.db.ListProviderOffers(ctx, u.ID)
	if err != nil {
		return err
	}
	edits, err := h.db.OffersWithRevisions(ctx, u.ID)
	if err != nil {
		return err
	}
	v := views.ProviderOffersView{}
	for _, o := range offers {
		id := strconv.FormatInt(o.ID, 10)
		v.Offers = append(v.Offers, views.ProviderOfferRow{
			ID: id, Title: o.Title, URL: "/offers/" + id, EditURL: "/provider/offers/" + id + "/edit",
			StateURL: "/provider/offers/" + id + "/state", Summary: offerSummary(o), Price: o.PriceCentsPerDeviceHour.String(),
			Review: string(o.Review), ReviewLabel: reviewLabel(o.Review), ReviewNote: o.ReviewNote, State: string(o.State),
			EditPending: edits[o.ID],
			CanEdit:     o.State != market.OfferWithdrawn,
			CanPause:    o.State == market.OfferActive,
			CanResume:   o.State == market.OfferPaused,
			CanWithdraw: o.State != market.OfferWithdrawn,
		})
	}
	return render(c, http.StatusOK, views.ProviderOffers(h.page(c, "My offers"), v))
}

func reviewLabel(r market.ReviewState) string {
	switch r {
	case market.ReviewPending:
		return "pending review"
	case market.ReviewApproved:
		return "approved"
	case market.ReviewRejected:
		return "rejected"
	case market.ReviewChangesRequested:
		return "changes requested"
	}
	return string(r)
}

// unlistedReason says in words why an offer that is not listed is not:
// "it is pending review", "it is paused", or both.
func unlistedReason(o market.Offer) string {
	var why []string
	switch o.Review {
	case market.ReviewApproved:
	case market.ReviewPending:
		why = append(why, "it is pending review")
	case market.ReviewChangesRequested:
		why = append(why, "the reviewer asked for changes")
	case market.ReviewRejected:
		why = append(why, "the reviewer rejected it")
	default:
		why = append(why, "its review is "+reviewLabel(o.Review))
	}
	switch o.State {
	case market.OfferActive:
	case market.OfferPaused:
		why = append(why, "it is paused")
	case market.OfferWithdrawn:
		why = append(why, "it is withdrawn")
	default:
		why = append(why, "it is "+string(o.State))
	}
	return strings.Join(why, ", and ")
}

// offerForm renders the offer form with values as typed. Every figure
// above the catalogue's published figure carries its warning, and the
// form asks the provider to confirm them before submitting; checked says
// the provider pressed "Check figures", so a clean result says so.
func (h *Handler) offerForm(c echo.Context, status int, heading, action, submit string, values views.OfferFormValues, errs map[string]string, note string, checked bool) error {
	v := views.OfferFormView{Heading: heading, Action: action, Submit: submit, Values: values, Errors: errs, ReviewNote: note}
	offerFormOptions(&v)
	o, _ := offerFromForm(values)
	above := map[string]string{}
	for _, f := range market.FiguresAboveCatalogue(o) {
		above[string(f.Kind)] = f.ProviderMessage()
	}
	for i := range v.Values.Figures {
		fi := &v.Values.Figures[i]
		k := market.FigureKind(fi.Kind)
		if pub, ok := market.PublishedFigure(values.Accelerator, k); ok {
			fi.Published = market.FormatFigure(k, pub)
		}
		fi.Warning = above[fi.Kind]
	}
	v.FiguresWarned = len(above) > 0
	if checked && !v.FiguresWarned && len(errs) == 0 {
		v.FiguresChecked = "No figure is above the catalogue's published figures for this model. Submit when you are ready."
	}
	return render(c, status, views.OfferForm(h.page(c, heading), v))
}

// figuresNeedConfirming reports whether a valid offer's form must be shown
// again before it is saved: the provider asked to check the figures, or
// some are above the catalogue's and the provider has not confirmed them.
func figuresNeedConfirming(c echo.Context, o market.Offer) bool {
	return c.FormValue("check") != "" || (len(market.FiguresAboveCatalogue(o)) > 0 && c.FormValue("figures_confirmed") == "")
}

func (h *Handler) handleOfferNew(c echo.Context) error {
	return h.offerForm(c, http.StatusOK, "List capacity", "/provider/offers", "Submit for review", newOfferDefaults(h.now()), nil, "", false)
}

func (h *Handler) handleOfferCreate(c echo.Context) error {
	u := currentUser(c)
	values := readOfferForm(c)
	o, problems := offerFromForm(values)
	if err := validateOfferForm(&o, problems, h); err != nil {
		return h.offerForm(c, http.StatusUnprocessableEntity, "List capacity", "/provider/offers", "Submit for review", values, market.FieldErrors(err), "", false)
	}
	if figuresNeedConfirming(c, o) {
		return h.offerForm(c, http.StatusOK, "List capacity", "/provider/offers", "Submit for review", values, nil, "", true)
	}
	o.ProviderID = u.ID
	created, approved, err := h.wf.CreateOffer(c.Request().Context(), o)
	if err != nil {
		return err
	}
	if approved {
		h.setFlash(c, "ok", fmt.Sprintf("“%s” is listed: approved automatically on your track record.", created.Title))
		return c.Redirect(http.StatusSeeOther, "/provider/offers")
	}
	h.setFlash(c, "ok", fmt.Sprintf("“%s” is submitted and pending review. It will be listed once an administrator approves it.", created.Title))
	return c.Redirect(http.StatusSeeOther, "/provider/offers")
}

// validateOfferForm merges parse problems with the domain's validation, so
// every field's first problem is shown at once.
func validateOfferForm(o *market.Offer, parse market.Problems, h *Handler) error {
	err := market.ValidateOffer(o, h.now())
	for k, msg := range market.FieldErrors(err) {
		parse.Add(k, msg)
	}
	return parse.Err()
}

func (h *Handler) handleOfferEdit(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	o, err := h.db.FindProviderOffer(ctx, currentUser(c).ID, id)
	if err != nil {
		return err
	}
	if o.State == market.OfferWithdrawn {
		return market.Errorf(market.CodeConflict, "This offer is withdrawn and can no longer be edited.")
	}
	// An edit waiting for review is what the provider goes on editing.
	if rev, held, err := h.db.FindOfferRevision(ctx, currentUser(c).ID, id); err != nil {
		return err
	} else if held {
		o = rev
	}
	return h.offerForm(c, http.StatusOK, "Edit offer", fmt.Sprintf("/provider/offers/%d", id), "Save and resubmit for review", offerFormValues(o), nil, o.ReviewNote, false)
}

func (h *Handler) handleOfferUpdate(c echo.Context) error {
	u := currentUser(c)
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	// Ownership first: another provider's offer is not found, whatever was posted.
	current, err := h.db.FindProviderOffer(ctx, u.ID, id)
	if err != nil {
		return err
	}
	values := readOfferForm(c)
	for i := range values.Figures {
		if f, ok := current.Figure(market.FigureKind(values.Figures[i].Kind)); ok && f.Basis == market.FigureVerified {
			values.Figures[i].Verified = market.FormatFigureValue(f.Kind, f.Value) == values.Figures[i].Value
		}
	}
	o, problems := offerFromForm(values)
	action := fmt.Sprintf("/provider/offers/%d", id)
	if err := validateOfferForm(&o, problems, h); err != nil {
		return h.offerForm(c, http.StatusUnprocessableEntity, "Edit offer", action, "Save and resubmit for review", values, market.FieldErrors(err), current.ReviewNote, false)
	}
	if figuresNeedConfirming(c, o) {
		return h.offerForm(c, http.StatusOK, "Edit offer", action, "Save and resubmit for review", values, nil, current.ReviewNote, true)
	}
	o.ID = id
	updated, outcome, err := h.wf.UpdateOffer(ctx, u.ID, o)
	if market.ErrorCode(err) == market.CodeInvalid {
		return h.offerForm(c, http.StatusUnprocessableEntity, "Edit offer", action, "Save and resubmit for review", values, market.FieldErrors(err), current.ReviewNote, false)
	}
	if err != nil {
		return err
	}
	switch outcome {
	case workflow.EditListed:
		h.setFlash(c, "ok", fmt.Sprintf("“%s” is saved and still listed: a lower price or a longer window applies at once.", updated.Title))
		return c.Redirect(http.StatusSeeOther, "/provider/offers")
	case workflow.EditApproved:
		h.setFlash(c, "ok", fmt.Sprintf("“%s” is saved and listed: approved automatically on your track record.", updated.Title))
		return c.Redirect(http.StatusSeeOther, "/provider/offers")
	case workflow.EditHeld:
		h.setFlash(c, "ok", fmt.Sprintf("Your edit of “%s” is saved and waits for review; the offer stays listed as it was until an admin approves the edit.", updated.Title))
		return c.Redirect(http.StatusSeeOther, "/provider/offers")
	}
	h.setFlash(c, "ok", fmt.Sprintf("“%s” is saved and back in review.", updated.Title))
	return c.Redirect(http.StatusSeeOther, "/provider/offers")
}

func (h *Handler) handleOfferState(c echo.Context) error {
	u := currentUser(c)
	id, err := pathID(c)
	if err != nil {
		return err
	}
	state := market.OfferState(c.FormValue("state"))
	if err := h.wf.SetOfferState(c.Request().Context(), u.ID, id, state); err != nil {
		return err
	}
	msg := map[market.OfferState]string{
		market.OfferActive:    "Offer resumed.",
		market.OfferPaused:    "Offer paused: it is hidden from the catalogue until you resume it.",
		market.OfferWithdrawn: "Offer withdrawn.",
	}[state]
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, "/provider/offers")
}
