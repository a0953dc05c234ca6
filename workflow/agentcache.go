package workflow

import (
	"context"
	"crypto/sha256"
	"strings"
	"sync"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

// What every agent request would otherwise read from the database — its
// host token, and its node's assignments — kept in memory and following
// the store's change feed (docs/agent.md, "A fleet on one replica"): a
// heartbeat that changes nothing, and a long-poll that finds nothing new,
// then touch no database at all.
//
// An offer named on the feed — by a commit of this process
// (store.DB.OnOffersChanged, heard before the write returns) or of another
// replica (PostgreSQL's NOTIFY, Follow) — drops the entries of its nodes:
// a payment, a cancellation, a reservation starting, a host token revoked
// (migration 0052), the provider suspended. So do the agent's own reports
// made here (installed, removed, acceptance, container) and a buyer's SSH
// key added or removed here. What no feed carries — an SSH key or a report
// on another replica, a write by another process on the same SQLite file —
// is read again at most agentCacheMaxAge later (an assignment at most twice
// that, when every read slot is busy); while the change feed is
// down nothing is served from memory. An entry is also read again at the
// next start or end of a piece on the node (store.NodeAssignments), since
// assignments change by the clock there.

// agentCacheMaxAge bounds how long a node's assignments are served without
// reading them again, for the changes no feed carries; hostTokenMaxAge the
// same for a host token, whose changes (revocation, suspension) are all on
// the feed but for another process's on the same SQLite file. Each entry's
// bound is spread over a quarter more by its token's id, so that a fleet
// whose agents arrived together does not expire together.
const (
	agentCacheMaxAge = time.Minute
	hostTokenMaxAge  = 5 * time.Minute
)

// agentReadSlots is how many of the agents' reads that memory could not
// serve run at once (a token, a node's assignments): a fleet arriving or
// expiring together queues here rather than take every connection of the
// readers' pool from the quotes and pages beside it.
const agentReadSlots = 2

// agentCache is the host tokens and assignments served from memory.
type agentCache struct {
	mu sync.Mutex
	// gen counts the drops: a value read from the database before a drop
	// is not kept after it.
	gen         uint64
	tokens      map[[sha256.Size]byte]cachedToken
	assignments map[int64]cachedAssignments // by token id
	offers      map[int64]*offerKeys        // what to drop when the offer changes
}

type cachedToken struct {
	tok store.HostToken
	at  time.Time // service clock
}

type cachedAssignments struct {
	offerID int64
	na      NodeAssignments
	next    time.Time // the next start or end of a piece on the node; zero: none
}

// offerKeys are an offer's entries.
type offerKeys struct {
	tokens [][sha256.Size]byte
	nodes  []int64 // token ids
}

func newAgentCache() agentCache {
	return agentCache{tokens: map[[sha256.Size]byte]cachedToken{}, assignments: map[int64]cachedAssignments{}, offers: map[int64]*offerKeys{}}
}

func (c *agentCache) offer(id int64) *offerKeys {
	k := c.offers[id]
	if k == nil {
		k = &offerKeys{}
		c.offers[id] = k
	}
	return k
}

// fresh reports whether the entry of token id read at `at` may be served at
// now, within maxAge spread by id.
func fresh(at, now time.Time, maxAge time.Duration, id int64) bool {
	return !now.Before(at) && now.Sub(at) < maxAge+time.Duration(id%16)*maxAge/64
}

// token returns the cached token for a raw token's hash, and the
// generation to put a database read under.
func (c *agentCache) token(key [sha256.Size]byte, now time.Time) (store.HostToken, bool, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.tokens[key]
	if ok && fresh(e.at, now, hostTokenMaxAge, e.tok.ID) {
		return e.tok, true, c.gen
	}
	return store.HostToken{}, false, c.gen
}

// putToken keeps a token read from the database under generation gen,
// unless something was dropped since.
func (c *agentCache) putToken(key [sha256.Size]byte, tok store.HostToken, now time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.tokens[key]; !ok {
		k := c.offer(tok.OfferID)
		k.tokens = append(k.tokens, key)
	}
	c.tokens[key] = cachedToken{tok: tok, at: now}
}

// nodeAssignments returns a node's cached assignments at now, whether
// they are fresh (within agentCacheMaxAge) or only stale (within twice
// that: served when no read slot is free), and the generation to put a
// database read under. Past the next start or end of a piece on the node
// they are neither.
func (c *agentCache) nodeAssignments(tokenID int64, now time.Time) (na NodeAssignments, next time.Time, isFresh, stale bool, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.assignments[tokenID]
	if !ok || !(e.next.IsZero() || now.Before(e.next)) {
		return NodeAssignments{}, time.Time{}, false, false, c.gen
	}
	isFresh = fresh(e.na.At, now, agentCacheMaxAge, tokenID)
	stale = !isFresh && fresh(e.na.At, now, 2*agentCacheMaxAge, tokenID)
	if !isFresh && !stale {
		return NodeAssignments{}, time.Time{}, false, false, c.gen
	}
	na = e.na
	na.At = now
	return na, e.next, isFresh, stale, c.gen
}

// putAssignments keeps a node's assignments read from the database under
// generation gen, unless something was dropped since.
func (c *agentCache) putAssignments(tok store.HostToken, na NodeAssignments, next time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if _, ok := c.assignments[tok.ID]; !ok {
		k := c.offer(tok.OfferID)
		k.nodes = append(k.nodes, tok.ID)
	}
	c.assignments[tok.ID] = cachedAssignments{offerID: tok.OfferID, na: na, next: next}
}

// dropOffers drops the entries of the offers' nodes.
func (c *agentCache) dropOffers(ids []int64) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, id := range ids {
		k := c.offers[id]
		if k == nil {
			continue
		}
		for _, t := range k.tokens {
			delete(c.tokens, t)
		}
		for _, n := range k.nodes {
			delete(c.assignments, n)
		}
		delete(c.offers, id)
	}
}

