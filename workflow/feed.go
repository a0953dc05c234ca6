package workflow

import (
	"sync"
	"time"
)

// DefaultFeedMaxLag is how far behind the change feed a replica may fall
// before /healthz reports it unavailable (the serve command's
// -feed-max-lag): a quote on a replica further behind may offer capacity
// another replica has taken, or miss capacity freed.
const DefaultFeedMaxLag = 5 * time.Second

// feedQueue coalesces the offer change feed (store.FollowOffers): the
// listening goroutine adds each changed offer's id, and the applier takes
// everything pending at once, so an offer changed many times while a batch
// was being applied is read again once. It measures the feed's lag on the
// wall clock (time.Now, monotonic), never the service's clock, which tests
// and demos shift.
type feedQueue struct {
	mu sync.Mutex
	// pending maps each changed offer to whether its listing changed (to
	// be read again in full), else only its commitments.
	pending map[int64]bool
	// pendingSince and applyingSince are when the oldest change still
	// pending, and the oldest of the batch being applied, arrived; zero when
	// there is none.
	pendingSince, applyingSince time.Time
	// joined: the feed is connected and the index was reloaded after it
	// (re)connected; downSince is when it was last not (the start, or the
	// loss of the connection).
	joined    bool
	downSince time.Time
	// told: the loss since downSince was logged (once per outage).
	told bool
	wake chan struct{}
}

func newFeedQueue() *feedQueue {
	return &feedQueue{pending: map[int64]bool{}, downSince: time.Now(), wake: make(chan struct{}, 1)}
}

// add notes that offerID changed (the replicas' feed does not say how:
// it is read again in full).
func (q *feedQueue) add(offerID int64) { q.note(offerID, true) }

// addCommitments notes that offerID's commitments changed, and nothing
// else of it.
func (q *feedQueue) addCommitments(offerID int64) { q.note(offerID, false) }

func (q *feedQueue) note(offerID int64, listing bool) {
	q.mu.Lock()
	if len(q.pending) == 0 {
		q.pendingSince = time.Now()
	}
	q.pending[offerID] = q.pending[offerID] || listing
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// take returns every pending id, now being applied, until done: the
// offers to read again in full, and those whose commitments alone changed.
func (q *feedQueue) take() (listings, commitments []int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for id, listing := range q.pending {
		if listing {
			listings = append(listings, id)
		} else {
			commitments = append(commitments, id)
		}
	}
	if len(q.pending) > 0 {
		q.applyingSince = q.pendingSince
	}
	clear(q.pending)
	q.pendingSince = time.Time{}
	return listings, commitments
}

// done marks the batch taken last applied; retry, when set, puts its ids
// back as pending since they first arrived (a read that failed), to be
// read again in full.
func (q *feedQueue) done(retry []int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(retry) > 0 {
		if len(q.pending) == 0 || q.applyingSince.Before(q.pendingSince) {
			q.pendingSince = q.applyingSince
		}
		for _, id := range retry {
			q.pending[id] = true
		}
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	q.applyingSince = time.Time{}
}

// joinedAfterReload marks the feed connected with the index reloaded: the
// changes pending from before were committed before the reload read the
// database, so it covers them. It returns how long the feed was down.
func (q *feedQueue) joinedAfterReload() (down time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.pending)
	q.pendingSince = time.Time{}
	q.joined, q.told = true, false
	return time.Since(q.downSince)
}

// lost marks the feed down: changes committed from now on are not heard
// until it reconnects and the index is reloaded. It reports whether this
// is the first failure since the feed was last joined (or since the
// start), the one worth logging: the feed retries twice a second.
func (q *feedQueue) lost() (first bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.joined {
		q.joined, q.downSince = false, time.Now()
	}
	first, q.told = !q.told, true
	return first
}

// lag is how far behind the feed the index is: the age of the oldest
// change heard and not yet applied (0 when none), or, while the feed is
// down, the time since it went down.
func (q *feedQueue) lag() (lag time.Duration, joined bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.joined {
		return time.Since(q.downSince), false
	}
	oldest := q.applyingSince
	if oldest.IsZero() || (!q.pendingSince.IsZero() && q.pendingSince.Before(oldest)) {
		oldest = q.pendingSince
	}
	if oldest.IsZero() {
		return 0, true
	}
	return time.Since(oldest), true
}
