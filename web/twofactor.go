package web

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/pquerna/otp"
	"github.com/pquerna/otp/totp"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// Two-factor sign-in (TOTP, RFC 6238). The shared secret is stored sealed
// (AES-256-GCM under a key derived from the session key, bound to the
// account id), so a copy of the database alone does not reveal it; a new
// session key makes the stored secrets unreadable, and their owners then
// need `gpumarket admin reset-2fa`.

const (
	// totpIssuer names the site in authenticator apps.
	totpIssuer = "gpumarket"
	// loginCodeCookie carries the raw id of a half-done login
	// (store.LoginChallenge), signed; recoveryCodesCookie the recovery codes
	// just made, encrypted, for the page the redirect shows them on.
	loginCodeCookie     = "gm_login_code"
	recoveryCodesCookie = "gm_recovery_codes"
	// codeFailuresPerAccount is how many attempts at a code (or password,
	// when turning it off) an account may make per loginWindow; a correct
	// code at log-in starts the count again.
	codeFailuresPerAccount = 5
)

var totpValidate = totp.ValidateOpts{Period: uint(market.TOTPPeriod / time.Second), Digits: otp.DigitsSix, Algorithm: otp.AlgorithmSHA1}

// SealTOTPSecret seals an account's base32 TOTP secret for the database
// with a key derived from the session key (for cmd's demo admin; the web
// handlers seal their own).
func SealTOTPSecret(sessionKey []byte, userID int64, secret string) ([]byte, error) {
	aead, err := totpAEAD(sessionKey)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, []byte(secret), totpAdditionalData(userID)), nil
}

// openTOTPSecret reads back what SealTOTPSecret sealed for the account.
func openTOTPSecret(sessionKey []byte, userID int64, sealed []byte) (string, error) {
	aead, err := totpAEAD(sessionKey)
	if err != nil {
		return "", err
	}
	if len(sealed) < aead.NonceSize() {
		return "", errors.New("web: sealed TOTP secret too short")
	}
	plain, err := aead.Open(nil, sealed[:aead.NonceSize()], sealed[aead.NonceSize():], totpAdditionalData(userID))
	if err != nil {
		return "", fmt.Errorf("web: open TOTP secret of user %d (was the session key changed?): %w", userID, err)
	}
	return string(plain), nil
}

func totpAEAD(sessionKey []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(deriveKey(sessionKey, "gpumarket totp secret"))
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

func totpAdditionalData(userID int64) []byte { return []byte("user " + strconv.FormatInt(userID, 10)) }

// matchTOTP finds the time step the code is for in market.TOTPWindow: ok
// when that step is still fresh, used when it is not (a replay).
func matchTOTP(secret, code string, now time.Time, lastStep int64) (step int64, ok, used bool) {
	for _, s := range market.TOTPWindow(now) {
		want, err := totp.GenerateCodeCustom(secret, market.TOTPStepStart(s), totpValidate)
		if err != nil || subtle.ConstantTimeCompare([]byte(want), []byte(code)) != 1 {
			continue
		}
		if !market.TOTPStepFresh(s, lastStep) {
			return s, false, true
		}
		return s, true, false
	}
	return 0, false, false
}

// Messages for codes that do not work.
const (
	msgWrongCode = "That code does not match. Enter the code your app shows now (check that your phone's clock is right)."
	msgUsedCode  = "That code has already been used. Wait for the next code in your app and enter it."
)

// checkTOTP checks a TOTP code for the user's two-factor sign-in and, when
// it matches, records its step as used (atomically, so it works once).
// A code that does not work gives a message for the person.
func (h *Handler) checkTOTP(c echo.Context, tf store.TwoFactor, code string) (msg string, err error) {
	secret, err := openTOTPSecret(h.cfg.SessionKey, tf.UserID, tf.Secret)
	if err != nil {
		return "", err
	}
	step, ok, used := matchTOTP(secret, code, h.now(), tf.LastStep)
	switch {
	case used:
		return msgUsedCode, nil
	case !ok:
		return msgWrongCode, nil
	}
	if err := h.db.UseTOTPStep(c.Request().Context(), tf.UserID, step); market.ErrorCode(err) == market.CodeUnauthorized {
		return msgUsedCode, nil
	} else if err != nil {
		return "", err
	}
	return "", nil
}

// codeThrottle counts attempts at second factors: every attempt against
// the client address, and every attempt against the account, counted
// before the code is checked in one conditional UPDATE
// (store.TakeCodeAttempt), so simultaneous codes cannot race past the
// limit. It returns a message when the attempt must wait.
func (h *Handler) codeThrottle(c echo.Context, userID int64) (string, error) {
	ctx, now := c.Request().Context(), h.now()
	ok, wait, err := h.db.ThrottleHit(ctx, "2fa-ip:"+clientNetwork(c), now, loginWindow, loginPerAddress)
	if err != nil {
		return "", err
	}
	if !ok {
		return throttledMessage(wait), nil
	}
	if ok, wait, err := h.wf.TakeCodeAttempt(ctx, userID, loginWindow, codeFailuresPerAccount); err != nil {
		return "", err
	} else if !ok {
		return fmt.Sprintf("Too many wrong codes for this account. Please wait %s and try again.", waitText(wait)), nil
	}
	return "", nil
}

// askSecondFactor is the login's step after a correct password: when the
// account has two-factor sign-in on, it records a half-done login (no
// session: the password alone grants nothing), gives the browser its id
// and redirects to the code page, and reports true.
func (h *Handler) askSecondFactor(c echo.Context, userID int64, next string) (bool, error) {
	ctx := c.Request().Context()
	tf, err := h.db.FindTwoFactor(ctx, userID)
	if err != nil || !tf.Enabled() {
		return false, err
	}
	id, err := h.db.CreateLoginChallenge(ctx, userID, next, h.now())
	if err != nil {
		return true, err
	}
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	sess.Values = map[any]any{"id": id}
	sess.Options.MaxAge = int(market.LoginChallengeTTL.Seconds())
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		return true, err
	}
	logger(c).Info("password accepted, code asked", "user_id", userID)
	return true, c.Redirect(http.StatusSeeOther, "/login/code")
}

