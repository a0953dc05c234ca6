package web

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/billing"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// localProcessor is what the simulated payment and onboarding pages need
// of the local test processor (billing.Local, or a test wrapper around it).
type localProcessor interface {
	CheckoutInput(checkoutID string) (billing.CheckoutInput, error)
	CompleteCheckout(checkoutID string, succeed bool, now time.Time) ([]billing.Event, error)
	CompleteOnboarding(accountID string, now time.Time) (billing.Event, error)
}

// Billing limits, kept together.
const (
	webhookBodyLimit = "64K"
	// minCheckoutExpiry is the shortest checkout expiry Stripe accepts.
	minCheckoutExpiry = 31 * time.Minute
)

// simulated reports whether payments only pretend to move money.
func (h *Handler) simulated() bool { return h.pay.Simulated() }

// absURL makes a path absolute with the public base URL.
func (h *Handler) absURL(path string) string { return h.baseURL + path }

// handlePay starts paying a held reservation: a hosted checkout for its
// amount, and the buyer is sent there.
func (h *Handler) handlePay(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	r, err := h.db.FindBuyerReservation(ctx, u.ID, id)
	if err != nil {
		return err
	}
	now := h.now()
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	in := billing.CheckoutInput{
		ReservationID: r.ID, Amount: r.AmountCents, BuyerEmail: u.Email,
		Description: fmt.Sprintf("Reservation #%d: %d devices, %s – %s", r.ID, r.Devices(), formatTime(r.Start()), formatTime(r.End())),
		SuccessURL:  h.absURL(resPath + "?paid=1"), CancelURL: h.absURL(resPath),
		IdempotencyKey: market.EntryKey(r.ID, "checkout", 0),
	}
	// Stripe refuses expiries under 30 minutes away; a checkout that
	// outlives the hold is safe anyway: a late payment is refunded in full.
	if r.HoldExpiresAt.Sub(now) >= minCheckoutExpiry {
		in.ExpiresAt = r.HoldExpiresAt
	}
	if r.State != market.ReservationHeld || !now.Before(r.HoldExpiresAt) {
		return market.Errorf(market.CodeConflict, "Only a held reservation can be paid, before its hold expires.")
	}
	co, err := h.pay.CreateCheckout(ctx, in)
	if err != nil {
		return err
	}
	if err := h.db.RecordCheckout(ctx, u.ID, r.ID, co.ID, r.AmountCents, now); err != nil {
		return err
	}
	logger(c).Info("checkout started", "reservation_id", r.ID, "checkout_id", co.ID, "amount_cents", int64(r.AmountCents))
	return c.Redirect(http.StatusSeeOther, co.URL)
}

// handleLocalPayPage is the local test processor's payment page.
func (h *Handler) handleLocalPayPage(c echo.Context) error {
	in, r, err := h.localCheckout(c)
	if err != nil {
		return err
	}
	v := views.LocalPayView{
		ReservationID: strconv.FormatInt(r.ID, 10), Description: in.Description, Amount: in.Amount.String(),
		Action: "/pay/local/" + url.PathEscape(c.Param("id")), CancelURL: fmt.Sprintf("/reservations/%d", r.ID),
	}
	return render(c, http.StatusOK, views.LocalPay(h.page(c, "Pay (test mode)"), v))
}

// handleLocalPay is the buyer pressing pay (or decline) on the simulated
// page. The events it produces go through the webhook's handling code.
func (h *Handler) handleLocalPay(c echo.Context) error {
	_, r, err := h.localCheckout(c)
	if err != nil {
		return err
	}
	succeed := c.FormValue("outcome") != "decline"
	events, err := h.local.CompleteCheckout(c.Param("id"), succeed, h.now())
	if err != nil {
		return err
	}
	for _, ev := range events {
		if err := h.applyEvent(c.Request().Context(), logger(c), ev); err != nil {
			return err
		}
	}
	p, err := h.db.FindPayment(c.Request().Context(), r.ID)
	switch {
	case err != nil:
		return err
	case p.Status == store.PaymentPaid:
		h.setFlash(c, "ok", "Payment received (simulated). Your reservation is confirmed.")
	case p.Status == store.PaymentRefundPending || p.Status == store.PaymentRefunded:
		h.setFlash(c, "error", "The hold had expired before the payment arrived, so the payment is refunded in full.")
	default:
		h.setFlash(c, "error", "The payment was declined (simulated). You can try again while the hold lasts.")
	}
	return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d", r.ID))
}

// localCheckout finds a simulated checkout and its reservation; only the
// reservation's buyer may see or pay it.
func (h *Handler) localCheckout(c echo.Context) (billing.CheckoutInput, market.Reservation, error) {
	if h.local == nil {
		return billing.CheckoutInput{}, market.Reservation{}, echo.ErrNotFound
	}
	in, err := h.local.CheckoutInput(c.Param("id"))
	if err != nil {
		return billing.CheckoutInput{}, market.Reservation{}, market.Errorf(market.CodeNotFound, "This payment page does not exist (start the payment again from the reservation).")
	}
	r, err := h.db.FindBuyerReservation(c.Request().Context(), currentUser(c).ID, in.ReservationID)
	if err != nil {
		return billing.CheckoutInput{}, market.Reservation{}, err
	}
	return in, r, nil
}

