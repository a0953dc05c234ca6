package market

import (
	"fmt"
	"sort"
	"sync"
	"time"
)

// bucket keys: accelerator index × 32 + region index.
const (
	regionSlots = 32
	bucketCount = 32 * regionSlots
)

// Index holds listed offers and their commitments in memory for fast
// matching, updated incrementally. It is safe for any number of concurrent
// readers (Match) with writers (Upsert, Remove, AddCommitment,
// RemoveCommitment) serialised by its lock.
//
// Offers are bucketed by accelerator and region, each bucket sorted by
// lowest price, so a request that names models, regions or a maximum price
// skips whole buckets and the tail of each, while counting what it skipped
// exactly as a scan would.
type Index struct {
	mu      sync.RWMutex
	buckets [bucketCount][]slot
	where   map[int64]uint16 // offer id → bucket key
	// pending holds commitments of offers not (or no longer) listed, so a
	// paused offer listed again keeps its reservations.
	pending map[int64][]span
	n       int
	eng     engine
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{where: map[int64]uint16{}, pending: map[int64][]span{}, eng: newEngine()}
}

// Len is the number of listed offers in the index.
func (x *Index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.n
}

// Upsert adds or replaces an offer. An offer that is not listed (not
// approved, paused or withdrawn) is removed instead. It returns an invalid
// *Error if the offer's accelerator or region is not in the catalogue.
func (x *Index) Upsert(c Candidate) error {
	if !c.Offer.Listed() {
		x.Remove(c.Offer.ID)
		return nil
	}
	s, err := makeSlot(c)
	if err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.take(c.Offer.ID); ok {
		s.spans = old.spans
	} else {
		s.spans = x.pending[s.id]
		delete(x.pending, s.id)
	}
	x.put(s)
	return nil
}

// Load replaces the index's contents with cands and commitments in one
// pass (sorting each bucket once), for start-up. Unlisted offers are
// skipped; an offer outside the catalogue is an invalid *Error and leaves
// the index unchanged.
func (x *Index) Load(cands []Candidate, commitments []Commitment) error {
	fresh := NewIndex()
	for _, c := range commitments {
		fresh.AddCommitment(c)
	}
	// Size every bucket exactly first: append's doubling would leave up to
	// half of each bucket unused.
	var sizes [bucketCount]int
	slots := make([]slot, 0, len(cands))
	for _, c := range cands {
		if !c.Offer.Listed() {
			continue
		}
		s, err := makeSlot(c)
		if err != nil {
			return fmt.Errorf("market: load offer %d: %w", c.Offer.ID, err)
		}
		sizes[bucketKey(&s)]++
		slots = append(slots, s)
	}
	for k, n := range sizes {
		if n > 0 {
			fresh.buckets[k] = make([]slot, 0, n)
		}
	}
	fresh.where = make(map[int64]uint16, len(slots))
	for _, s := range slots {
		if _, dup := fresh.where[s.id]; dup {
			return Errorf(CodeInvalid, "Offer %d is listed twice.", s.id)
		}
		if p := fresh.pending[s.id]; len(p) > 0 {
			s.spans = append(make([]span, 0, len(p)), p...)
		}
		delete(fresh.pending, s.id)
		k := bucketKey(&s)
		fresh.buckets[k] = append(fresh.buckets[k], s)
		fresh.where[s.id] = k
		fresh.n++
	}
	for k := range fresh.buckets {
		b := fresh.buckets[k]
		sort.Slice(b, func(i, j int) bool { return less(&b[i], &b[j]) })
		fresh.buckets[k] = b
	}
	// Go maps never shrink: copy what is left of pending into a small one.
	pending := make(map[int64][]span, len(fresh.pending))
	for id, p := range fresh.pending {
		pending[id] = p
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.buckets, x.where, x.pending, x.n = fresh.buckets, fresh.where, pending, fresh.n
	return nil
}

// Remove withdraws an offer from matching. Its commitments are kept aside
// in case it is listed again. Removing an unknown offer does nothing.
func (x *Index) Remove(offerID int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if old, ok := x.take(offerID); ok && len(old.spans) > 0 {
		x.pending[offerID] = old.spans
	}
}

// AddCommitment records devices held on an offer over [Start, End).
// Commitments with no devices or an empty interval are ignored.
func (x *Index) AddCommitment(c Commitment) {
	if c.Devices < 1 || !c.End.After(c.Start) {
		return
	}
	sp := newSpan(c)
	x.mu.Lock()
	defer x.mu.Unlock()
	if s := x.find(c.OfferID); s != nil {
		// A new backing array: readers never share one being written.
		s.spans = append(append(make([]span, 0, len(s.spans)+1), s.spans...), sp)
		return
	}
	x.pending[c.OfferID] = append(x.pending[c.OfferID], sp)
}

// RemoveCommitment releases a commitment added before, identified by its
// offer, devices and interval (equal commitments are interchangeable). It
// reports whether one was found.
func (x *Index) RemoveCommitment(c Commitment) bool {
	sp := newSpan(c)
	x.mu.Lock()
	defer x.mu.Unlock()
	without := func(spans []span) ([]span, bool) {
		for i, s := range spans {
			if s == sp {
				out := make([]span, 0, len(spans)-1)
				return append(append(out, spans[:i]...), spans[i+1:]...), true
			}
		}
		return spans, false
	}
	if s := x.find(c.OfferID); s != nil {
		var ok bool
		s.spans, ok = without(s.spans)
		if len(s.spans) == 0 {
			s.spans = nil
		}
		return ok
	}
	spans, ok := without(x.pending[c.OfferID])
	if len(spans) == 0 {
		delete(x.pending, c.OfferID)
	} else {
		x.pending[c.OfferID] = spans
	}
	return ok
}

// Match ranks quotes for req at now over the indexed offers. It returns an
// invalid *Error when the request is invalid.
func (x *Index) Match(req Request, now time.Time) (Result, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.eng.run(pruned{x}, req, now, true)
}

// scan is Match without the index's pruning: every offer evaluated one by
// one. It is the yardstick in benchmarks and tests.
func (x *Index) scan(req Request, now time.Time) (Result, error) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.eng.run(flat{x}, req, now, true)
}

