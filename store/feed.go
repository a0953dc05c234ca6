package store

import (
	"slices"
	"sync"
	"sync/atomic"
)

// The committed-change feed of this handle's own writes.
//
// Triggers on the tables an offer's place in the matcher depends on — the
// offer itself, its credit tiers, its reservation pieces, the state of the
// reservations holding them, its provider's suspension — note the id of
// each offer a write transaction changes (on SQLite in a TEMP table of the
// writer connection, sqlite.go; on PostgreSQL in a transaction-local
// setting, postgres.go, beside the NOTIFY other replicas hear). When the
// transaction commits, the writer takes the ids it noted and hands them to
// every subscriber (OnOffersChanged); a transaction, or a savepoint, rolled
// back takes its notes with it and publishes nothing.

// commitFeed holds the subscribers of one handle's commits. The writer's
// connections share it.
type commitFeed struct {
	// ready is set once the schema is migrated: connections opened after
	// it set up their change notes at once, the one opened before sets
	// them up in Open.
	ready atomic.Bool
	mu    sync.Mutex
	next  int
	subs  []subscriber
	// backends are the PostgreSQL backend process ids of the writer's
	// open connections: a notification one of them sent is this handle's
	// own commit, published in-process already (FollowOffers).
	backends sync.Map // uint32 → struct{}
}

type subscriber struct {
	key     int
	changed func(OfferChanges)
}

// OfferChanges is what one committed write transaction changed.
type OfferChanges struct {
	// Listings are the offers whose listing changed — the offer row, its
	// credit tiers, its provider's suspension, an interruptible piece
	// (whose payment moves the spot price quotes use) — to be read again
	// in full.
	Listings []int64
	// Commitments are the other offers whose commitments alone changed: a
	// reservation's pieces stored or deleted, or its state changed; or one
	// of the offer's host tokens revoked (which the matcher ignores and
	// the agents' caches follow).
	Commitments []int64
}

// Empty reports whether nothing changed.
func (c OfferChanges) Empty() bool { return len(c.Listings) == 0 && len(c.Commitments) == 0 }

// newOfferChanges sorts both lists, each offer once, an offer in
// listings left out of commitments.
func newOfferChanges(listings, commitments []int64) OfferChanges {
	listings = distinctIDs(listings)
	commitments = slices.DeleteFunc(distinctIDs(commitments), func(id int64) bool {
		_, found := slices.BinarySearch(listings, id)
		return found
	})
	return OfferChanges{Listings: listings, Commitments: commitments}
}

// publish hands the offers a committed transaction changed to every
// subscriber, in subscription order.
func (f *commitFeed) publish(ch OfferChanges) {
	if ch.Empty() {
		return
	}
	f.mu.Lock()
	subs := f.subs // never changed in place: (un)subscribing copies it
	f.mu.Unlock()
	for _, s := range subs {
		s.changed(ch)
	}
}

// OnOffersChanged calls changed, each time a write transaction through
// this handle commits, with the offers it changed (OfferChanges, each
// offer once): an offer created, edited, reviewed, paused, resumed or
// withdrawn, its credit tiers replaced, capacity taken or given back by a
// reservation's pieces or a change of their reservation's state, its
// provider suspended or reinstated, a host token of it revoked — the changes PostgreSQL's triggers
// notify every replica of (FollowOffers), heard here in-process on both
// engines. It holds for every write method, with no call after it.
//
// changed runs on the committing goroutine after the commit and before
// the store method returns, so a caller that writes and then reads what
// changed follows sees its own write; the writer is not released until it
// returns, so it should be quick, and it must not write through db (it may
// read). A transaction that rolls back publishes nothing; one whose
// commit fails on PostgreSQL publishes all the same (the commit may have
// reached the server before the connection broke). stop ends the
// subscription.
func (db *DB) OnOffersChanged(changed func(OfferChanges)) (stop func()) {
	f := db.feed
	f.mu.Lock()
	defer f.mu.Unlock()
	k := f.next
	f.next++
	f.subs = append(slices.Clip(f.subs), subscriber{key: k, changed: changed})
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.subs = slices.DeleteFunc(slices.Clone(f.subs), func(s subscriber) bool { return s.key == k })
	}
}

// distinctIDs returns ids sorted, each once.
func distinctIDs(ids []int64) []int64 {
	slices.Sort(ids)
	return slices.Compact(ids)
}
