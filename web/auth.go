package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
	"github.com/gpumarket/gpumarket/workflow"
)

func (h *Handler) handleSignUpForm(c echo.Context) error {
	if currentUser(c) != nil {
		return c.Redirect(http.StatusSeeOther, "/")
	}
	return render(c, http.StatusOK, views.SignUp(h.page(c, "Sign up"), views.SignUpForm{IsBuyer: true}))
}

func (h *Handler) handleSignUp(c echo.Context) error {
	su := market.SignUp{
		Email:        c.FormValue("email"),
		Password:     c.FormValue("password"),
		DisplayName:  c.FormValue("display_name"),
		Organisation: c.FormValue("organisation"),
		IsBuyer:      c.FormValue("is_buyer") != "",
		IsProvider:   c.FormValue("is_provider") != "",
	}
	form := func(errs map[string]string, msg string) views.SignUpForm {
		return views.SignUpForm{Email: su.Email, DisplayName: su.DisplayName, Organisation: su.Organisation,
			IsBuyer: su.IsBuyer, IsProvider: su.IsProvider, Errors: errs, Message: msg}
	}
	// The same answer whether or not the address has an account (its owner
	// is mailed instead): no session, the same page.
	id, existed, err := h.wf.SignUp(c.Request().Context(), &su, clientNetwork(c))
	switch market.ErrorCode(err) {
	case market.CodeRateLimited:
		return render(c, http.StatusTooManyRequests, views.SignUp(h.page(c, "Sign up"), form(nil, market.ErrorMessage(err))))
	case market.CodeInvalid:
		return render(c, http.StatusUnprocessableEntity, views.SignUp(h.page(c, "Sign up"), form(market.FieldErrors(err), "")))
	}
	if err != nil {
		return err
	}
	logger(c).Info("signed up", "user_id", id, "existing_account", existed)
	return c.Redirect(http.StatusSeeOther, "/signup/sent")
}

func (h *Handler) handleLoginForm(c echo.Context) error {
	next := safeNext(c.QueryParam("next"))
	if currentUser(c) != nil {
		return c.Redirect(http.StatusSeeOther, next)
	}
	return render(c, http.StatusOK, views.Login(h.page(c, "Log in"), views.LoginForm{Next: next}))
}

func (h *Handler) handleLogin(c echo.Context) error {
	email := market.NormaliseEmail(c.FormValue("email"))
	password := c.FormValue("password")
	next := safeNext(c.FormValue("next"))
	fail := func(status int, msg string) error {
		return render(c, status, views.Login(h.page(c, "Log in"), views.LoginForm{Email: email, Next: next, Message: msg}))
	}
	// Text no engine stores alike (a NUL, bytes that are not UTF-8) is
	// refused before it reaches the throttle's keys or a lookup; the
	// password is never stored as sent.
	if msg := market.TextProblem(c.FormValue("email"), false); msg != "" {
		return fail(http.StatusUnprocessableEntity, msg)
	}
	in, err := h.wf.LogIn(c.Request().Context(), workflow.LogIn{Email: email, Password: password, Next: next,
		Network: clientNetwork(c), KnownDevice: h.knownDevice(c, email), OldSession: oldSession(c)})
	switch code := market.ErrorCode(err); code {
	case market.CodeRateLimited, market.CodeInvalid, market.CodeUnauthorized, market.CodeForbidden:
		return fail(statusOf(code), market.ErrorMessage(err))
	}
	if err != nil {
		return err
	}
	if in.Challenge != "" {
		return h.askSecondFactor(c, in)
	}
	if err := h.setSession(c, in.Session); err != nil {
		return err
	}
	h.rememberDevice(c, email)
	logger(c).Info("logged in", "user_id", in.User.ID)
	return c.Redirect(http.StatusSeeOther, next)
}

func (h *Handler) handleLogout(c echo.Context) error {
	if err := h.endSession(c); err != nil {
		return err
	}
	h.setFlash(c, "ok", "You are logged out.")
	return c.Redirect(http.StatusSeeOther, "/")
}

func (h *Handler) handleAccount(c echo.Context) error {
	v, err := h.accountView(c, nil)
	if err != nil {
		return err
	}
	// A token just created is shown on this page once; it is stored hashed.
	if v.NewToken = h.takeNewToken(c); v.NewToken != "" {
		c.Response().Header().Set("Cache-Control", "no-store")
	}
	return render(c, http.StatusOK, views.Account(h.page(c, "Account"), v))
}

