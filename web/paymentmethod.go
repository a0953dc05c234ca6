package web

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// Where the payment methods live on the account page, and where the
// processor's card page sends the buyer back.
const (
	paymentMethodsAnchor = "/account#payment-methods"
	setupReturnPath      = "/account/payment-methods/return"
)

// paymentMethodsView lists the user's saved cards for the account page.
func (h *Handler) paymentMethodsView(c echo.Context) (views.PaymentMethodsView, error) {
	ms, err := h.db.ListPaymentMethods(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return views.PaymentMethodsView{}, err
	}
	v := views.PaymentMethodsView{Simulated: h.simulated()}
	for i, m := range ms {
		v.Methods = append(v.Methods, views.PaymentMethodRow{Label: m.Label, Added: formatDate(m.CreatedAt), Default: i == 0,
			RemoveURL: fmt.Sprintf("/account/payment-methods/%d/remove", m.ID)})
	}
	return v, nil
}

// handlePaymentMethodAdd sends the buyer to the processor's page to save a
// card (a checkout in setup mode), attached to the buyer's customer there.
func (h *Handler) handlePaymentMethodAdd(c echo.Context) error {
	to, err := h.wf.StartCardSetup(c.Request().Context(), *currentUser(c),
		workflow.CheckoutURLs{Success: h.absURL(setupReturnPath), Cancel: h.absURL(paymentMethodsAnchor)})
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, to)
}

// handlePaymentMethodReturn is where the processor sends the buyer with
// the card saved: the card is read from the processor and kept
// (workflow.SaveSetupCard). Following the link again keeps it once;
// another user's setup is not found.
func (h *Handler) handlePaymentMethodReturn(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	id := c.QueryParam("setup")
	if id == "" {
		return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
	}
	m, err := h.wf.SaveSetupCard(ctx, u.ID, id)
	switch code := market.ErrorCode(err); {
	case code == market.CodeConflict || code == market.CodeInvalid:
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
	case code == market.CodeNotFound:
		return err
	case err != nil:
		// A processor error about an id from the address bar: logged,
		// shown as not found.
		logger(c).Warn("card setup not read", "checkout_id", id, "err", err)
		return market.Errorf(market.CodeNotFound, "That card setup could not be found. Choose “Add a card” to try again.")
	}
	h.setFlash(c, "ok", fmt.Sprintf("%s saved: held reservations can now be paid with it in one step.", m.Label))
	return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
}

// handlePaymentMethodRemove removes one of the user's saved cards.
func (h *Handler) handlePaymentMethodRemove(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.RemovePaymentMethod(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Card removed: it will not be charged again.")
	return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
}

// handlePaySaved pays a held reservation at once with the buyer's default
// saved card (workflow.PayWithSavedMethod). A declined card, or none saved,
// comes back to the reservation page with the reason.
func (h *Handler) handlePaySaved(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	resPath := fmt.Sprintf("/reservations/%d", id)
	r, err := h.wf.PayWithSavedMethod(c.Request().Context(), currentUser(c).ID, id)
	switch code := market.ErrorCode(err); {
	case code == market.CodeConflict || code == market.CodeInvalid:
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, resPath)
	case err != nil:
		return err
	}
	msg := "Paid with your saved card. Your reservation is confirmed."
	if h.simulated() {
		msg = "Paid with your saved test card (simulated). Your reservation is confirmed."
	}
	logger(c).Info("paid with saved card", "reservation_id", r.ID, "amount_cents", int64(r.AmountCents))
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, resPath)
}

// handleLocalSetupPage is the local test processor's card page: the buyer
// picks a test card instead of typing one.
func (h *Handler) handleLocalSetupPage(c echo.Context) error {
	if err := h.wf.FindSimulatedCardSetup(currentUser(c).ID, c.Param("id")); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.LocalSetup(h.page(c, "Add a card (test mode)"), h.localSetupView(c, "")))
}

func (h *Handler) localSetupView(c echo.Context, problem string) views.LocalSetupView {
	v := views.LocalSetupView{Action: "/setup/local/" + url.PathEscape(c.Param("id")), CancelURL: paymentMethodsAnchor, Error: problem}
	for i, card := range h.wf.TestCards() {
		v.Cards = append(v.Cards, views.LocalTestCardRow{Number: card.Number, Label: market.PaymentMethodLabel(card.Brand, card.Last4),
			Outcome: card.Outcome, Declines: card.Declines, Checked: i == 0})
	}
	return v
}

// handleLocalSetup saves the chosen test card and returns the buyer as the
// processor would, through the same return handler.
func (h *Handler) handleLocalSetup(c echo.Context) error {
	if err := h.wf.CompleteSimulatedCardSetup(currentUser(c).ID, c.Param("id"), c.FormValue("card")); market.ErrorCode(err) == market.CodeInvalid {
		return render(c, http.StatusUnprocessableEntity, views.LocalSetup(h.page(c, "Add a card (test mode)"), h.localSetupView(c, market.ErrorMessage(err))))
	} else if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, setupReturnPath+"?setup="+url.QueryEscape(c.Param("id")))
}
