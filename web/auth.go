package web

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/views"
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
	ctx := c.Request().Context()
	allowed, wait, err := h.db.ThrottleHit(ctx, "signup-ip:"+c.RealIP(), h.now(), signupWindow, signupPerAddress)
	if err != nil {
		return err
	}
	if !allowed {
		return render(c, http.StatusTooManyRequests, views.SignUp(h.page(c, "Sign up"), form(nil, throttledMessage(wait))))
	}
	if err := market.ValidateSignUp(&su); err != nil {
		return render(c, http.StatusUnprocessableEntity, views.SignUp(h.page(c, "Sign up"), form(market.FieldErrors(err), "")))
	}
	hash, err := h.hashPassword(su.Password)
	if err != nil {
		return err
	}
	u, err := h.db.CreateUser(ctx, market.User{Email: su.Email, DisplayName: su.DisplayName, Organisation: su.Organisation,
		IsBuyer: su.IsBuyer, IsProvider: su.IsProvider}, hash, h.now())
	if market.ErrorCode(err) == market.CodeConflict {
		return render(c, http.StatusUnprocessableEntity, views.SignUp(h.page(c, "Sign up"),
			form(map[string]string{"email": "An account with this email already exists. Log in instead?"}, "")))
	}
	if err != nil {
		return err
	}
	if err := h.startSession(c, u.ID); err != nil {
		return err
	}
	logger(c).Info("signed up", "user_id", u.ID)
	next := "/"
	if u.IsProvider {
		next = "/provider/offers"
	}
	h.setFlash(c, "ok", fmt.Sprintf("Welcome, %s. Your account is ready.", u.DisplayName))
	return c.Redirect(http.StatusSeeOther, next)
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
	ctx := c.Request().Context()
	now := h.now()
	// Every attempt counts against the client address; only failures count
	// against the account (so its owner is not locked out by successes).
	ok, wait, err := h.db.ThrottleHit(ctx, "login-ip:"+c.RealIP(), now, loginWindow, loginPerAddress)
	if err != nil {
		return err
	}
	if !ok {
		return fail(http.StatusTooManyRequests, throttledMessage(wait))
	}
	acctKey := "login-acct:" + email
	if blocked, wait, err := h.db.ThrottlePeek(ctx, acctKey, now, loginWindow, loginPerAccount); err != nil {
		return err
	} else if blocked {
		return fail(http.StatusTooManyRequests, throttledMessage(wait))
	}
	if email == "" || password == "" {
		return fail(http.StatusUnprocessableEntity, "Enter your email and password.")
	}
	u, hash, err := h.db.FindUserByEmail(ctx, email)
	if err != nil && market.ErrorCode(err) != market.CodeNotFound {
		return err
	}
	if err != nil {
		// Compare anyway, so an unknown email takes as long as a wrong password.
		checkPassword(h.dummyHash, password)
	}
	if err != nil || !checkPassword(hash, password) {
		if _, _, err := h.db.ThrottleHit(ctx, acctKey, now, loginWindow, loginPerAccount); err != nil {
			return err
		}
		return fail(http.StatusUnauthorized, "That email and password do not match an account.")
	}
	if u.Suspended {
		return fail(http.StatusForbidden, "This account is suspended. Contact support if you think this is a mistake.")
	}
	if err := h.db.ThrottleReset(ctx, acctKey); err != nil {
		return err
	}
	if err := h.startSession(c, u.ID); err != nil {
		return err
	}
	logger(c).Info("logged in", "user_id", u.ID)
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
		Roles: strings.Join(roles, ", "), MemberSince: formatDate(u.CreatedAt), Errors: errs, TokenScope: scopeRead}
	tokens, err := h.db.ListAPITokens(c.Request().Context(), u.ID)
	if err != nil {
		return v, err
	}
	for _, t := range tokens {
		row := views.TokenRow{Name: t.Name, Scope: t.Scope, Prefix: t.Prefix, Created: formatDate(t.CreatedAt),
			LastUsed: "never", Revoked: !t.RevokedAt.IsZero(), RevokeURL: fmt.Sprintf("/account/tokens/%d/revoke", t.ID)}
		if !t.LastUsedAt.IsZero() {
			row.LastUsed = formatTime(t.LastUsedAt)
		}
		v.Tokens = append(v.Tokens, row)
	}
	return v, nil
}

func (h *Handler) handleTokenCreate(c echo.Context) error {
	name := strings.TrimSpace(c.FormValue("token_name"))
	scope := c.FormValue("token_scope")
	errs := map[string]string{}
	if name == "" || len([]rune(name)) > 80 {
		errs["token_name"] = "Name the token (up to 80 characters) so you can recognise it later."
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
	_, raw, err := h.db.CreateAPIToken(c.Request().Context(), currentUser(c).ID, name, scope, h.now())
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
	if err := h.db.RevokeAPIToken(c.Request().Context(), currentUser(c).ID, id, h.now()); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Token revoked; it stops working at once.")
	return c.Redirect(http.StatusSeeOther, "/account")
}

func (h *Handler) handlePasswordChange(c echo.Context) error {
	u := currentUser(c)
	ctx := c.Request().Context()
	current, next := c.FormValue("current_password"), c.FormValue("new_password")
	invalid := func(field, msg string) error {
		v, err := h.accountView(c, map[string]string{field: msg})
		if err != nil {
			return err
		}
		return render(c, http.StatusUnprocessableEntity, views.Account(h.page(c, "Account"), v))
	}
	_, hash, err := h.db.FindUserByEmail(ctx, u.Email)
	if err != nil {
		return err
	}
	if !checkPassword(hash, current) {
		return invalid("current_password", "That is not your current password.")
	}
	if msg := market.PasswordProblem(next); msg != "" {
		return invalid("new_password", msg)
	}
	newHash, err := h.hashPassword(next)
	if err != nil {
		return err
	}
	sess, _ := currentSession(c)
	if err := h.db.UpdatePassword(ctx, u.ID, newHash, sess.ID); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Password changed. Other sessions have been logged out.")
	return c.Redirect(http.StatusSeeOther, "/account")
}

// throttledMessage tells a person how long to wait.
func throttledMessage(wait time.Duration) string {
	mins := int(math.Ceil(wait.Minutes()))
	if mins < 1 {
		mins = 1
	}
	unit := "minutes"
	if mins == 1 {
		unit = "minute"
	}
	return fmt.Sprintf("Too many attempts from here. Please wait %d %s and try again.", mins, unit)
}
