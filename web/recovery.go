package web

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// requireVerified lets only accounts whose e-mail address is confirmed
// book, list offers or connect payouts (market.User.MayAct). A browser
// gets a page saying so with a button to have the link mailed again; the
// API its JSON error. It runs after requireUser (or the API's auth).
func (h *Handler) requireVerified(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := currentUser(c)
		if u == nil {
			return next(c)
		}
		err := u.MayAct()
		if err == nil {
			return next(c)
		}
		if strings.HasPrefix(c.Request().URL.Path, "/api/") {
			return err
		}
		back := c.Request().URL.RequestURI()
		if c.Request().Method != http.MethodGet {
			back = "/"
			if ref, perr := url.Parse(c.Request().Referer()); perr == nil && ref.Path != "" {
				back = ref.RequestURI()
			}
		}
		p := h.page(c, "Confirm your e-mail address")
		p.User.Unverified = false // the page says it; no banner above it
		return render(c, http.StatusForbidden, views.VerifyNeeded(p, views.VerifyNeededView{Message: market.ErrorMessage(err), Next: safeNext(back)}))
	}
}

// handleSignUpSent is the page every sign-up leads to.
func (h *Handler) handleSignUpSent(c echo.Context) error {
	return render(c, http.StatusOK, views.SignUpSent(h.page(c, "Check your e-mail")))
}

// handleVerifyResend mails the signed-in person a new verification link.
func (h *Handler) handleVerifyResend(c echo.Context) error {
	u := currentUser(c)
	next := safeNext(c.FormValue("next"))
	err := h.wf.ResendVerification(c.Request().Context(), u.ID)
	if market.ErrorCode(err) == market.CodeRateLimited {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, next)
	}
	if market.ErrorCode(err) == market.CodeConflict {
		h.setFlash(c, "ok", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, next)
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("We sent a new link to %s. It works for 48 hours; links sent before no longer work.", u.Email))
	return c.Redirect(http.StatusSeeOther, next)
}

// handleVerify confirms an address from the link mailed to it.
func (h *Handler) handleVerify(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	sess, _ := currentSession(c)
	u, cleanup, err := h.wf.VerifyAddress(c.Request().Context(), c.QueryParam("token"), sess.ID)
	if err != nil {
		return h.linkProblem(c, err, "This confirmation link does not work",
			views.LinkAction{Label: "Log in to ask for a new link", URL: "/account"})
	}
	logger(c).Info("address confirmed", "user_id", u.ID, "sessions_ended", cleanup.Sessions, "tokens_revoked", cleanup.Tokens,
		"ssh_keys_removed", len(cleanup.SSHKeys))
	msg := "Your e-mail address is confirmed: you can now book, list offers and be paid out." + cleanupText(cleanup)
	if cur := currentUser(c); cur != nil && cur.ID == u.ID {
		h.setFlash(c, "ok", msg)
		return c.Redirect(http.StatusSeeOther, "/account")
	}
	h.setFlash(c, "ok", msg+" Log in to continue.")
	return c.Redirect(http.StatusSeeOther, "/login?next=%2Faccount")
}

// linkProblem renders the page for a mailed link that cannot be used (not
// found, used, expired), or passes an internal error on.
func (h *Handler) linkProblem(c echo.Context, err error, heading string, actions ...views.LinkAction) error {
	code := market.ErrorCode(err)
	if code != market.CodeNotFound && code != market.CodeConflict {
		return err
	}
	status := statusOf(code)
	return render(c, status, views.LinkProblem(h.page(c, heading),
		views.LinkProblemView{Status: status, Heading: heading, Message: market.ErrorMessage(err), Actions: actions}))
}

func (h *Handler) handleForgotForm(c echo.Context) error {
	return render(c, http.StatusOK, views.ForgotPassword(h.page(c, "Forgot your password?"), views.ForgotForm{}))
}