// handleStripeWebhook receives the processor's events: verified, then
// applied once each. A bad or missing signature is refused with 400 and
// changes nothing; an error in handling is a 500 so the processor retries.
func (h *Handler) handleStripeWebhook(c echo.Context) error {
	body, err := io.ReadAll(c.Request().Body)
	if err != nil {
		return echo.NewHTTPError(http.StatusRequestEntityTooLarge)
	}
	ev, err := h.pay.ParseWebhook(body, c.Request().Header.Get("Stripe-Signature"))
	if err != nil {
		logger(c).Warn("webhook refused", "err", err, "remote", c.RealIP())
		return c.JSON(http.StatusBadRequest, webhookReply{Error: market.ErrorMessage(err)})
	}
	if err := h.applyEvent(c.Request().Context(), logger(c), ev); err != nil {
		logger(c).Error("webhook not applied", "event_id", ev.ID, "type", ev.StripeType, "err", err)
		return c.JSON(http.StatusInternalServerError, webhookReply{Error: "not processed; retry later"})
	}
	return c.JSON(http.StatusOK, webhookReply{Received: true})
}

type webhookReply struct {
	Received bool   `json:"received,omitempty"`
	Error    string `json:"error,omitempty"`
}

// applyEvent acts on one verified processor event (workflow.ApplyEvent).
func (h *Handler) applyEvent(ctx context.Context, log *slog.Logger, ev billing.Event) error {
	return h.wf.ApplyEvent(ctx, log, ev)
}

// handlePayoutConnect creates the provider's connected account if needed
// and sends them to the processor's onboarding.
func (h *Handler) handlePayoutConnect(c echo.Context) error {
	ctx := c.Request().Context()
	u := currentUser(c)
	acct, err := h.db.FindPayoutAccount(ctx, u.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		a, cerr := h.pay.CreateConnectedAccount(ctx, u.Email, fmt.Sprintf("provider_%d_account", u.ID))
		if cerr != nil {
			return cerr
		}
		acct, err = h.db.CreatePayoutAccount(ctx, u.ID, a.ID, h.now())
	}
	if err != nil {
		return err
	}
	link, err := h.pay.AccountLink(ctx, acct.AccountID, h.absURL("/provider/payouts/refresh"), h.absURL("/provider/payouts/return"))
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
	ctx := c.Request().Context()
	u := currentUser(c)
	acct, err := h.db.FindPayoutAccount(ctx, u.ID)
	if err != nil {
		return err
	}
	a, err := h.pay.RetrieveAccount(ctx, acct.AccountID)
	if err != nil {
		return err
	}
	now := h.now()
	if _, err := h.db.UpdatePayoutAccount(ctx, store.AccountUpdate{AccountID: a.ID, DetailsSubmitted: a.DetailsSubmitted,
		ChargesEnabled: a.ChargesEnabled, PayoutsEnabled: a.PayoutsEnabled, At: now}, now); err != nil {
		return err
	}
	if a.Onboarded() {
		h.setFlash(c, "ok", "Payouts are connected. Payouts held for you are released with the next settlement run.")
	} else {
		h.setFlash(c, "error", "Onboarding is not finished yet; payouts stay held until it is.")
	}
	return c.Redirect(http.StatusSeeOther, "/provider/reservations")
}

// handleLocalOnboardPage is the local test processor's onboarding page.
func (h *Handler) handleLocalOnboardPage(c echo.Context) error {
	acct, err := h.localAccount(c)
	if err != nil {
		return err
	}
	v := views.LocalOnboardView{AccountID: acct.AccountID, Action: "/connect/local/" + url.PathEscape(acct.AccountID)}
	return render(c, http.StatusOK, views.LocalOnboard(h.page(c, "Connect payouts (test mode)"), v))
}

// handleLocalOnboard completes simulated onboarding; its account event goes
// through the webhook's handling code.
func (h *Handler) handleLocalOnboard(c echo.Context) error {
	acct, err := h.localAccount(c)
	if err != nil {
		return err
	}
	ev, err := h.local.CompleteOnboarding(acct.AccountID, h.now())
	if err != nil {
		return err
	}
	if err := h.applyEvent(c.Request().Context(), logger(c), ev); err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/provider/payouts/return")
}

func (h *Handler) localAccount(c echo.Context) (store.PayoutAccount, error) {
	if h.local == nil {
		return store.PayoutAccount{}, echo.ErrNotFound
	}
	acct, err := h.db.FindPayoutAccount(c.Request().Context(), currentUser(c).ID)
	if err != nil || acct.AccountID != c.Param("id") {
		return store.PayoutAccount{}, market.Errorf(market.CodeNotFound, "That payout account could not be found.")
	}
	return acct, nil
}
