package web

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

// Two-factor sign-in (TOTP, RFC 6238): the secret's sealing and the codes'
// matching are account's, the steps workflow's; here are the pages.

const (
	// loginCodeCookie carries the raw id of a half-done login
	// (store.LoginChallenge), signed; recoveryCodesCookie the recovery codes
	// just made, encrypted, for the page the redirect shows them on.
	loginCodeCookie     = "gm_login_code"
	recoveryCodesCookie = "gm_recovery_codes"
)

// askSecondFactor is the login's step after a correct password when the
// account has two-factor sign-in on: the workflow recorded a half-done
// login (no session: the password alone grants nothing); the browser gets
// its id and is sent to the code page.
func (h *Handler) askSecondFactor(c echo.Context, in workflow.LoggedIn) error {
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	sess.Values = map[any]any{"id": in.Challenge}
	sess.Options.MaxAge = int(market.LoginChallengeTTL.Seconds())
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		return err
	}
	logger(c).Info("password accepted, code asked", "user_id", in.User.ID)
	return c.Redirect(http.StatusSeeOther, "/login/code")
}

// loginChallenge reports whether the browser has a half-done login; when
// not, a flash and a redirect to the login page are already made.
func (h *Handler) loginChallenge(c echo.Context) (bool, error) {
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	id, _ := sess.Values["id"].(string)
	_, err := h.db.FindLoginChallenge(c.Request().Context(), id, h.now())
	if market.ErrorCode(err) == market.CodeNotFound {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return false, c.Redirect(http.StatusSeeOther, "/login")
	}
	return err == nil, err
}

func (h *Handler) clearLoginChallenge(c echo.Context) {
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	sess.Values = map[any]any{}
	sess.Options.MaxAge = -1
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("login code cookie not cleared", "err", err)
	}
}

func (h *Handler) handleLoginCodeForm(c echo.Context) error {
	if ok, err := h.loginChallenge(c); !ok || err != nil {
		return err
	}
	return render(c, http.StatusOK, views.LoginCode(h.page(c, "Enter your code"), views.LoginCodeForm{}))
}

