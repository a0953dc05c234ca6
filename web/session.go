package web

import (
	"net/http"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/account"
	"github.com/gpumarket/gpumarket/store"
)

// Cookie names. The session cookie carries only the session id; the rows
// live in the database. The flash cookie carries one short message.
const (
	sessionCookie  = "gm_session"
	flashCookie    = "gm_flash"
	newTokenCookie = "gm_new_token" // encrypted; see setNewToken
	deviceCookie   = "gm_device"    // signed; see rememberDevice
)

// oldSession is the id of the session the browser has, or "": a log-in
// ends it when the new one starts (workflow.Service.StartSession).
func oldSession(c echo.Context) string {
	s, _ := currentSession(c)
	return s.ID
}

// setSession gives the browser the cookie of the session s, just started
// by the workflow (its id rotated at every log-in).
func (h *Handler) setSession(c echo.Context, s store.Session) error {
	sess, _ := h.cookies.Get(c.Request(), sessionCookie)
	sess.Values = map[any]any{"sid": s.ID}
	sess.Options.MaxAge = int(sessionTTL.Seconds())
	return sess.Save(c.Request(), c.Response())
}

// endSession deletes the session row and the cookie.
func (h *Handler) endSession(c echo.Context) error {
	if s, ok := currentSession(c); ok {
		if err := h.wf.LogOut(c.Request().Context(), s.ID); err != nil {
			return err
		}
	}
	sess, _ := h.cookies.Get(c.Request(), sessionCookie)
	sess.Values = map[any]any{}
	sess.Options.MaxAge = -1
	return sess.Save(c.Request(), c.Response())
}

// setFlash stores a one-time message shown on the next page.
func (h *Handler) setFlash(c echo.Context, kind, msg string) {
	sess, _ := h.cookies.Get(c.Request(), flashCookie)
	sess.Options.MaxAge = 300
	sess.Values = map[any]any{"kind": kind, "msg": msg}
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("flash not saved", "err", err)
	}
}

// takeFlash returns and clears the pending message.
func (h *Handler) takeFlash(c echo.Context) (kind, msg string) {
	sess, err := h.cookies.Get(c.Request(), flashCookie)
	if err != nil || sess.IsNew {
		return "", ""
	}
	kind, _ = sess.Values["kind"].(string)
	msg, _ = sess.Values["msg"].(string)
	if msg != "" {
		sess.Options.MaxAge = -1
		_ = sess.Save(c.Request(), c.Response())
	}
	return kind, msg
}

// newSecretStore is a cookie store that signs and encrypts (AES-256), with
// keys derived from the session key, for values the browser must not read
// in its cookie jar. Its cookies go only to /account and last 5 minutes.
func newSecretStore(sessionKey []byte, secure bool) *sessions.CookieStore {
	s := sessions.NewCookieStore(deriveKey(sessionKey, "gpumarket secret cookie: signing"), deriveKey(sessionKey, "gpumarket secret cookie: encryption"))
	s.Options = &sessions.Options{Path: "/account", MaxAge: 300, HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode}
	return s
}

// deriveKey derives a 32-byte key for one purpose from the session key,
// as the two-factor secrets' is derived (account.DeriveKey).
func deriveKey(sessionKey []byte, purpose string) []byte {
	return account.DeriveKey(sessionKey, purpose)
}

// setNewToken keeps a just-created API token for the account page that the
// creation redirects to (post/redirect/get), so a refresh shows the page
// again instead of creating a second token. takeNewToken shows it once.
func (h *Handler) setNewToken(c echo.Context, raw string) error {
	sess, _ := h.secrets.Get(c.Request(), newTokenCookie)
	sess.Values = map[any]any{"token": raw}
	return sess.Save(c.Request(), c.Response())
}

// takeNewToken returns and forgets the token setNewToken kept, if any.
func (h *Handler) takeNewToken(c echo.Context) string {
	sess, err := h.secrets.Get(c.Request(), newTokenCookie)
	if err != nil || sess.IsNew {
		return ""
	}
	raw, _ := sess.Values["token"].(string)
	sess.Options.MaxAge = -1
	if err := sess.Save(c.Request(), c.Response()); err != nil {
		logger(c).Warn("new token cookie not cleared", "err", err)
	}
	return raw
}
