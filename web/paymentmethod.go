package web

import (
	"fmt"
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
)

// Where the payment methods live on the account page, and where the
// processor's card page sends the buyer back.
const (
	paymentMethodsAnchor = "/account#payment-methods"
	setupReturnPath      = "/account/payment-methods/return"
)

// localSetupProcessor is what the simulated card page needs of the local
// test processor.
type localSetupProcessor interface {
	SetupInput(checkoutID string) (billing.SetupInput, error)
	CompleteSetup(checkoutID, cardNumber string) (billing.SavedMethod, error)
}

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
	ctx := c.Request().Context()
	u := currentUser(c)
	customer, err := h.db.FindPaymentCustomer(ctx, u.ID)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return err
	}
	co, err := h.pay.CreateSetupCheckout(ctx, billing.SetupInput{UserID: u.ID, Customer: customer, BuyerEmail: u.Email,
		SuccessURL: h.absURL(setupReturnPath), CancelURL: h.absURL(paymentMethodsAnchor)})
	if err != nil {
		return err
	}
	logger(c).Info("card setup started", "user_id", u.ID, "checkout_id", co.ID)
	return c.Redirect(http.StatusSeeOther, co.URL)
}

// handlePaymentMethodReturn is where the processor sends the buyer with
// the card saved: the card is read from the processor and kept. Following
// the link again keeps it once; another user's setup is not found.
func (h *Handler) handlePaymentMethodReturn(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	id := c.QueryParam("setup")
	if id == "" {
		return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
	}
	sm, err := h.pay.RetrieveSetup(ctx, id)
	if market.ErrorCode(err) == market.CodeConflict {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
	}
	if err != nil || sm.UserID != u.ID {
		if err != nil {
			logger(c).Warn("card setup not read", "checkout_id", id, "err", err)
		}
		return market.Errorf(market.CodeNotFound, "That card setup could not be found. Choose “Add a card” to try again.")
	}
	m, err := h.db.SavePaymentMethod(ctx, u.ID, market.PaymentMethod{Customer: sm.Customer, ProcessorMethodID: sm.PaymentMethodID, Label: sm.Label}, h.now())
	if market.ErrorCode(err) == market.CodeInvalid {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, paymentMethodsAnchor)
	}
	if err != nil {
		return err
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
	if err := h.db.RemovePaymentMethod(c.Request().Context(), currentUser(c).ID, id, h.now()); err != nil {
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

// localSetup finds a simulated card setup; only the user who started it
// may see or complete it.
func (h *Handler) localSetup(c echo.Context) (localSetupProcessor, billing.SetupInput, error) {
	lp, ok := h.pay.(localSetupProcessor)
	if !ok {
		return nil, billing.SetupInput{}, echo.ErrNotFound
	}
	in, err := lp.SetupInput(c.Param("id"))
	if err != nil || in.UserID != currentUser(c).ID {
		return nil, billing.SetupInput{}, market.Errorf(market.CodeNotFound, "This card page does not exist (choose “Add a card” on your account page again).")
	}
	return lp, in, nil
}

// handleLocalSetupPage is the local test processor's card page: the buyer
// picks a test card instead of typing one.
func (h *Handler) handleLocalSetupPage(c echo.Context) error {
	if _, _, err := h.localSetup(c); err != nil {
		return err
	}
	return render(c, http.StatusOK, views.LocalSetup(h.page(c, "Add a card (test mode)"), h.localSetupView(c, "")))
}

func (h *Handler) localSetupView(c echo.Context, problem string) views.LocalSetupView {
	v := views.LocalSetupView{Action: "/setup/local/" + url.PathEscape(c.Param("id")), CancelURL: paymentMethodsAnchor, Error: problem}
	for i, card := range billing.LocalTestCards() {
		v.Cards = append(v.Cards, views.LocalTestCardRow{Number: card.Number, Label: market.PaymentMethodLabel(card.Brand, card.Last4),
			Outcome: card.Outcome, Declines: card.Declines, Checked: i == 0})
	}
	return v
}

// handleLocalSetup saves the chosen test card and returns the buyer as the
// processor would, through the same return handler.
func (h *Handler) handleLocalSetup(c echo.Context) error {
	lp, _, err := h.localSetup(c)
	if err != nil {
		return err
	}
	if _, err := lp.CompleteSetup(c.Param("id"), c.FormValue("card")); market.ErrorCode(err) == market.CodeInvalid {
		return render(c, http.StatusUnprocessableEntity, views.LocalSetup(h.page(c, "Add a card (test mode)"), h.localSetupView(c, market.ErrorMessage(err))))
	} else if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, setupReturnPath+"?setup="+url.QueryEscape(c.Param("id")))
}