// dropNode drops one node's assignments.
func (c *agentCache) dropNode(tokenID int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.assignments, tokenID) // its offer's list may keep the id: dropping it again is harmless
}

// dropAssignments drops every node's assignments (a buyer's SSH keys
// changed: which nodes hold the buyer's pieces is not worth a read).
func (c *agentCache) dropAssignments() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.assignments)
	for _, k := range c.offers {
		k.nodes = nil
	}
}

// dropAll drops everything (the change feed was lost or rejoined).
func (c *agentCache) dropAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.tokens)
	clear(c.assignments)
	clear(c.offers)
}

// agentRead takes one of the agentReadSlots, waiting while ctx lasts; the
// caller releases it.
func (s *Service) agentRead(ctx context.Context) (func(), error) {
	select {
	case s.agent.reads <- struct{}{}:
		return func() { <-s.agent.reads }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// agentTryRead takes one of the agentReadSlots if one is free, else
// returns nil; the caller releases it.
func (s *Service) agentTryRead() func() {
	select {
	case s.agent.reads <- struct{}{}:
		return func() { <-s.agent.reads }
	default:
		return nil
	}
}

// cacheUsable reports whether entries may be served from memory: not while
// this replica's change feed is down, since changes go unheard then.
func (s *Service) cacheUsable() bool {
	_, joined := s.FeedLag()
	return joined
}

// AuthenticateHost authenticates a raw host token (store.FindHostToken),
// from memory when it was authenticated before and nothing about its offer
// changed since: a revocation or the provider's suspension is on the
// change feed and takes effect on every replica as soon as it is heard.
func (s *Service) AuthenticateHost(ctx context.Context, raw string) (store.HostToken, error) {
	raw = strings.TrimSpace(raw)
	key := sha256.Sum256([]byte(raw))
	now := s.now()
	usable := s.cacheUsable()
	tok, ok, gen := s.agent.cache.token(key, now)
	if ok && usable {
		return tok, nil
	}
	release, err := s.agentRead(ctx)
	if err != nil {
		return store.HostToken{}, err
	}
	tok, err = s.db.FindHostToken(ctx, raw)
	release()
	if err != nil {
		return store.HostToken{}, err
	}
	if usable {
		s.agent.cache.putToken(key, tok, now, gen)
	}
	return tok, nil
}

// nodeAssignments returns the token's node's assignments at now, with the
// next time they change by the clock (store.NodeAssignments), from memory
// when nothing about the node changed since they were read.
func (s *Service) nodeAssignments(ctx context.Context, tok store.HostToken, now time.Time) (NodeAssignments, time.Time, error) {
	usable := s.cacheUsable()
	na, next, isFresh, stale, gen := s.agent.cache.nodeAssignments(tok.ID, now)
	if isFresh && usable {
		return na, next, nil
	}
	var release func()
	if stale && usable {
		// Aged past agentCacheMaxAge only (nothing on the feed dropped
		// it): read again if a slot is free, else serve it as it is
		// rather than queue — a fleet's entries expire at about 150 a
		// second at 10,000 nodes, and waiting for a slot was most of a
		// slow heartbeat when the cores are scarce.
		if release = s.agentTryRead(); release == nil {
			return na, next, nil
		}
	} else {
		var err error
		if release, err = s.agentRead(ctx); err != nil {
			return NodeAssignments{}, time.Time{}, err
		}
	}
	as, next, err := s.db.NodeAssignments(ctx, tok.ID, now)
	release()
	if err != nil {
		return NodeAssignments{}, time.Time{}, err
	}
	na = NodeAssignments{At: now, Assignments: as, Version: assignmentsVersion(as)}
	if usable {
		s.agent.cache.putAssignments(tok, na, next, gen)
	}
	return na, next, nil
}