// loginChallenge returns the browser's half-done login, or false (with a
// flash and a redirect to the login page already made) when there is none.
func (h *Handler) loginChallenge(c echo.Context) (string, store.LoginChallenge, bool, error) {
	sess, _ := h.cookies.Get(c.Request(), loginCodeCookie)
	id, _ := sess.Values["id"].(string)
	lc, err := h.db.FindLoginChallenge(c.Request().Context(), id, h.now())
	if market.ErrorCode(err) == market.CodeNotFound {
		h.setFlash(c, "error", market.ErrorMessage(err))
		return "", lc, false, c.Redirect(http.StatusSeeOther, "/login")
	}
	return id, lc, err == nil, err
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
	if _, _, ok, err := h.loginChallenge(c); !ok || err != nil {
		return err
	}
	return render(c, http.StatusOK, views.LoginCode(h.page(c, "Enter your code"), views.LoginCodeForm{}))
}

func (h *Handler) handleLoginCode(c echo.Context) error {
	id, lc, ok, err := h.loginChallenge(c)
	if !ok || err != nil {
		return err
	}
	ctx := c.Request().Context()
	fail := func(status int, msg, field string) error {
		return render(c, status, views.LoginCode(h.page(c, "Enter your code"), views.LoginCodeForm{Message: msg, Error: field}))
	}
	if msg, err := h.codeThrottle(c, lc.UserID); err != nil {
		return err
	} else if msg != "" {
		return fail(http.StatusTooManyRequests, msg, "")
	}
	f, err := market.ParseSecondFactor(c.FormValue("code"))
	if err != nil {
		return fail(http.StatusUnprocessableEntity, "", market.FieldErrors(err)["code"])
	}
	tf, err := h.db.FindTwoFactor(ctx, lc.UserID)
	if err != nil {
		return err
	}
	var msg string
	switch {
	case !tf.Enabled():
		// Turned off (or reset) since the password was accepted.
		msg = "Two-factor sign-in is no longer on for this account. Log in again."
	case f.Recovery != "":
		left, err := h.db.UseRecoveryCode(ctx, lc.UserID, f.Recovery, h.now())
		if market.ErrorCode(err) == market.CodeUnauthorized {
			msg = market.ErrorMessage(err)
		} else if err != nil {
			return err
		} else {
			h.setFlash(c, "ok", fmt.Sprintf("Signed in with a recovery code; %d left. Turn two-factor sign-in off and on again on your account page for new codes.", left))
		}
	default:
		if msg, err = h.checkTOTP(c, tf, f.Code); err != nil {
			return err
		}
	}
	if msg != "" {
		return fail(http.StatusUnauthorized, "", msg)
	}
	if err := h.db.DeleteLoginChallenge(ctx, id); err != nil {
		return err
	}
	h.clearLoginChallenge(c)
	if err := h.db.ResetCodeAttempts(ctx, lc.UserID); err != nil {
		return err
	}
	u, err := h.db.FindUserByID(ctx, lc.UserID)
	if err != nil {
		return err
	}
	if err := h.startSession(c, u.ID); err != nil {
		return err
	}
	h.rememberDevice(c, u.Email)
	logger(c).Info("logged in", "user_id", u.ID, "second_factor", f.Recovery == "")
	return c.Redirect(http.StatusSeeOther, safeNext(lc.Next))
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
		Account: u.Email, Issuer: totpIssuer, RecoveryLeft: recoveryLeftText(tf.RecoveryLeft), Errors: errs}
	if tf.Enabled() {
		v.EnabledAt = formatDate(tf.EnabledAt)
	}
	if tf.Pending() {
		secret, err := openTOTPSecret(h.cfg.SessionKey, u.ID, tf.Secret)
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
func totpQR(secret, account string) (string, error) {
	q := url.Values{"secret": {secret}, "issuer": {totpIssuer}, "algorithm": {"SHA1"}, "digits": {"6"},
		"period": {strconv.Itoa(int(market.TOTPPeriod / time.Second))}}
	u := url.URL{Scheme: "otpauth", Host: "totp", Path: "/" + totpIssuer + ":" + account, RawQuery: q.Encode()}
	key, err := otp.NewKeyFromURL(u.String())
	if err != nil {
		return "", err
	}
	img, err := key.Image(200, 200)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		return "", err
	}
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(b.Bytes()), nil
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
	u := currentUser(c)
	key, err := totp.Generate(totp.GenerateOpts{Issuer: totpIssuer, AccountName: u.Email, Period: totpValidate.Period,
		SecretSize: 20, Digits: totpValidate.Digits, Algorithm: totpValidate.Algorithm})
	if err != nil {
		return err
	}
	sealed, err := SealTOTPSecret(h.cfg.SessionKey, u.ID, key.Secret())
	if err != nil {
		return err
	}
	if err := h.db.BeginTOTP(c.Request().Context(), u.ID, sealed, h.now()); market.ErrorCode(err) == market.CodeConflict {
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
	tf, err := h.db.FindTwoFactor(ctx, u.ID)
	if err != nil {
		return err
	}
	if !tf.Pending() {
		return c.Redirect(http.StatusSeeOther, "/account/two-factor")
	}
	if msg, err := h.codeThrottle(c, u.ID); err != nil {
		return err
	} else if msg != "" {
		return invalid(http.StatusTooManyRequests, msg)
	}
	code, err := market.ParseTOTPCode(c.FormValue("code"))
	if err != nil {
		return invalid(http.StatusUnprocessableEntity, market.FieldErrors(err)["code"])
	}
	secret, err := openTOTPSecret(h.cfg.SessionKey, u.ID, tf.Secret)
	if err != nil {
		return err
	}
	step, ok, _ := matchTOTP(secret, code, h.now(), tf.LastStep)
	if !ok {
		return invalid(http.StatusUnprocessableEntity, msgWrongCode)
	}
	codes, err := h.db.EnableTOTP(ctx, u.ID, step, h.now())
	if err != nil {
		return err
	}
	for i, rc := range codes {
		codes[i] = market.FormatRecoveryCode(rc)
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
	tf, err := h.db.FindTwoFactor(ctx, u.ID)
	if err != nil {
		return err
	}
	if !tf.Enabled() {
		return c.Redirect(http.StatusSeeOther, "/account/two-factor")
	}
	if msg, err := h.codeThrottle(c, u.ID); err != nil {
		return err
	} else if msg != "" {
		return invalid(http.StatusTooManyRequests, msg)
	}
	proof := c.FormValue("proof")
	var msg string
	if code, err := market.ParseTOTPCode(proof); err == nil {
		if msg, err = h.checkTOTP(c, tf, code); err != nil {
			return err
		}
	} else {
		_, hash, err := h.db.FindUserByEmail(ctx, u.Email)
		if err != nil {
			return err
		}
		if !checkPassword(hash, proof) {
			msg = "That is neither a current code from your app nor your password."
		}
	}
	if msg != "" {
		return invalid(http.StatusUnprocessableEntity, msg)
	}
	if err := h.db.DisableTOTP(ctx, u.ID, h.now()); err != nil {
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
