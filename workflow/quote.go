package workflow

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Quoting and booking from a quote: one path for the request builder, the
// API and the standing orders, so the same request ranks the same way
// wherever it is matched — within the quote budget, with hourly emissions
// and the carbon-aware start.

// Quote limits on the matcher's work.
const (
	// broadOffers: a request that evaluates more offers than this one by
	// one is broad. Every request naming a model and a region or two
	// evaluates fewer at 100,000 offers.
	broadOffers = 10_000
	// broadWaiting is the most broad matches waiting for a slot; more are
	// refused at once. broadWait is the longest one waits.
	broadWaiting = 64
	broadWait    = 10 * time.Second
	// broadPause is how long a broad match sleeps at each of its pauses
	// (about every 0.1 ms of its work) while other requests are being
	// served or one was within broadQuiet: it then takes about a twentieth
	// of a core, and they the rest. (The runtime's timers make any sleep
	// under a millisecond about one.)
	broadPause = 2 * time.Millisecond
	broadQuiet = 2 * time.Millisecond
	// carbonTTL bounds how long the offers' own hourly profiles are served
	// from memory after a change made by another replica; this replica's
	// changes, and every offer change the index follows, drop them at once.
	carbonTTL = 30 * time.Second
)

// Quote runs the matcher for req at now as every quote is made: within the
// quote budget (Config.QuoteBudget), a broad request taking one of the few
// broad slots (so it cannot starve narrow ones; none free within a while
// is a market CodeRateLimited error), with hourly emissions estimates and,
// when the request asks for it, the carbon-aware start.
func (s *Service) Quote(ctx context.Context, req market.Request, now time.Time) (market.Result, []market.CarbonShift, error) {
	idx := s.Index()
	broad, release, err := s.broad.enter(ctx, idx, req, now)
	if err != nil {
		return market.Result{}, nil, err
	}
	defer release()
	if broad {
		return s.quoteBroad(ctx, idx, req, now)
	}
	return s.quoteOn(ctx, idx, req, now)
}

// Serving marks a request being served until done is called. Broad
// matches give way to such requests (fairShare.pause): web marks every
// request it serves.
func (s *Service) Serving() (done func()) { return s.broad.serve() }

// quoteOn is Quote on idx without a broad slot (the standing orders'
// matcher, one goroutine, takes none).
func (s *Service) quoteOn(ctx context.Context, idx *market.Index, req market.Request, now time.Time) (market.Result, []market.CarbonShift, error) {
	return s.quoteMatching(ctx, req, now, func(r market.Request, at time.Time) (market.Result, error) {
		return idx.MatchWithin(r, at, s.budget)
	})
}

// quoteBroad is quoteOn for a broad request holding a slot: its match
// pauses for the other requests being served (fairShare.pause).
func (s *Service) quoteBroad(ctx context.Context, idx *market.Index, req market.Request, now time.Time) (market.Result, []market.CarbonShift, error) {
	return s.quoteMatching(ctx, req, now, func(r market.Request, at time.Time) (market.Result, error) {
		return idx.MatchYielding(r, at, s.budget, s.broad.pause)
	})
}

func (s *Service) quoteMatching(ctx context.Context, req market.Request, now time.Time, match func(market.Request, time.Time) (market.Result, error)) (market.Result, []market.CarbonShift, error) {
	profile, err := s.carbonProfiles(ctx)
	if err != nil {
		return market.Result{}, nil, err
	}
	return market.MatchCarbonAware(match, req, now, profile)
}

