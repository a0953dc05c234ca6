package market

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// maxCatalogue is the most accelerators, and the most regions, the index
// can address: a slot names its accelerator and region by their position
// in the catalogue in one byte each, and a query filters them with a
// catSet of as many bits.
const maxCatalogue = 256

// checkCatalogue refuses a catalogue with more accelerators or regions than
// the index can address.
func checkCatalogue(accs []Accelerator, regs []Region) error {
	if len(accs) > maxCatalogue {
		return fmt.Errorf("market: the catalogue has %d accelerators; the matcher's index holds at most %d", len(accs), maxCatalogue)
	}
	if len(regs) > maxCatalogue {
		return fmt.Errorf("market: the catalogue has %d regions; the matcher's index holds at most %d", len(regs), maxCatalogue)
	}
	return nil
}

// The catalogue is compiled in: one too large for the index stops the
// program as it starts, before any offer is misplaced.
func init() {
	if err := checkCatalogue(accelerators, regions); err != nil {
		panic(err)
	}
}

// bucketCount is the number of buckets: one per accelerator and region of
// the catalogue, at most maxCatalogue², so a key fits in a uint16.
func bucketCount() int { return len(accelerators) * len(regions) }

// bucketKey is the bucket of s: accelerator position × regions + region
// position.
func bucketKey(s *slot) uint16 { return uint16(s.acc)*uint16(len(regions)) + uint16(s.region) }

// catSet is a set of catalogue positions (accelerators or regions).
type catSet [maxCatalogue / 64]uint64

func (c *catSet) add(i int)        { c[i>>6] |= 1 << (i & 63) }
func (c *catSet) has(i uint8) bool { return c[i>>6]&(1<<(i&63)) != 0 }

// Index holds listed offers and their commitments in memory for fast
// matching, updated incrementally. It is safe for any number of concurrent
// readers (Match) with writers (Upsert, Remove, AddCommitment,
// RemoveCommitment) serialised by its lock.
//
// Offers are bucketed by accelerator and region, each bucket sorted by
// lowest price, so a request that names models, regions or a maximum price
// skips whole buckets and the tail of each, while counting what it skipped
// exactly as a scan would. Slots hold no pointers: every offer's
// commitments live in one span arena (laid out in bucket order on Load and
// on compaction), so a query reads memory in order and the garbage
// collector has nothing in the index to scan.
type Index struct {
	mu sync.RWMutex
	// writers counts the writers waiting for mu or holding it, so that a
	// yielding match does not pause while one waits (MatchYielding).
	writers atomic.Int32
	buckets [][]slot // by bucketKey
	spans   []span   // the arena; a slot's spans are spans[spanOff:spanOff+spanN]
	dead    int      // arena entries no slot refers to any more
	// compactMin is the fewest dead entries worth a compaction (tests
	// lower it).
	compactMin int
	where      offerKeys // offer id → bucket key
	// pending holds commitments of offers not (or no longer) listed, so a
	// paused offer listed again keeps its reservations.
	pending map[int64][]span
	n       int
	eng     engine
	// bounds holds, per bucket, bounds on what its offers can score (see
	// bucketBound), for the early stop of Match.
	bounds []bucketBound
	// byPrice holds, per bucket, the positions of its offers that sell
	// interruptible capacity, in order of their on-demand price (then id):
	// a request that does not allow interruption books them at that
	// price, not the one the bucket is sorted by, and walks them in this
	// order.
	byPrice [][]uint32

	// vers holds the offers' software versions; slots refer to them by id.
	vers versionTable
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{buckets: make([][]slot, bucketCount()), bounds: make([]bucketBound, bucketCount()), byPrice: make([][]uint32, bucketCount()), where: newOfferKeys(0), pending: map[int64][]span{}, eng: newEngine(), compactMin: 4096}
}

// lock takes the write lock, counted in writers.
func (x *Index) lock() {
	x.writers.Add(1)
	x.mu.Lock()
}