// handleForgot mails a reset link if the address has an account, and
// answers the same either way: the same redirect to the same page, after
// the same work (workflow.Service.RequestPasswordReset does, and costs,
// alike for unknown addresses).
func (h *Handler) handleForgot(c echo.Context) error {
	email := market.NormaliseEmail(c.FormValue("email"))
	refuse := func(status int, msg string) error {
		return render(c, status, views.ForgotPassword(h.page(c, "Forgot your password?"), views.ForgotForm{Email: email, Message: msg}))
	}
	err := h.wf.RequestPasswordReset(c.Request().Context(), email, clientNetwork(c))
	switch code := market.ErrorCode(err); code {
	case market.CodeRateLimited, market.CodeInvalid:
		return refuse(statusOf(code), market.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/password/forgot/sent")
}

func (h *Handler) handleForgotSent(c echo.Context) error {
	return render(c, http.StatusOK, views.ForgotSent(h.page(c, "Check your e-mail")))
}

// handleResetForm shows the form for a new password, if the link works;
// it does not use the link (mail scanners fetch links).
func (h *Handler) handleResetForm(c echo.Context) error {
	// The token is in this page's address: keep it out of caches and of
	// the Referer of any link followed from here.
	c.Response().Header().Set("Cache-Control", "no-store")
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	token := c.QueryParam("token")
	if err := h.db.CheckResetLink(c.Request().Context(), token, h.now()); err != nil {
		return h.resetLinkProblem(c, err)
	}
	return render(c, http.StatusOK, views.ResetPassword(h.page(c, "Choose a new password"), views.ResetForm{Token: token}))
}

func (h *Handler) resetLinkProblem(c echo.Context, err error) error {
	return h.linkProblem(c, err, "This reset link does not work", views.LinkAction{Label: "Ask for a new link", URL: "/password/forgot"})
}

// handleReset sets a new password from a reset link and logs the account
// out everywhere, this browser included.
func (h *Handler) handleReset(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	token, pw := c.FormValue("token"), c.FormValue("new_password")
	ctx := c.Request().Context()
	u, cleanup, err := h.wf.ResetPassword(ctx, token, pw, clientNetwork(c))
	switch market.ErrorCode(err) {
	case market.CodeRateLimited:
		return err
	case market.CodeInvalid:
		if err := h.db.CheckResetLink(ctx, token, h.now()); err != nil {
			return h.resetLinkProblem(c, err)
		}
		return render(c, http.StatusUnprocessableEntity, views.ResetPassword(h.page(c, "Choose a new password"),
			views.ResetForm{Token: token, Errors: market.FieldErrors(err)}))
	}
	if err != nil {
		return h.resetLinkProblem(c, err)
	}
	if err := h.endSession(c); err != nil {
		return err
	}
	logger(c).Info("password reset", "user_id", u.ID, "sessions_ended", cleanup.Sessions, "tokens_revoked", cleanup.Tokens,
		"ssh_keys_removed", len(cleanup.SSHKeys), "half_logins_ended", cleanup.HalfLogins)
	h.setFlash(c, "ok", fmt.Sprintf("Your password was changed, and every session of your account was logged out (%s). Log in with the new password.",
		sessionsText(cleanup.Sessions))+cleanupText(cleanup))
	if cleanup.Cards > 0 {
		return c.Redirect(http.StatusSeeOther, "/login?next=%2Faccount%23payment-methods")
	}
	return c.Redirect(http.StatusSeeOther, "/login")
}

// cleanupText says, after a sentence, what taking the account back
// removed (store.AccountCleanup) and which saved cards it left; "" when
// nothing.
func cleanupText(c store.AccountCleanup) string {
	var parts []string
	switch c.Tokens {
	case 0:
	case 1:
		parts = append(parts, "1 API token was revoked.")
	default:
		parts = append(parts, fmt.Sprintf("%d API tokens were revoked.", c.Tokens))
	}
	if len(c.SSHKeys) > 0 {
		keys := make([]string, len(c.SSHKeys))
		for i, k := range c.SSHKeys {
			keys[i] = strings.TrimSpace(k.Type + " " + k.Fingerprint + " " + k.Comment)
		}
		parts = append(parts, "SSH keys removed: "+strings.Join(keys, "; ")+".")
	}
	if c.HalfLogins > 0 {
		parts = append(parts, fmt.Sprintf("Half-done two-factor log-ins ended: %d.", c.HalfLogins))
	}
	if c.Cards > 0 {
		parts = append(parts, fmt.Sprintf("Your account still has %d saved card(s): if you did not save them, remove them under Payment methods once logged in (you are taken there).", c.Cards))
	}
	if len(parts) == 0 {
		return ""
	}
	return " " + strings.Join(parts, " ")
}

// sessionsText says how many sessions a reset ended.
func sessionsText(n int) string {
	if n == 1 {
		return "1 session"
	}
	return fmt.Sprintf("%d sessions", n)
}

// handleAddressChange asks, with the current password, to change the
// account's address; the new address confirms it by its link.
func (h *Handler) handleAddressChange(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	newEmail := market.NormaliseEmail(c.FormValue("new_email"))
	invalid := func(status int, errs map[string]string) error {
		v, err := h.accountView(c, errs)
		if err != nil {
			return err
		}
		v.Address.NewEmail = newEmail
		return render(c, status, views.Account(h.page(c, "Account"), v))
	}
	err := h.wf.RequestAddressChange(ctx, *u, newEmail, c.FormValue("email_password"))
	switch market.ErrorCode(err) {
	case market.CodeRateLimited:
		return invalid(http.StatusTooManyRequests, map[string]string{"new_email": market.ErrorMessage(err)})
	case market.CodeInvalid:
		return invalid(http.StatusUnprocessableEntity, market.FieldErrors(err))
	}
	if err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("We sent a link to %s. Your address changes to it when you follow the link; until then it stays %s.", newEmail, u.Email))
	return c.Redirect(http.StatusSeeOther, "/account")
}

// handleAddressConfirm changes the address from the link mailed to the new
// one.
func (h *Handler) handleAddressConfirm(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	sess, _ := currentSession(c)
	u, err := h.wf.ConfirmAddressChange(c.Request().Context(), c.QueryParam("token"), sess.ID)
	if err != nil {
		return h.linkProblem(c, err, "This confirmation link does not work", views.LinkAction{Label: "Your account", URL: "/account"})
	}
	logger(c).Info("address changed", "user_id", u.ID)
	msg := fmt.Sprintf("Your e-mail address is now %s; we told the old address, and every other session of the account was logged out.", u.Email)
	if cur := currentUser(c); cur != nil && cur.ID == u.ID {
		h.setFlash(c, "ok", msg)
		return c.Redirect(http.StatusSeeOther, "/account")
	}
	h.setFlash(c, "ok", msg+" Log in with it.")
	return c.Redirect(http.StatusSeeOther, "/login?next=%2Faccount")
}
