package web

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"

	"github.com/gorilla/sessions"
	"github.com/labstack/echo/v4"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/market"
)

// Cookie names. The session cookie carries only the session id; the rows
// live in the database. The flash cookie carries one short message.
const (
	sessionCookie  = "gm_session"
	flashCookie    = "gm_flash"
	newTokenCookie = "gm_new_token" // encrypted; see setNewToken
	deviceCookie   = "gm_device"    // signed; see rememberDevice
)

// DefaultPasswordCost is the bcrypt cost of stored passwords.
const DefaultPasswordCost = 12

// HashPassword hashes a password with bcrypt at DefaultPasswordCost.
// Callers validate length first (market.PasswordProblem): bcrypt's 72-byte
// limit is a message, not a silent truncation.
func HashPassword(pw string) ([]byte, error) { return hashPassword(pw, DefaultPasswordCost) }

func hashPassword(pw string, cost int) ([]byte, error) {
	if msg := market.PasswordProblem(pw); msg != "" {
		return nil, &market.Error{Code: market.CodeInvalid, Message: msg, Fields: map[string]string{"password": msg}}
	}
	return bcrypt.GenerateFromPassword([]byte(pw), cost)
}

// hashPassword hashes at the handler's configured cost.
func (h *Handler) hashPassword(pw string) ([]byte, error) { return hashPassword(pw, h.pwCost) }

// checkPassword reports whether pw matches hash.
func checkPassword(hash []byte, pw string) bool {
	if len(pw) > market.MaxPasswordBytes {
		return false
	}
	return bcrypt.CompareHashAndPassword(hash, []byte(pw)) == nil
}

// startSession logs the user in with a fresh session id (rotated at every
// login) and forgets the session the browser had before.
func (h *Handler) startSession(c echo.Context, userID int64) error {
	if old, ok := currentSession(c); ok {
		_ = h.db.DeleteSession(c.Request().Context(), old.ID)
	}
	s, err := h.db.CreateSession(c.Request().Context(), userID, h.now(), sessionTTL)
	if err != nil {
		return err
	}
	sess, _ := h.cookies.Get(c.Request(), sessionCookie)
	sess.Values = map[any]any{"sid": s.ID}
	sess.Options.MaxAge = int(sessionTTL.Seconds())
	return sess.Save(c.Request(), c.Response())
}

// endSession deletes the session row and the cookie.
func (h *Handler) endSession(c echo.Context) error {
	if s, ok := currentSession(c); ok {
		if err := h.db.DeleteSession(c.Request().Context(), s.ID); err != nil {
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

// deriveKey derives a 32-byte key for one purpose from the session key.
func deriveKey(sessionKey []byte, purpose string) []byte {
	m := hmac.New(sha256.New, sessionKey)
	m.Write([]byte(purpose))
	return m.Sum(nil)
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
