package web

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"
)

// Quote limits (docs/booking.md, "Expensive requests are bounded"). Quoting runs
// the matcher, the one request whose cost grows with the market, so it is
// limited per client address for visitors, per account for signed-in
// buyers (the API's tokens have their own limit, Config.APIRatePerSecond);
// every match runs within a work budget (market.DefaultBudget); and broad
// matches take turns on a few slots, so that narrow ones never queue
// behind them (workflow.Quote).
const (
	anonQuotesPerSecond = 1  // steady rate per client address
	anonQuoteBurst      = 20 // a visitor editing the builder refreshes about 3 times a second for a while
	userQuotesPerSecond = 5  // per signed-in account
	userQuoteBurst      = 50
	limiterIdle         = 10 * time.Minute // a key unseen this long is forgotten
	// A refused quote is answered when the client's next quote would be
	// allowed (at most refusalHold later; at most refusalsHeld held at
	// once, the rest answered at once), so a client that asks again at once
	// instead of waiting for Retry-After sends a request a second, not
	// thousands, and cannot take the processors from other buyers with
	// refusals (docs/booking.md, "Expensive requests are bounded").
	refusalHold  = time.Second
	refusalsHeld = 256
)

// limiter is a token bucket per key (a client address, an account, a
// token), kept per process: several replicas each allow the rate, which
// is acceptable because nothing correct depends on it, and it costs no
// database write per request.
type limiter struct {
	mu      sync.Mutex
	every   rate.Limit
	burst   int
	buckets map[string]*bucket
	swept   time.Time
}

type bucket struct {
	lim  *rate.Limiter
	seen time.Time
}

func newLimiter(perSecond float64, burst int) *limiter {
	return &limiter{every: rate.Limit(perSecond), burst: burst, buckets: map[string]*bucket{}}
}

// allow takes a token from key's bucket at now, or reports how long until
// one is there (nothing is taken then).
func (l *limiter) allow(key string, now time.Time) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) > limiterIdle {
		for k, b := range l.buckets {
			if now.Sub(b.seen) > limiterIdle {
				delete(l.buckets, k)
			}
		}
		l.swept = now
	}
	b := l.buckets[key]
	if b == nil {
		b = &bucket{lim: rate.NewLimiter(l.every, l.burst)}
		l.buckets[key] = b
	}
	b.seen = now
	r := b.lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); !r.OK() || d > 0 {
		r.CancelAt(now)
		return false, d
	}
	return true, 0
}

// holdRefusal waits up to wait (at most refusalHold) before a refusal is
// answered, unless refusalsHeld are waiting already or the request ends.
func (h *Handler) holdRefusal(c echo.Context, wait time.Duration) {
	select {
	case h.refusals <- struct{}{}:
		defer func() { <-h.refusals }()
	default:
		return
	}
	t := time.NewTimer(min(wait, refusalHold))
	defer t.Stop()
	select {
	case <-t.C:
	case <-c.Request().Context().Done():
	}
}

// setRetryAfter tells the client when to try again, in whole seconds
// rounded up (at least 1).
func setRetryAfter(c echo.Context, wait time.Duration) {
	secs := max(1, int((wait+time.Second-1)/time.Second))
	c.Response().Header().Set("Retry-After", strconv.Itoa(secs))
}

// quoteAllowed counts one quote against the visitor's address (the
// client address RealIP gives, so a forged X-Forwarded-For from a peer
// that is not a trusted proxy changes nothing) or the signed-in account,
// and returns the message to show when it is over the limit, having set
// Retry-After.
func (h *Handler) quoteAllowed(c echo.Context) (bool, string) {
	now := h.now()
	var ok bool
	var wait time.Duration
	if u := currentUser(c); u != nil {
		ok, wait = h.userQuotes.allow("user:"+strconv.FormatInt(u.ID, 10), now)
	} else {
		ok, wait = h.anonQuotes.allow("addr:"+clientNetwork(c), now)
	}
	if ok {
		return true, ""
	}
	h.holdRefusal(c, wait)
	setRetryAfter(c, wait)
	secs := max(1, int((wait+time.Second-1)/time.Second))
	msg := fmt.Sprintf("Too many quote requests from here: please wait %s and try again.", plural(secs, "second"))
	if currentUser(c) == nil {
		msg += " Logged-in buyers may ask for quotes more often."
	}
	return false, msg
}