// accountView is the account page of the signed-in user with their tokens.
func (h *Handler) accountView(c echo.Context, errs map[string]string) (views.AccountView, error) {
	u := *currentUser(c)
	var roles []string
	if u.IsBuyer {
		roles = append(roles, "buyer")
	}
	if u.IsProvider {
		roles = append(roles, "provider")
	}
	if u.IsAdmin {
		roles = append(roles, "admin")
	}
	v := views.AccountView{Email: u.Email, DisplayName: u.DisplayName, Organisation: u.Organisation,
		Roles: strings.Join(roles, ", "), MemberSince: formatDate(u.CreatedAt), Errors: errs, TokenScope: scopeRead,
		Address: views.AddressView{Email: u.Email, Verified: u.Verified(), Errors: errs}}
	var err error
	if v.SSH, err = h.sshKeysView(c, "", ""); err != nil {
		return v, err
	}
	if v.Payment, err = h.paymentMethodsView(c); err != nil {
		return v, err
	}
	if v.TwoFactor, err = h.twoFactorSummary(c); err != nil {
		return v, err
	}
	if v.Mail, err = h.mailPrefs(c, u.ID, "account"); err != nil {
		return v, err
	}
	tokens, err := h.db.ListAPITokens(c.Request().Context(), u.ID)
	if err != nil {
		return v, err
	}
	active := 0
	for _, t := range tokens {
		if !t.Revoked() {
			active++
		}
		row := views.TokenRow{Name: t.Name, Scope: t.Scope, Prefix: t.Prefix, Created: formatDate(t.CreatedAt),
			LastUsed: "never", Revoked: !t.RevokedAt.IsZero(), RevokeURL: fmt.Sprintf("/account/tokens/%d/revoke", t.ID)}
		if !t.LastUsedAt.IsZero() {
			row.LastUsed = formatTime(t.LastUsedAt)
		}
		v.Tokens = append(v.Tokens, row)
	}
	switch active {
	case 0:
		v.ActiveTokens = "no active API tokens"
	case 1:
		v.ActiveTokens, v.RevokeTokens = "1 active API token", "Also revoke my API token"
	default:
		v.ActiveTokens, v.RevokeTokens = fmt.Sprintf("%d active API tokens", active), fmt.Sprintf("Also revoke all %d of my API tokens", active)
	}
	return v, nil
}

func (h *Handler) handleTokenCreate(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("token_name"))
	scope := c.FormValue("token_scope")
	errs := map[string]string{}
	if name == "" || len([]rune(name)) > 80 {
		errs["token_name"] = "Name the token (up to 80 characters) so you can recognise it later."
	} else if msg := market.TextProblem(name, false); msg != "" {
		errs["token_name"] = msg
	}
	if scope != scopeRead && scope != scopeWrite {
		errs["token_scope"] = "Choose read, or read and write."
	}
	if len(errs) > 0 {
		v, err := h.accountView(c, errs)
		if err != nil {
			return err
		}
		v.TokenName, v.TokenScope = name, scope
		return render(c, http.StatusUnprocessableEntity, views.Account(h.page(c, "Account"), v))
	}
	_, raw, err := h.wf.CreateAPIToken(c.Request().Context(), currentUser(c).ID, name, scope)
	if err != nil {
		return err
	}
	// Post/redirect/get: a refresh of the page that shows the token must
	// not create another.
	if err := h.setNewToken(c, raw); err != nil {
		return err
	}
	h.setFlash(c, "ok", fmt.Sprintf("Token “%s” created. Copy it now under API tokens: it is shown only once.", name))
	return c.Redirect(http.StatusSeeOther, "/account#tok-h") // scrolled to the token, on a phone too
}

func (h *Handler) handleTokenRevoke(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.RevokeAPIToken(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Token revoked; it stops working at once.")
	return c.Redirect(http.StatusSeeOther, "/account")
}

func (h *Handler) handlePasswordChange(c echo.Context) error {
	u := currentUser(c)
	sess, _ := currentSession(c)
	revoked, err := h.wf.ChangePassword(c.Request().Context(), *u, c.FormValue("current_password"), c.FormValue("new_password"),
		sess.ID, c.FormValue("revoke_tokens") != "")
	if market.ErrorCode(err) == market.CodeInvalid {
		v, err := h.accountView(c, market.FieldErrors(err))
		if err != nil {
			return err
		}
		return render(c, http.StatusUnprocessableEntity, views.Account(h.page(c, "Account"), v))
	}
	if err != nil {
		return err
	}
	msg := "Password changed. Other sessions have been logged out."
	switch revoked {
	case 0:
	case 1:
		msg += " 1 API token revoked."
	default:
		msg += fmt.Sprintf(" %d API tokens revoked.", revoked)
	}
	h.setFlash(c, "ok", msg)
	return c.Redirect(http.StatusSeeOther, "/account")
}

// clientNetwork is what the throttles count the client by
// (account.ClientNetwork of its address).
func clientNetwork(c echo.Context) string { return account.ClientNetwork(c.RealIP()) }

// knownDevice reports whether this browser has logged in to the account
// with the email before (a signed cookie that rememberDevice set).
func (h *Handler) knownDevice(c echo.Context, email string) bool {
	sess, err := h.cookies.Get(c.Request(), deviceCookie)
	if err != nil || sess.IsNew {
		return false
	}
	tags, _ := sess.Values["accounts"].([]string)
	return slices.Contains(tags, h.deviceTag(email))
}

// rememberDevice marks this browser as one that has logged in to the
// account with the email, keeping the last few accounts.
func (h *Handler) rememberDevice(c echo.Context, email string) {
	sess, _ := h.cookies.Get(c.Request(), deviceCookie)
	tags, _ := sess.Values["accounts"].([]string)
	tag := h.deviceTag(email)
	tags = append(slices.DeleteFunc(tags, func(t string) bool { return t == tag }), tag)
	if len(tags) > 5 {
		tags = tags[len(tags)-5:]
	}
	sess.Values = map[any]any{"accounts": tags}
	sess.Options.MaxAge = int(knownDeviceTTL.Seconds())
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("known-device cookie not saved", "err", err)
	}
}

// deviceTag names an account in the known-device cookie without its email.
func (h *Handler) deviceTag(email string) string {
	m := hmac.New(sha256.New, deriveKey(h.cfg.SessionKey, "gpumarket known device"))
	m.Write([]byte(email))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16])
}