func less(a, b *slot) bool {
	if a.intrPrice != b.intrPrice {
		return a.intrPrice < b.intrPrice
	}
	return a.id < b.id
}

func bucketKey(s *slot) uint16 { return uint16(s.acc)*regionSlots + uint16(s.region) }

// find returns the offer's slot, or nil. Callers hold the lock.
func (x *Index) find(id int64) *slot {
	k, ok := x.where[id]
	if !ok {
		return nil
	}
	b := x.buckets[k]
	for i := range b {
		if b[i].id == id {
			return &b[i]
		}
	}
	return nil
}

// take removes the offer's slot and returns it. Callers hold the write lock.
func (x *Index) take(id int64) (slot, bool) {
	k, ok := x.where[id]
	if !ok {
		return slot{}, false
	}
	b := x.buckets[k]
	for i := range b {
		if b[i].id == id {
			s := b[i]
			x.buckets[k] = append(b[:i], b[i+1:]...)
			delete(x.where, id)
			x.n--
			return s, true
		}
	}
	return slot{}, false
}

// put inserts s in its bucket in price order. Callers hold the write lock.
func (x *Index) put(s slot) {
	k := bucketKey(&s)
	b := x.buckets[k]
	i := sort.Search(len(b), func(i int) bool { return less(&s, &b[i]) })
	b = append(b, slot{})
	copy(b[i+1:], b[i:])
	b[i] = s
	x.buckets[k] = b
	x.where[s.id] = k
	x.n++
}

// pruned visits the index bucket by bucket, skipping buckets a request
// rules out and the over-price tail of the rest.
type pruned struct{ x *Index }

func (p pruned) size() int { return p.x.n }

func (p pruned) visit(q *query, counts *[numReasons]int, each func(s *slot)) {
	for k := range p.x.buckets {
		b := p.x.buckets[k]
		if len(b) == 0 {
			continue
		}
		if r := q.bucketReason(b[0].acc, b[0].region); r != rFit {
			counts[r] += len(b)
			continue
		}
		end := len(b)
		if q.maxPrice > 0 {
			// Every offer from here on sells at no less than its lowest
			// (interruptible) price, which is over the maximum.
			end = sort.Search(len(b), func(i int) bool { return b[i].intrPrice > q.maxPrice })
			counts[rPrice] += len(b) - end
		}
		for i := 0; i < end; i++ {
			each(&b[i])
		}
	}
}

// flat visits every offer, the plain scan.
type flat struct{ x *Index }

func (f flat) size() int { return f.x.n }

func (f flat) visit(q *query, counts *[numReasons]int, each func(s *slot)) {
	for k := range f.x.buckets {
		b := f.x.buckets[k]
		for i := range b {
			each(&b[i])
		}
	}
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(s *scratch) {
	// Drop pointers so the pool does not keep slots alive, and do not keep
	// huge buffers from a rare broad query forever.
	clear(s.fits)
	clear(s.cands)
	if cap(s.fits) > 1<<20 {
		s.fits = nil
	}
	if cap(s.cands) > 1<<20 {
		s.cands = nil
	}
	scratchPool.Put(s)
}