// BookQuote re-runs the matcher for req and reserves the live quote that
// honours the quote id the buyer saw (market.QuoteKey: the same pieces at
// the quoted prices or lower, within the quote's validity; "as soon as
// possible" starts now), in one database transaction that re-checks
// capacity (Book). The browser and the API both book through it; it
// counts bookings and conflicts (a quote gone or capacity taken
// meanwhile) for metrics.
func (s *Service) BookQuote(ctx context.Context, buyerID int64, req market.Request, quoteID string, hold time.Duration) (_ market.Reservation, err error) {
	defer func() {
		if err == nil {
			s.metrics.Booked()
		} else if market.ErrorCode(err) == market.CodeConflict {
			s.metrics.BookingConflict()
		}
	}()
	key, err := market.ParseQuoteKey(quoteID)
	if err != nil {
		return market.Reservation{}, err
	}
	now := s.now()
	// Every quote, not only the buyer's limit: the quoted one may rank lower now.
	all := req
	all.Limit = market.MaxQuoteLimit
	res, _, err := s.Quote(ctx, all, now)
	if err != nil {
		return market.Reservation{}, err
	}
	quote, err := key.Honour(res.Quotes, now)
	if err != nil {
		return market.Reservation{}, err
	}
	offers := map[int64]market.Offer{}
	for _, p := range quote.Pieces {
		l, err := s.db.FindOfferByID(ctx, p.OfferID)
		if market.ErrorCode(err) == market.CodeNotFound {
			return market.Reservation{}, market.Errorf(market.CodeConflict, "An offer in that quote was withdrawn. Here are fresh quotes.")
		}
		if err != nil {
			return market.Reservation{}, err
		}
		offers[p.OfferID] = l.Offer
	}
	pieces, err := market.PiecesFromQuote(quote, offers)
	if err != nil {
		return market.Reservation{}, err
	}
	rt, err := s.bookingRuntime(ctx, buyerID, req.Runtime)
	if err != nil {
		return market.Reservation{}, err
	}
	reqJSON, err := market.EncodeRequestJSON(req) // the runtime's secrets are left out
	if err != nil {
		return market.Reservation{}, err
	}
	return s.bookWithRuntime(ctx, buyerID, pieces, string(reqJSON), rt, hold)
}

// carbonProfiles returns the profile lookup for quote pieces: the offer's
// own hourly profile, else its stated intensity, else its region's; served
// from memory (carbonCache), so a quote reads nothing from the database
// for it once warm.
func (s *Service) carbonProfiles(ctx context.Context) (market.ProfileFunc, error) {
	own, err := s.carbon.ownProfiles(ctx, s)
	if err != nil {
		return nil, err
	}
	return func(p market.Piece) market.CarbonProfile {
		if op, ok := own[p.OfferID]; ok {
			return op
		}
		return market.OfferCarbonProfile(p.RegionID, s.carbon.stated(ctx, s, p.OfferID), nil)
	}, nil
}

// carbonCache keeps what quotes need to estimate emissions: the offers'
// own hourly profiles (all of them, reloaded after carbonTTL or a change
// made here) and every listed offer's stated intensity, kept as the index
// reads the offers (a full reload, and each offer it follows).
type carbonCache struct {
	mu       sync.Mutex
	own      map[int64]market.CarbonProfile
	loadedAt time.Time // zero: reload before use
	intens   map[int64]int
}

func newCarbonCache() *carbonCache { return &carbonCache{intens: map[int64]int{}} }

// ownProfiles returns the offers' own profiles, reloading them when stale.
// The map returned is never changed afterwards.
func (c *carbonCache) ownProfiles(ctx context.Context, s *Service) (map[int64]market.CarbonProfile, error) {
	c.mu.Lock()
	own, fresh := c.own, !c.loadedAt.IsZero() && time.Since(c.loadedAt) < carbonTTL
	c.mu.Unlock()
	if fresh {
		return own, nil
	}
	loaded := time.Now()
	own, err := s.db.ListOfferCarbonProfiles(ctx)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.own, c.loadedAt = own, loaded
	c.mu.Unlock()
	return own, nil
}

// stated is an offer's stated carbon intensity (0: unknown, its region's
// applies): as the index read it, else read from the database once.
func (c *carbonCache) stated(ctx context.Context, s *Service, offerID int64) int {
	c.mu.Lock()
	g, ok := c.intens[offerID]
	c.mu.Unlock()
	if ok {
		return g
	}
	if l, err := s.db.FindOfferByID(ctx, offerID); err == nil {
		g = l.Offer.CarbonGPerKWh
	}
	c.mu.Lock()
	c.intens[offerID] = g
	c.mu.Unlock()
	return g
}

// noteOffer keeps an offer's stated intensity as the index reads it.
func (c *carbonCache) noteOffer(o market.Offer) {
	c.mu.Lock()
	c.intens[o.ID] = o.CarbonGPerKWh
	c.mu.Unlock()
}

// forget drops what is kept about one offer.
func (c *carbonCache) forget(offerID int64) {
	c.mu.Lock()
	delete(c.intens, offerID)
	c.mu.Unlock()
}

// profilesChanged drops the own profiles, reloaded at the next quote.
func (c *carbonCache) profilesChanged() {
	c.mu.Lock()
	c.loadedAt = time.Time{}
	c.mu.Unlock()
}

