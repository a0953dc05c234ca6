package web

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// Context keys for values the middleware puts on a request.
const (
	ctxLogger  = "logger"
	ctxUser    = "user"
	ctxSession = "session"
	ctxCSRF    = "csrf"
)

// requestLogger gives every request a logger carrying its request id, and
// logs one line per request when it is done.
func (h *Handler) requestLogger(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := c.Response().Header().Get(echo.HeaderXRequestID)
		l := h.log.With("request_id", id)
		c.Set(ctxLogger, l)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		req := c.Request()
		l.Info("request",
			"method", req.Method,
			"path", req.URL.Path,
			"status", c.Response().Status,
			"bytes", c.Response().Size,
			"duration_ms", float64(time.Since(start).Microseconds())/1000,
			"remote", c.RealIP(),
		)
		return nil
	}
}

// logger returns the request's logger.
func logger(c echo.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

// securityHeaders sets the content security policy and friends on every
// response. No inline scripts or styles are allowed by the policy, except
// style attributes, which the pages use for small layout touches.
func (h *Handler) securityHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		hd := c.Response().Header()
		hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'self'; object-src 'none'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "strict-origin-when-cross-origin")
		hd.Set("Cross-Origin-Opener-Policy", "same-origin")
		if h.secure {
			hd.Set("Strict-Transport-Security", "max-age=63072000; includeSubDomains")
		}
		return next(c)
	}
}

// csrf protects every state-changing browser request with a token that the
// forms carry in the _csrf field (or the X-CSRF-Token header for scripts).
func (h *Handler) csrf() echo.MiddlewareFunc {
	return middleware.CSRFWithConfig(middleware.CSRFConfig{
		TokenLookup:    "form:_csrf,header:X-CSRF-Token",
		CookieName:     "gm_csrf",
		CookiePath:     "/",
		CookieHTTPOnly: true,
		CookieSecure:   h.secure,
		CookieSameSite: http.SameSiteLaxMode,
		ContextKey:     ctxCSRF,
		ErrorHandler: func(err error, c echo.Context) error {
			return market.Errorf(market.CodeForbidden, "This form has expired or did not come from this site. Go back, reload the page and try again.")
		},
	})
}

// loadSession resolves the session cookie to a user through the database,
// so logout, password changes and suspensions take effect at once.
func (h *Handler) loadSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		sess, _ := h.cookies.Get(c.Request(), sessionCookie)
		if id, ok := sess.Values["sid"].(string); ok && id != "" {
			s, u, err := h.db.FindSession(c.Request().Context(), id, h.now())
			switch {
			case err == nil:
				c.Set(ctxSession, s)
				c.Set(ctxUser, &u)
			case market.ErrorCode(err) == market.CodeNotFound:
				// Expired, logged out or suspended: forget the cookie.
				sess.Options.MaxAge = -1
				_ = sess.Save(c.Request(), c.Response())
			default:
				return err
			}
		}
		return next(c)
	}
}

// currentUser returns the signed-in user, or nil.
func currentUser(c echo.Context) *market.User {
	u, _ := c.Get(ctxUser).(*market.User)
	return u
}

// currentSession returns the signed-in session.
func currentSession(c echo.Context) (store.Session, bool) {
	s, ok := c.Get(ctxSession).(store.Session)
	return s, ok
}

// requireUser sends a visitor who is not logged in to the login page, and
// back to where they wanted to go afterwards.
func requireUser(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if currentUser(c) == nil {
			target := c.Request().URL.RequestURI()
			if c.Request().Method != http.MethodGet {
				target = c.Request().Referer()
				if u, err := url.Parse(target); err == nil {
					target = u.RequestURI()
				}
			}
			return c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(safeNext(target)))
		}
		return next(c)
	}
}

// requireProvider lets only providers through.
func requireProvider(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := currentUser(c); u == nil || !u.IsProvider {
			return market.Errorf(market.CodeForbidden, "This page is for providers. Turn on listing capacity on your account to use it.")
		}
		return next(c)
	}
}

// requireAdmin lets only admins through.
func requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := currentUser(c); u == nil || !u.IsAdmin {
			return market.Errorf(market.CodeForbidden, "This page is for administrators.")
		}
		return next(c)
	}
}

// safeNext keeps a post-login redirect on this site: a path, never a scheme
// or a protocol-relative URL that would leave it.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsAny(next, "\r\n\t") {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return "/"
	}
	if next == "/login" || strings.HasPrefix(next, "/login?") || next == "/logout" {
		return "/"
	}
	return next
}
