package web

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// Billing limits, kept together.
const webhookBodyLimit = "64K"

// simulated reports whether payments only pretend to move money.
func (h *Handler) simulated() bool { return h.wf.Simulated() }

// absURL makes a path absolute with the public base URL.
func (h *Handler) absURL(path string) string { return h.baseURL + path }

// handlePay starts paying a held reservation: a hosted checkout for its
// amount (workflow.StartCheckout), and the buyer is sent there.
func (h *Handler) handlePay(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	resPath := fmt.Sprintf("/reservations/%d", id)
	to, err := h.wf.StartCheckout(c.Request().Context(), *currentUser(c), id,
		workflow.CheckoutURLs{Success: h.absURL(resPath + "?paid=1"), Cancel: h.absURL(resPath)},
		func(r market.Reservation) string {
			return fmt.Sprintf("Reservation #%d: %s, %s – %s", r.ID, plural(r.Devices(), "device"), formatTime(r.Start()), formatTime(r.End()))
		})
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, to)
}

// handleLocalPayPage is the local test processor's payment page.
func (h *Handler) handleLocalPayPage(c echo.Context) error {
	co, err := h.wf.FindSimulatedCheckout(c.Request().Context(), currentUser(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	v := views.LocalPayView{
		ReservationID: strconv.FormatInt(co.ReservationID, 10), Description: co.Description, Amount: co.Amount.String(),
		Action: "/pay/local/" + url.PathEscape(c.Param("id")), CancelURL: fmt.Sprintf("/reservations/%d", co.ReservationID),
	}
	if co.TopUpID > 0 {
		v.CancelURL = "/balance"
	}
	return render(c, http.StatusOK, views.LocalPay(h.page(c, "Pay (test mode)"), v))
}

// handleLocalPay is the buyer pressing pay (or decline) on the simulated
// page. The events it produces go through the webhook's handling code.
func (h *Handler) handleLocalPay(c echo.Context) error {
	succeed := c.FormValue("outcome") != "decline"
	co, err := h.wf.FindSimulatedCheckout(c.Request().Context(), currentUser(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	p, err := h.wf.CompleteSimulatedCheckout(c.Request().Context(), logger(c), currentUser(c).ID, c.Param("id"), succeed)
	switch {
	case err != nil:
		return err
	case co.TopUpID > 0 && succeed:
		h.setFlash(c, "ok", fmt.Sprintf("Payment received (simulated). Your balance is topped up by %s.", co.Amount))
		return c.Redirect(http.StatusSeeOther, "/balance")
	case co.TopUpID > 0:
		h.setFlash(c, "error", "The payment was declined (simulated). Nothing was charged.")
		return c.Redirect(http.StatusSeeOther, "/balance")
	case p.Status == store.PaymentPaid:
		h.setFlash(c, "ok", "Payment received (simulated). Your reservation is confirmed.")
	case p.Status == store.PaymentRefundPending || p.Status == store.PaymentRefunded:
		h.setFlash(c, "error", "The hold had expired before the payment arrived, so the payment is refunded in full.")
	default:
		h.setFlash(c, "error", "The payment was declined (simulated). You can try again while the hold lasts.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", p.ReservationID))
}

// handleStripeWebhook receives the processor's events: verified, then
// applied once each. A bad or missing signature is refused with 400 and
// changes nothing; an error in handling is a 500 so the processor retries.
func (h *Handler) handleStripeWebhook(c echo.Context) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
	}
	switch err := h.wf.ApplyWebhook(c.Request().Context(), logger(c), body, c.Request().Header.Get("Stripe-Signature")); {
	case market.ErrorCode(err) == market.CodeInvalid:
		logger(c).Warn("webhook refused", "reason", market.ErrorMessage(err), "remote", c.RealIP())
		return c.JSON(http.StatusBadRequest, webhookReply{Error: market.ErrorMessage(err)})
	case err != nil:
		return c.JSON(http.StatusInternalServerError, webhookReply{Error: "not processed; retry later"})
	}
	return c.JSON(http.StatusOK, webhookReply{Received: true})
}

type webhookReply struct {
	Received bool   `json:"received,omitempty"`
	Error    string `json:"error,omitempty"`
}

// handlePayoutConnect creates the provider's connected account if needed
// and sends them to the processor's onboarding.
func (h *Handler) handlePayoutConnect(c echo.Context) error {
	link, err := h.wf.ConnectPayouts(c.Request().Context(), *currentUser(c), h.absURL("/provider/payouts/refresh"), h.absURL("/provider/payouts/return"))
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, link)
}

// handlePayoutRefresh is where the processor sends a provider whose
// onboarding link expired or was already used. A GET changes nothing: it
// leads back to the payouts panel, whose button (a POST) makes a new link.
func (h *Handler) handlePayoutRefresh(c echo.Context) error {
	h.setFlash(c, "error", "That onboarding link expired. Choose “Finish connecting payouts” to continue where you left off.")
	return c.Redirect(http.StatusSeeOther, "/provider/reservations")
}

// handlePayoutReturn is where onboarding sends the provider back: the
// account's state is read from the processor (the webhook may be later).
func (h *Handler) handlePayoutReturn(c echo.Context) error {
	onboarded, err := h.wf.RefreshPayoutAccount(c.Request().Context(), currentUser(c).ID)
	if err != nil {
		return err
	}
	if onboarded {
		h.setFlash(c, "ok", "Payouts are connected. Payouts held for you are released with the next settlement run.")
	} else {
		h.setFlash(c, "error", "Onboarding is not finished yet; payouts stay held until it is.")
	}
	return c.Redirect(http.StatusSeeOther, "/provider/reservations")
}

// handleLocalOnboardPage is the local test processor's onboarding page.
func (h *Handler) handleLocalOnboardPage(c echo.Context) error {
	acct, err := h.wf.FindSimulatedPayoutAccount(c.Request().Context(), currentUser(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	v := views.LocalOnboardView{AccountID: acct.AccountID, Action: "/connect/local/" + url.PathEscape(acct.AccountID)}
	return render(c, http.StatusOK, views.LocalOnboard(h.page(c, "Connect payouts (test mode)"), v))
}

// handleLocalOnboard completes simulated onboarding; its account event goes
// through the webhook's handling code.
func (h *Handler) handleLocalOnboard(c echo.Context) error {
	if err := h.wf.CompleteSimulatedOnboarding(c.Request().Context(), logger(c), currentUser(c).ID, c.Param("id")); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/provider/payouts/return")
}