// reset keeps the stated intensities of offers (a full reload of the
// index) in place of everything kept before.
func (c *carbonCache) reset(offers []market.Offer) {
	intens := make(map[int64]int, len(offers))
	for _, o := range offers {
		intens[o.ID] = o.CarbonGPerKWh
	}
	c.mu.Lock()
	c.intens, c.loadedAt = intens, time.Time{}
	c.mu.Unlock()
}

// fairShare lets a few broad matches run at once, so they use at most
// that many cores, and lets narrow matches run at once without waiting
// for them: a broad request cannot starve a narrow one. A broad match
// also runs behind everything else the server does: it pauses about
// every 0.1 ms of its work, letting waiting goroutines run, and while
// other requests are being served, or were within broadQuiet, it sleeps
// at each pause (broadPause), so they keep the processors and a broad
// match takes what they leave (at least about a twentieth of a core).
type fairShare struct {
	broad   int // a request evaluating more offers than this is broad
	slots   chan struct{}
	waiting chan struct{}
	wait    time.Duration
	sleep   time.Duration // broadPause
	// serving counts the requests being served (Service.Serving), broadIn
	// the broad quotes among them waiting for a slot or holding one;
	// lastDone is when the last of them was done, since epoch.
	serving, broadIn, lastDone atomic.Int64
	epoch                      time.Time
	quiet                      time.Duration // broadQuiet
}

func newFairShare(slots int) *fairShare {
	if slots <= 0 {
		slots = max(1, runtime.GOMAXPROCS(0)/2)
	}
	return &fairShare{broad: broadOffers, slots: make(chan struct{}, slots), waiting: make(chan struct{}, broadWaiting), wait: broadWait, sleep: broadPause, quiet: broadQuiet, epoch: time.Now()}
}

// serve counts a request being served until done is called.
func (f *fairShare) serve() (done func()) {
	f.serving.Add(1)
	return func() {
		f.lastDone.Store(int64(time.Since(f.epoch)))
		f.serving.Add(-1)
	}
}

// pause is a broad match's pause (market.Index.MatchYielding): it lets
// the goroutines waiting for a processor run, and sleeps while other
// requests are being served or were a moment ago (more are likely to
// come).
func (f *fairShare) pause() {
	runtime.Gosched()
	if f.serving.Load() > f.broadIn.Load() || time.Since(f.epoch)-time.Duration(f.lastDone.Load()) < f.quiet {
		time.Sleep(f.sleep)
	}
}

// enter takes a slot when req is broad on idx (see broadOffers), waiting
// up to broadWait; it reports whether req is broad and returns the
// function that gives the slot back. A broad request that cannot have a
// slot is refused as rate limited.
func (f *fairShare) enter(ctx context.Context, idx *market.Index, req market.Request, now time.Time) (bool, func(), error) {
	n, err := idx.Examines(req, now)
	if err != nil || n <= f.broad {
		return false, func() {}, nil // an invalid request is the matcher's to refuse
	}
	f.broadIn.Add(1)
	release := func() {
		<-f.slots
		f.broadIn.Add(-1)
	}
	refuse := func(err error) (bool, func(), error) {
		f.broadIn.Add(-1)
		return true, nil, err
	}
	busy := market.Errorf(market.CodeRateLimited, "The market is busy with other broad searches. Try again in a moment, or name models, regions or a maximum price.")
	select {
	case f.slots <- struct{}{}:
		return true, release, nil
	default:
	}
	select {
	case f.waiting <- struct{}{}:
		defer func() { <-f.waiting }()
	default:
		return refuse(busy)
	}
	t := time.NewTimer(f.wait)
	defer t.Stop()
	select {
	case f.slots <- struct{}{}:
		return true, release, nil
	case <-t.C:
		return refuse(busy)
	case <-ctx.Done():
		return refuse(ctx.Err())
	}
}

// SetOfferCarbonProfile stores the provider's hourly carbon profile of its
// offer (store.SetOfferCarbonProfile); quotes use it at once.
func (s *Service) SetOfferCarbonProfile(ctx context.Context, providerID, offerID int64, p market.CarbonProfile, source string) error {
	if err := s.db.SetOfferCarbonProfile(ctx, providerID, offerID, p, source, s.now()); err != nil {
		return err
	}
	s.carbon.profilesChanged()
	return nil
}

// DeleteOfferCarbonProfile returns the provider's offer to its stated or
// region's profile; quotes use that at once.
func (s *Service) DeleteOfferCarbonProfile(ctx context.Context, providerID, offerID int64) error {
	if err := s.db.DeleteOfferCarbonProfile(ctx, providerID, offerID); err != nil {
		return err
	}
	s.carbon.profilesChanged()
	return nil
}
