package web

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/gpumarket/gpumarket/market"
)

// Quote limits (docs/booking.md, "Expensive requests are bounded"). Quoting runs
// the matcher, the one request whose cost grows with the market, so it is
// limited per client address for visitors, per account for signed-in
// buyers (the API's tokens have their own limit, Config.APIRatePerSecond);
// every match runs within a work budget (market.DefaultBudget); and broad
// matches take turns on a few slots, so that narrow ones never queue
// behind them.
const (
	anonQuotesPerSecond = 1  // steady rate per client address
	anonQuoteBurst      = 20 // a visitor editing the builder refreshes about 3 times a second for a while
	userQuotesPerSecond = 5  // per signed-in account
	userQuoteBurst      = 50
	// broadOffers: a request that evaluates more offers than this one by
	// one is broad. Every request naming a model and a region or two
	// evaluates fewer at 100,000 offers.
	broadOffers = 10_000
	// broadWaiting is the most broad matches waiting for a slot; more are
	// refused at once. broadWait is the longest one waits.
	broadWaiting = 64
	broadWait    = 10 * time.Second
	limiterIdle  = 10 * time.Minute // a key unseen this long is forgotten
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
	setRetryAfter(c, wait)
	secs := max(1, int((wait+time.Second-1)/time.Second))
	msg := fmt.Sprintf("Too many quote requests from here: please wait %s and try again.", plural(secs, "second"))
	if currentUser(c) == nil {
		msg += " Logged-in buyers may ask for quotes more often."
	}
	return false, msg
}

// fairShare lets a few broad matches run at once, so they use at most
// that many cores, and lets narrow matches run at once without waiting
// for them: a broad request cannot starve a narrow one.
type fairShare struct {
	broad   int // a request evaluating more offers than this is broad
	slots   chan struct{}
	waiting chan struct{}
	wait    time.Duration
}

func newFairShare(slots int) *fairShare {
	if slots <= 0 {
		slots = max(1, runtime.GOMAXPROCS(0)/2)
	}
	return &fairShare{broad: broadOffers, slots: make(chan struct{}, slots), waiting: make(chan struct{}, broadWaiting), wait: broadWait}
}

// enter takes a slot when req is broad on idx (see broadOffers), waiting
// up to broadWait; it returns the function that gives the slot back. A
// broad request that cannot have a slot is refused as rate limited.
func (f *fairShare) enter(ctx context.Context, idx *market.Index, req market.Request, now time.Time) (func(), error) {
	n, err := idx.Examines(req, now)
	if err != nil || n <= f.broad {
		return func() {}, nil // an invalid request is the matcher's to refuse
	}
	busy := market.Errorf(market.CodeRateLimited, "The market is busy with other broad searches. Try again in a moment, or name models, regions or a maximum price.")
	select {
	case f.slots <- struct{}{}:
		return func() { <-f.slots }, nil
	default:
	}
	select {
	case f.waiting <- struct{}{}:
		defer func() { <-f.waiting }()
	default:
		return nil, busy
	}
	t := time.NewTimer(f.wait)
	defer t.Stop()
	select {
	case f.slots <- struct{}{}:
		return func() { <-f.slots }, nil
	case <-t.C:
		return nil, busy
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