func (x *Index) unlock() {
	x.mu.Unlock()
	x.writers.Add(-1)
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
	x.lock()
	defer x.unlock()
	s.driver, s.cuda = x.vers.id(c.Offer.DriverVersion), x.vers.id(c.Offer.CUDAVersion)
	if old, ok := x.take(c.Offer.ID); ok {
		s.spanOff, s.spanN, s.committed, s.spansEnd = old.spanOff, old.spanN, old.committed, old.spansEnd
	} else if p := x.pending[s.id]; len(p) > 0 {
		x.setSpans(&s, p)
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
	pending := map[int64][]span{}
	for _, c := range commitments {
		if c.Devices >= 1 && c.End.After(c.Start) {
			pending[c.OfferID] = appendSpans(pending[c.OfferID], c)
		}
	}
	// Size every bucket exactly first: append's doubling would leave up to
	// half of each bucket unused.
	sizes := make([]int, bucketCount())
	var vers versionTable
	slots := make([]slot, 0, len(cands))
	for _, c := range cands {
		if !c.Offer.Listed() {
			continue
		}
		s, err := makeSlot(c)
		if err != nil {
			return fmt.Errorf("market: load offer %d: %w", c.Offer.ID, err)
		}
		s.driver, s.cuda = vers.id(c.Offer.DriverVersion), vers.id(c.Offer.CUDAVersion)
		sizes[bucketKey(&s)]++
		slots = append(slots, s)
	}
	buckets := make([][]slot, len(sizes))
	for k, n := range sizes {
		if n > 0 {
			buckets[k] = make([]slot, 0, n)
		}
	}
	where := newOfferKeys(len(slots))
	for _, s := range slots {
		if _, dup := where.get(s.id); dup {
			return Errorf(CodeInvalid, "Offer %d is listed twice.", s.id)
		}
		k := bucketKey(&s)
		buckets[k] = append(buckets[k], s)
		where.set(s.id, k)
	}
	slots = nil
	bounds := make([]bucketBound, len(buckets))
	byPrice := make([][]uint32, len(buckets))
	for k := range buckets {
		b := buckets[k]
		sort.Slice(b, func(i, j int) bool { return less(&b[i], &b[j]) })
		for i := range b {
			bounds[k].widen(&b[i])
			if b[i].flags&flagInterruptible != 0 {
				byPrice[k] = append(byPrice[k], uint32(i))
			}
		}
		bp := byPrice[k]
		sort.Slice(bp, func(i, j int) bool { return onDemandLess(&b[bp[i]], &b[bp[j]]) })
	}
	// The arena in bucket order, sized exactly.
	live := 0
	for id, p := range pending {
		if _, ok := where.get(id); ok {
			live += len(p)
		}
	}
	arena := make([]span, 0, live)
	for k := range buckets {
		b := buckets[k]
		for i := range b {
			s := &b[i]
			p := pending[s.id]
			sortSpans(p)
			s.spanOff, s.spanN = uint32(len(arena)), uint32(len(p))
			s.committed, s.spansEnd = spanSummary(p)
			arena = append(arena, p...)
			delete(pending, s.id)
		}
	}
	// Go maps never shrink: copy what is left of pending into a small one.
	rest := make(map[int64][]span, len(pending))
	for id, p := range pending {
		rest[id] = p
	}
	x.lock()
	defer x.unlock()
	x.buckets, x.spans, x.dead, x.where, x.pending, x.n = buckets, arena, 0, where, rest, where.len()
	x.vers, x.bounds, x.byPrice = vers, bounds, byPrice
	return nil
}

// Remove withdraws an offer from matching. Its commitments are kept aside
// in case it is listed again. Removing an unknown offer does nothing.
func (x *Index) Remove(offerID int64) {
	x.lock()
	defer x.unlock()
	if old, ok := x.take(offerID); ok && old.spanN > 0 {
		x.pending[offerID] = append([]span(nil), x.spansOf(&old)...)
		x.dead += int(old.spanN)
		x.maybeCompact()
	}
}

// AddCommitment records devices held on an offer over [Start, End), on
// the nodes it names (node 0 when it names none; see Commitment).
// Commitments with no devices or an empty interval are ignored.
func (x *Index) AddCommitment(c Commitment) {
	if c.Devices < 1 || !c.End.After(c.Start) {
		return
	}
	var buf [4]span
	add := appendSpans(buf[:0], c)
	x.lock()
	defer x.unlock()
	if s := x.find(c.OfferID); s != nil {
		// Move the offer's spans to the end of the arena with the new ones;
		// their old place is dead until the next compaction.
		off := len(x.spans)
		x.spans = append(x.spans, x.spansOf(s)...)
		x.spans = append(x.spans, add...)
		// Each new span into its place in the offer's order (see timeline).
		mine := x.spans[off:]
		for i := len(mine) - len(add); i < len(mine); i++ {
			for j := i; j > 0 && spanCmp(mine[j], mine[j-1]) < 0; j-- {
				mine[j], mine[j-1] = mine[j-1], mine[j]
			}
		}
		x.dead += int(s.spanN)
		s.spanOff, s.spanN = uint32(off), s.spanN+uint32(len(add))
		s.committed, s.spansEnd = spanSummary(x.spansOf(s))
		x.maybeCompact()
		return
	}
	x.pending[c.OfferID] = append(x.pending[c.OfferID], add...)
}

// SetCommitments replaces every commitment of an offer, listed or not,
// with those of cs on that offer — for an index following changes made
// elsewhere (another replica), where the database's list is the truth.
// Unlike AddCommitment it can be applied twice.
func (x *Index) SetCommitments(offerID int64, cs []Commitment) {
	var add []span
	for _, c := range cs {
		if c.OfferID == offerID && c.Devices >= 1 && c.End.After(c.Start) {
			add = appendSpans(add, c)
		}
	}
	x.lock()
	defer x.unlock()
	if s := x.find(offerID); s != nil {
		x.dead += int(s.spanN)
		x.setSpans(s, add)
		if s.spanN == 0 {
			s.spanOff = 0
		}
		x.maybeCompact()
		return
	}
	if len(add) == 0 {
		delete(x.pending, offerID)
	} else {
		x.pending[offerID] = add
	}
}

// RemoveCommitment releases a commitment added before, identified by its
// offer, devices, interval and nodes (equal commitments are
// interchangeable). It reports whether one was found; a commitment only
// partly found is left alone.
func (x *Index) RemoveCommitment(c Commitment) bool {
	var buf [4]span
	del := appendSpans(buf[:0], c)
	if len(del) == 0 {
		return false
	}
	x.lock()
	defer x.unlock()
	if s := x.find(c.OfferID); s != nil {
		spans := x.spansOf(s)
		if !containsSpans(spans, del) {
			return false
		}
		for _, sp := range del {
			for i := range spans {
				if spans[i] == sp {
					// In place: the write lock keeps readers out.
					copy(spans[i:], spans[i+1:])
					spans = spans[:len(spans)-1]
					break
				}
			}
		}
		s.spanN -= uint32(len(del))
		x.dead += len(del)
		s.committed, s.spansEnd = spanSummary(x.spansOf(s))
		if s.spanN == 0 {
			s.spanOff = 0
		}
		x.maybeCompact()
		return true
	}
	spans := x.pending[c.OfferID]
	if !containsSpans(spans, del) {
		return false
	}
	rest := make([]span, 0, len(spans)-len(del))
	taken := make([]bool, len(del))
	for _, s := range spans {
		k := -1
		for j, d := range del {
			if !taken[j] && d == s {
				k = j
				break
			}
		}
		if k < 0 {
			rest = append(rest, s)
		} else {
			taken[k] = true
		}
	}
	if len(rest) == 0 {
		delete(x.pending, c.OfferID)
	} else {
		x.pending[c.OfferID] = rest
	}
	return true
}

// containsSpans reports whether spans hold every span of want (each
// matched once; want's spans are on distinct nodes).
func containsSpans(spans, want []span) bool {
	for _, w := range want {
		found := false
		for _, s := range spans {
			if s == w {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Match ranks quotes for req at now over the indexed offers. It returns an
// invalid *Error when the request is invalid.
func (x *Index) Match(req Request, now time.Time) (Result, error) {
	return x.MatchWithin(req, now, Budget{})
}

// MatchWithin is Match within a work budget: a request that would
// evaluate more offers than b allows is answered over those with the
// lowest prices, exactly as Match would answer over them alone, and
// Explanation.Cut says what was left out. The index's read lock is held
// for each run of the engine, not across a request's relaxations.
func (x *Index) MatchWithin(req Request, now time.Time, b Budget) (Result, error) {
	return x.eng.run(pruned{x}, req, now, true, true, b, nil)
}

// MatchYielding is MatchWithin for a request that may wait: about every
// 0.1 ms of its work it calls pause, which may block to let more urgent
// work run first (workflow runs broad matches so, behind narrow ones). It
// holds the index's read lock meanwhile, which other readers share; while
// a writer waits for the lock, pause is not called, so the write waits for
// the rest of the run's work only.
func (x *Index) MatchYielding(req Request, now time.Time, b Budget, pause func()) (Result, error) {
	if pause == nil {
		return x.MatchWithin(req, now, b)
	}
	return x.eng.run(pruned{x}, req, now, true, true, b, func() {
		if x.writers.Load() == 0 {
			pause()
		}
	})
}

// exhaustive is Match evaluating every offer the index's pruning leaves,
// without the early stop: exact totals, the same quotes. It is the
// "before" of benchmarks and a yardstick in tests.
func (x *Index) exhaustive(req Request, now time.Time) (Result, error) {
	return x.eng.run(pruned{x}, req, now, true, false, Budget{}, nil)
}

// Examines is how many offers a match of req at now would evaluate one by
// one, before any budget: those left once the buckets of other models,
// too little memory or other regions and the tails over the maximum price
// are ruled out. It costs about as much as compiling the request, so a
// caller can tell broad requests from narrow ones before running them. An
// invalid request is an invalid *Error.
func (x *Index) Examines(req Request, now time.Time) (int, error) {
	q, err := compile(req, now)
	if err != nil {
		return 0, err
	}
	defer putQuery(q)
	sc := getScratch()
	defer putScratch(sc)
	x.mu.RLock()
	defer x.mu.RUnlock()
	sc.runs = pruned{x}.runs(q, &sc.counts, sc.runs[:0])
	n := 0
	for _, r := range sc.runs {
		n += len(r)
	}
	return n, nil
}

// scan is Match without the index's pruning: every offer evaluated one by
// one. It is the yardstick in benchmarks and tests.
func (x *Index) scan(req Request, now time.Time) (Result, error) {
	return x.eng.run(flat{x}, req, now, true, false, Budget{}, nil)
}

func less(a, b *slot) bool {
	if a.intrPrice != b.intrPrice {
		return a.intrPrice < b.intrPrice
	}
	return a.id < b.id
}

// spansOf returns the commitments of s. Callers hold the lock.
func (x *Index) spansOf(s *slot) []span {
	if s.spanN == 0 {
		return nil
	}
	return x.spans[s.spanOff : s.spanOff+s.spanN : s.spanOff+s.spanN]
}

// setSpans appends spans to the arena as s's commitments, in the order
// the capacity check reads them (spanCmp). Callers hold the write lock.
func (x *Index) setSpans(s *slot, spans []span) {
	s.spanOff, s.spanN = uint32(len(x.spans)), uint32(len(spans))
	s.committed, s.spansEnd = spanSummary(spans)
	x.spans = append(x.spans, spans...)
	sortSpans(x.spans[s.spanOff:])
}

// spanSummary is Σ devices over spans, saturating at the int32 maximum,
// and the latest end (compact; 0 without spans). A window [t, …) with t at
// or after that end overlaps no span.
func spanSummary(spans []span) (committed int32, end uint32) {
	var n int64
	for _, s := range spans {
		n += int64(s.devices)
		end = max(end, s.end)
	}
	return int32(min(n, 1<<31-1)), end
}

// maybeCompact rewrites the arena in bucket order once at least half of
// it is dead, so updates cost amortised O(1) space and queries keep
// reading spans in order. Callers hold the write lock.
func (x *Index) maybeCompact() {
	if x.dead < x.compactMin || x.dead < len(x.spans)/2 {
		return
	}
	arena := make([]span, 0, len(x.spans)-x.dead)
	for k := range x.buckets {
		b := x.buckets[k]
		for i := range b {
			s := &b[i]
			off := uint32(len(arena))
			arena = append(arena, x.spansOf(s)...)
			s.spanOff = off
		}
	}
	x.spans, x.dead = arena, 0
}

// find returns the offer's slot, or nil. Callers hold the lock.
func (x *Index) find(id int64) *slot {
	k, ok := x.where.get(id)
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
	k, ok := x.where.get(id)
	if !ok {
		return slot{}, false
	}
	b := x.buckets[k]
	for i := range b {
		if b[i].id == id {
			s := b[i]
			x.buckets[k] = append(b[:i], b[i+1:]...)
			bp := x.byPrice[k][:0]
			for _, p := range x.byPrice[k] {
				switch {
				case p > uint32(i):
					bp = append(bp, p-1)
				case p < uint32(i):
					bp = append(bp, p)
				}
			}
			x.byPrice[k] = bp
			x.where.remove(id)
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
	x.where.set(s.id, k)
	x.n++
	x.bounds[k].widen(&s)
	bp := x.byPrice[k]
	for j, p := range bp {
		if p >= uint32(i) {
			bp[j] = p + 1
		}
	}
	if s.flags&flagInterruptible != 0 {
		j := sort.Search(len(bp), func(j int) bool { return onDemandLess(&s, &b[bp[j]]) })
		bp = append(bp, 0)
		copy(bp[j+1:], bp[j:])
		bp[j] = uint32(i)
	}
	x.byPrice[k] = bp
}

// onDemandLess orders offers by on-demand price, then id.
func onDemandLess(a, b *slot) bool {
	if a.price != b.price {
		return a.price < b.price
	}
	return a.id < b.id
}

// bucketBound bounds what any offer of a bucket can bring to a score: the
// highest relative throughput (fewest hours for stated work), the lowest
// carbon intensity, the highest reliability, and the lowest storage and
// egress prices and provisioning time (with the price, a lower bound on
// the effective cost, see walkRun). Each only widens as
// offers come (an offer taken out leaves it as it was, still a bound);
// Load sets it exactly. The zero value, for an empty bucket, bounds
// nothing and is never read: only runs of offers are.
type bucketBound struct {
	maxRel, minCarbon, maxReliability  uint16
	minStorage, minEgress, minProvMins uint16
	set                                bool
}

func (b *bucketBound) widen(s *slot) {
	if !b.set {
		*b = bucketBound{maxRel: s.relThroughput, minCarbon: s.carbon, maxReliability: s.reliability,
			minStorage: s.storageC, minEgress: s.egressC, minProvMins: s.provMins, set: true}
		return
	}
	b.maxRel, b.minCarbon, b.maxReliability = max(b.maxRel, s.relThroughput), min(b.minCarbon, s.carbon), max(b.maxReliability, s.reliability)
	b.minStorage, b.minEgress, b.minProvMins = min(b.minStorage, s.storageC), min(b.minEgress, s.egressC), min(b.minProvMins, s.provMins)
}

// pruned visits the index bucket by bucket, skipping buckets a request
// rules out and the over-price tail of the rest.
type pruned struct{ x *Index }

func (p pruned) size() int     { return p.x.n }
func (p pruned) spans() []span { return p.x.spans }

func (p pruned) versions() *versionTable { return &p.x.vers }
func (p pruned) rlock()                  { p.x.mu.RLock() }
func (p pruned) runlock()                { p.x.mu.RUnlock() }

// bound is the bound of the bucket run r lies in and its interruptible
// offers' positions by on-demand price; the index walks a gang request's
// runs in price order and stops early (see gangWalk.merged).
func (p pruned) bound(r []slot) (bucketBound, []uint32, bool) {
	k := bucketKey(&r[0])
	return p.x.bounds[k], p.x.byPrice[k], true
}

func (p pruned) runs(q *query, counts *[numReasons]int, out [][]slot) [][]slot {
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
		if end > 0 {
			out = append(out, b[:end])
		}
	}
	return out
}

// flat visits every offer, the plain scan.
type flat struct{ x *Index }

func (f flat) size() int     { return f.x.n }
func (f flat) spans() []span { return f.x.spans }

func (f flat) versions() *versionTable { return &f.x.vers }
func (f flat) rlock()                  { f.x.mu.RLock() }
func (f flat) runlock()                { f.x.mu.RUnlock() }

// bound says the scan never stops early: it evaluates every offer.
func (f flat) bound(r []slot) (bucketBound, []uint32, bool) { return bucketBound{}, nil, false }

func (f flat) runs(q *query, counts *[numReasons]int, out [][]slot) [][]slot {
	for k := range f.x.buckets {
		if b := f.x.buckets[k]; len(b) > 0 {
			out = append(out, b)
		}
	}
	return out
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(s *scratch) {
	// Drop pointers so the pool does not keep slots alive, and do not keep
	// huge buffers from a rare broad query forever.
	clear(s.runs)
	clear(s.fits)
	clear(s.cands)
	clear(s.walk)
	s.walk = s.walk[:0]
	if cap(s.fits) > 1<<20 {
		s.fits = nil
	}
	if cap(s.cands) > 1<<20 {
		s.cands = nil
	}
	s.runs = s.runs[:0]
	scratchPool.Put(s)
}