func (h *Handler) handleLoginCode(c echo.Context) error {
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	id, _ := sess.Values["id"].(string)
	fail := func(status int, msg, field string) error {
		return render(c, status, views.LoginCode(h.page(c, "Enter your code"), views.LoginCodeForm{Message: msg, Error: field}))
	}
	in, err := h.wf.LogInWithCode(c.Request().Context(), workflow.CodeLogIn{Challenge: id, Code: c.FormValue("code"),
		Network: clientNetwork(c), OldSession: oldSession(c)})
	switch market.ErrorCode(err) {
	case market.CodeNotFound:
		h.setFlash(c, "error", market.ErrorMessage(err))
		return c.Redirect(http.StatusSeeOther, "/login")
	case market.CodeRateLimited:
		return fail(http.StatusTooManyRequests, market.ErrorMessage(err), "")
	case market.CodeInvalid:
		return fail(http.StatusUnprocessableEntity, "", market.FieldErrors(err)["code"])
	case market.CodeUnauthorized:
		return fail(http.StatusUnauthorized, "", market.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	if in.Recovery {
		h.setFlash(c, "ok", fmt.Sprintf("Signed in with a recovery code; %d left. Turn two-factor sign-in off and on again on your account page for new codes.", in.RecoveryLeft))
	}
	h.clearLoginChallenge(c)
	if err := h.setSession(c, in.Session); err != nil {
		return err
	}
	h.rememberDevice(c, in.User.Email)
	logger(c).Info("logged in", "user_id", in.User.ID, "second_factor", !in.Recovery)
	return c.Redirect(http.StatusSeeOther, safeNext(in.Next))
}

// requireTwoFactor sends an account that must have two-factor sign-in
// (market.TwoFactorRequired: administrators) and has not turned it on to
// set it up, before the page it asked for.
func (h *Handler) requireTwoFactor(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		u := currentUser(c)
		if u == nil || !market.TwoFactorRequired(*u) {
			return next(c)
		}
		tf, err := h.db.FindTwoFactor(c.Request().Context(), u.ID)
		if err != nil {
			return err
		}
		if !tf.Enabled() {
			h.setFlash(c, "error", "Turn on two-factor sign-in to use the admin pages.")
			return c.Redirect(http.StatusSeeOther, "/account/two-factor")
		}
		return next(c)
	}
}

// twoFactorSummary is the account page's two-factor card.
func (h *Handler) twoFactorSummary(c echo.Context) (views.TwoFactorSummary, error) {
	u := currentUser(c)
	tf, err := h.db.FindTwoFactor(c.Request().Context(), u.ID)
	if err != nil {
		return views.TwoFactorSummary{}, err
	}
	return views.TwoFactorSummary{On: tf.Enabled(), RecoveryLeft: recoveryLeftText(tf.RecoveryLeft), Required: market.TwoFactorRequired(*u)}, nil
}

func recoveryLeftText(n int) string {
	return fmt.Sprintf("%d of %d recovery codes unused", n, market.RecoveryCodeCount)
}

// twoFactorView is the two-factor page of the signed-in user.
func (h *Handler) twoFactorView(c echo.Context, errs map[string]string) (views.TwoFactorView, error) {
	u := currentUser(c)
	tf, err := h.db.FindTwoFactor(c.Request().Context(), u.ID)
	if err != nil {
		return views.TwoFactorView{}, err
	}
	v := views.TwoFactorView{Required: market.TwoFactorRequired(*u) && !tf.Enabled(), On: tf.Enabled(), Pending: tf.Pending(),
		Account: u.Email, Issuer: account.Issuer, RecoveryLeft: recoveryLeftText(tf.RecoveryLeft), Errors: errs}
	if tf.Enabled() {
		v.EnabledAt = formatDate(tf.EnabledAt)
	}
	if tf.Pending() {
		secret, err := h.wf.TwoFactorSecret(tf)
		if err != nil {
			return v, err
		}
		if v.QR, err = totpQR(secret, u.Email); err != nil {
			return v, err
		}
		v.Secret = groupsOfFour(secret)
	}
	return v, nil
}

// totpQR is the otpauth:// URL of the secret as a QR code: a PNG as a
// data: URI, drawn here so the page needs no script.
func totpQR(secret, accountName string) (string, error) {
	png, err := account.QRCode(secret, accountName, 200)
	if err != nil {
		return "", err
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(png), nil
}

// groupsOfFour writes a base32 secret in groups of four for copying by hand.
func groupsOfFour(s string) string {
	var parts []string
	for len(s) > 4 {
		parts, s = append(parts, s[:4]), s[4:]
	}
	return strings.Join(append(parts, s), " ")
}

func (h *Handler) handleTwoFactor(c echo.Context) error {
	v, err := h.twoFactorView(c, nil)
	if err != nil {
		return err
	}
	if v.RecoveryCodes = h.takeRecoveryCodes(c); len(v.RecoveryCodes) > 0 || v.Pending {
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return render(c, http.StatusOK, views.TwoFactorPage(h.page(c, "Two-factor sign-in"), v))
}

// handleTwoFactorStart makes a new secret and shows it to set up.
func (h *Handler) handleTwoFactorStart(c echo.Context) error {
	if err := h.wf.BeginTwoFactor(c.Request().Context(), *currentUser(c)); market.ErrorCode(err) == market.CodeConflict {
		h.setFlash(c, "error", market.ErrorMessage(err))
	} else if err != nil {
		return err
	}
	return c.Redirect(http.StatusSeeOther, "/account/two-factor")
}

// handleTwoFactorConfirm turns two-factor sign-in on once the person
// enters a current code from the secret they were shown.
func (h *Handler) handleTwoFactorConfirm(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	invalid := func(status int, msg string) error {
		v, err := h.twoFactorView(c, map[string]string{"code": msg})
		if err != nil {
			return err
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return render(c, status, views.TwoFactorPage(h.page(c, "Two-factor sign-in"), v))
	}
	if tf, err := h.db.FindTwoFactor(ctx, u.ID); err != nil {
		return err
	} else if !tf.Pending() {
		return c.Redirect(http.StatusSeeOther, "/account/two-factor")
	}
	codes, err := h.wf.EnableTwoFactor(ctx, u.ID, c.FormValue("code"), clientNetwork(c))
	switch market.ErrorCode(err) {
	case market.CodeRateLimited:
		return invalid(http.StatusTooManyRequests, market.ErrorMessage(err))
	case market.CodeInvalid:
		return invalid(http.StatusUnprocessableEntity, market.FieldErrors(err)["code"])
	}
	if err != nil {
		return err
	}
	if err := h.setRecoveryCodes(c, codes); err != nil {
		return err
	}
	logger(c).Info("two-factor sign-in turned on", "user_id", u.ID)
	h.setFlash(c, "ok", "Two-factor sign-in is on. Save your recovery codes below: they are shown only once.")
	return c.Redirect(http.StatusSeeOther, "/account/two-factor")
}

// handleTwoFactorDisable turns two-factor sign-in off for a person who
// shows a current code or their password.
func (h *Handler) handleTwoFactorDisable(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	invalid := func(status int, msg string) error {
		v, err := h.twoFactorView(c, map[string]string{"proof": msg})
		if err != nil {
			return err
		}
		return render(c, status, views.TwoFactorPage(h.page(c, "Two-factor sign-in"), v))
	}
	if tf, err := h.db.FindTwoFactor(ctx, u.ID); err != nil {
		return err
	} else if !tf.Enabled() {
		return c.Redirect(http.StatusSeeOther, "/account/two-factor")
	}
	err := h.wf.DisableTwoFactor(ctx, *u, c.FormValue("proof"), clientNetwork(c))
	switch market.ErrorCode(err) {
	case market.CodeRateLimited:
		return invalid(http.StatusTooManyRequests, market.ErrorMessage(err))
	case market.CodeInvalid:
		return invalid(http.StatusUnprocessableEntity, market.FieldErrors(err)["proof"])
	}
	if err != nil {
		return err
	}
	logger(c).Info("two-factor sign-in turned off", "user_id", u.ID)
	note := ""
	if market.TwoFactorRequired(*u) {
		note = " Administrators need it for the admin pages: turn it on again before using them."
	}
	h.setFlash(c, "ok", "Two-factor sign-in is off; your recovery codes no longer work."+note)
	return c.Redirect(http.StatusSeeOther, "/account")
}

// setRecoveryCodes keeps just-made recovery codes, encrypted, for the page
// the confirmation redirects to; takeRecoveryCodes shows them once.
func (h *Handler) setRecoveryCodes(c echo.Context, codes []string) error {
	sess, _ := h.secrets.Get(c.Request(), recoveryCodesCookie)
	sess.Values = map[any]any{"codes": codes}
	return sess.Save(c.Request(), c.Response())
}

func (h *Handler) takeRecoveryCodes(c echo.Context) []string {
	sess, err := h.secrets.Get(c.Request(), recoveryCodesCookie)
	if err != nil || sess.IsNew {
		return nil
	}
	codes, _ := sess.Values["codes"].([]string)
	sess.Options.MaxAge = -1
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("recovery codes cookie not cleared", "err", err)
	}
	return codes
}
