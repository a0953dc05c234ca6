package market

import (
	"slices"
	"sort"
	"sync"
)

// A timeline is an offer's commitments read as each node's usage over
// time: for every node, the devices held at once, as a list of disjoint
// steps sorted by time. Built from spans sorted by node then start (the
// index keeps every offer's spans in that order; other spans are sorted
// first) in O(n log k) for n spans at most k of which overlap, it answers
// what the capacity check asks in time near-linear in the spans:
//
//   - one window (freeIn, usage, place): per node, a binary search and the
//     steps inside the window, O(nodes · log n + steps in the window);
//   - every candidate start at once (earliestStart, maxFree): a sweep
//     moving the window [t, t+dur) over the starts in order, each node's
//     most used kept by a monotone deque and the nodes merged by a heap on
//     their next change, O(n log nodes).
//
// The sweep looks at a superset of the starts the capacity rules name (the
// lower bound and every step's end, plus the instants a step enters the
// window): looking at more starts, in order, finds the same earliest start
// and the same most free, since both are attained at the lower bound or at
// an end (see earliestStart).
type timeline struct {
	// steps holds, by node then time, the instants at which a node's usage
	// is constant and above zero: disjoint on each node, and two adjacent
	// steps of a node differ in usage.
	steps []step
	nodes []tlNode // the nodes below the shape's count that have steps, in node order

	sorted []span    // a sorted copy of unsorted input
	ends   []spanEnd // the build's heap of active spans
	dq     []int32   // the sweep's deques, node k's within [nodes[k].lo, nodes[k].hi)
	heap   []int32   // the sweep's heap of nodes by next change
	busy   []nodeFreeDevices
}

// step is a node's usage over [from, to), unix seconds.
type step struct {
	from, to int64
	used     int64
	node     uint16
}

// spanEnd is an active span during a build: its end and its devices.
type spanEnd struct{ end, devices int64 }

// tlNode is one node's steps, steps[lo:hi], and its sweep state.
type tlNode struct {
	node       uint16
	lo, hi     int32
	in, out    int32 // the next step to enter the window, and to leave it
	head, tail int32 // its deque: dq[head:tail], steps with falling usage
	used       int64 // the most used in the window
	key        int64 // the next start at which the node's window changes
}

type nodeFreeDevices struct{ node, free int64 }

var timelinePool = sync.Pool{New: func() any { return new(timeline) }}

// newTimeline returns the timeline of spans on nodes 0 … nodes−1 (spans on
// other nodes are ignored); release it with free.
func newTimeline(spans []span, nodes int64) *timeline {
	tl := timelinePool.Get().(*timeline)
	tl.build(spans, nodes)
	return tl
}

// free returns tl to the pool; the caller must not use it again.
func (tl *timeline) free() {
	if cap(tl.steps) > 1<<20 {
		*tl = timeline{} // do not keep a rare huge offer's buffers
	}
	timelinePool.Put(tl)
}

// spanCmp orders spans by node, start, end, then devices: the index's order.
func spanCmp(a, b span) int {
	switch {
	case a.node != b.node:
		return int(a.node) - int(b.node)
	case a.start != b.start:
		return cmpU32(a.start, b.start)
	case a.end != b.end:
		return cmpU32(a.end, b.end)
	}
	return int(a.devices) - int(b.devices)
}

func cmpU32(a, b uint32) int {
	if a < b {
		return -1
	}
	return 1
}

// sortSpans puts spans in the index's order (spanCmp).
func sortSpans(spans []span) {
	if !slices.IsSortedFunc(spans, spanCmp) {
		slices.SortFunc(spans, spanCmp)
	}
}

func (tl *timeline) build(spans []span, nodes int64) {
	if !slices.IsSortedFunc(spans, spanCmp) {
		tl.sorted = append(tl.sorted[:0], spans...)
		slices.SortFunc(tl.sorted, spanCmp)
		spans = tl.sorted
	}
	tl.steps, tl.nodes = tl.steps[:0], tl.nodes[:0]
	for i := 0; i < len(spans); {
		node := spans[i].node
		j := i + 1
		for j < len(spans) && spans[j].node == node {
			j++
		}
		if int64(node) < nodes {
			lo := len(tl.steps)
			tl.nodeSteps(node, spans[i:j])
			if len(tl.steps) > lo {
				tl.nodes = append(tl.nodes, tlNode{node: node, lo: int32(lo), hi: int32(len(tl.steps))})
			}
		}
		i = j
	}
}

// nodeSteps appends the steps of one node's spans, sorted by start: a
// sweep over starts, with the active spans' ends in a min-heap.
func (tl *timeline) nodeSteps(node uint16, spans []span) {
	h := tl.ends[:0]
	var used, cur int64
	emit := func(to int64) {
		if to <= cur {
			return
		}
		if used > 0 {
			if n := len(tl.steps); n > 0 && tl.steps[n-1].node == node && tl.steps[n-1].to == cur && tl.steps[n-1].used == used {
				tl.steps[n-1].to = to
			} else {
				tl.steps = append(tl.steps, step{from: cur, to: to, used: used, node: node})
			}
		}
		cur = to
	}
	retire := func(until int64, all bool) {
		for len(h) > 0 && (all || h[0].end <= until) {
			e := h[0].end
			emit(e)
			for len(h) > 0 && h[0].end == e {
				used -= h[0].devices
				h = popEnd(h)
			}
		}
	}
	for _, s := range spans {
		if s.devices == 0 || s.end <= s.start {
			continue // holds nothing at any instant
		}
		from := s.from()
		retire(from, false)
		emit(from)
		used += int64(s.devices)
		h = pushEnd(h, spanEnd{end: s.to(), devices: int64(s.devices)})
	}
	retire(0, true)
	tl.ends = h[:0]
}

func pushEnd(h []spanEnd, e spanEnd) []spanEnd {
	h = append(h, e)
	for k := len(h) - 1; k > 0; {
		p := (k - 1) / 2
		if h[p].end <= h[k].end {
			break
		}
		h[p], h[k] = h[k], h[p]
		k = p
	}
	return h
}

func popEnd(h []spanEnd) []spanEnd {
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	for k := 0; ; {
		c := 2*k + 1
		if c >= len(h) {
			break
		}
		if c+1 < len(h) && h[c+1].end < h[c].end {
			c++
		}
		if h[k].end <= h[c].end {
			break
		}
		h[k], h[c] = h[c], h[k]
		k = c
	}
	return h
}

// usedIn is the most devices node k (an index in nodes) holds at once
// during [from, to).
func (tl *timeline) usedIn(k int, from, to int64) int64 {
	n := &tl.nodes[k]
	st := tl.steps[n.lo:n.hi]
	i := sort.Search(len(st), func(i int) bool { return st[i].to > from })
	var m int64
	for ; i < len(st) && st[i].from < to; i++ {
		m = max(m, st[i].used)
	}
	return m
}

// usage is the most devices the commitments hold at once on node during
// [from, to).
func (tl *timeline) usage(node uint16, from, to int64) int64 {
	k := sort.Search(len(tl.nodes), func(k int) bool { return tl.nodes[k].node >= node })
	if k == len(tl.nodes) || tl.nodes[k].node != node {
		return 0
	}
	return tl.usedIn(k, from, to)
}

// freeIn is the offer's free devices throughout [from, to), node by node;
// a node never counts fewer than zero.
func (tl *timeline) freeIn(sh shape, from, to int64) nodeFree {
	var f nodeFree
	touched := int64(0)
	for k := range tl.nodes {
		u := tl.usedIn(k, from, to)
		if u == 0 {
			continue
		}
		touched++
		free := max(sh.dpn-u, 0)
		f.sum += free
		f.most = max(f.most, free)
	}
	if f.idle = sh.nodes - touched; f.idle > 0 {
		f.sum += f.idle * sh.dpn
		f.most = sh.dpn
	}
	return f
}

// fits reports whether devices fit in layout l throughout [from, to).
func (tl *timeline) fits(sh shape, l layout, devices, from, to int64) bool {
	f := tl.freeIn(sh, from, to)
	switch l {
	case layoutNode:
		return f.most >= devices
	case layoutWhole:
		return f.idle >= wholeNodes(devices, sh.dpn)
	}
	return f.sum >= devices
}

// sweeper moves the window [t, t+dur) over the starts t in [lo, hi] in
// order. At each start, le is the nodes whose most used in the window is at
// most thr and free the devices free throughout it, summed over the nodes
// (never fewer than zero on one), both counting the nodes without steps.
type sweeper struct {
	tl       *timeline
	sh       shape
	hi, dur  int64
	thr      int64
	t        int64
	le, free int64
	begun    bool
}

func (tl *timeline) sweep(sh shape, lo, hi, dur, thr int64) sweeper {
	w := sweeper{tl: tl, sh: sh, hi: hi, dur: dur, thr: thr, t: lo}
	if cap(tl.dq) < len(tl.steps) {
		tl.dq = make([]int32, len(tl.steps))
	}
	tl.dq = tl.dq[:len(tl.steps)]
	tl.heap = tl.heap[:0]
	bare := sh.nodes - int64(len(tl.nodes))
	w.le, w.free = bare, bare*sh.dpn
	for k := range tl.nodes {
		n := &tl.nodes[k]
		st := tl.steps[n.lo:n.hi]
		first := n.lo + int32(sort.Search(len(st), func(i int) bool { return st[i].to > lo }))
		n.in, n.out, n.head, n.tail, n.used = first, first, n.lo, n.lo, 0
		w.advance(n)
		w.add(n.used, 1)
		tl.heap = append(tl.heap, int32(k))
	}
	for i := len(tl.heap)/2 - 1; i >= 0; i-- {
		tl.down(i)
	}
	return w
}

// add counts (sign 1) or uncounts (−1) a node whose most used is used.
func (w *sweeper) add(used, sign int64) {
	if used <= w.thr {
		w.le += sign
	}
	w.free += sign * max(w.sh.dpn-used, 0)
}

// advance brings node n's window to [w.t, w.t+dur) and sets its key.
func (w *sweeper) advance(n *tlNode) {
	tl := w.tl
	for n.in < n.hi && tl.steps[n.in].from < w.t+w.dur {
		u := tl.steps[n.in].used
		for n.tail > n.head && tl.steps[tl.dq[n.tail-1]].used <= u {
			n.tail--
		}
		tl.dq[n.tail] = n.in
		n.tail++
		n.in++
	}
	for n.out < n.in && tl.steps[n.out].to <= w.t {
		if n.head < n.tail && tl.dq[n.head] == n.out {
			n.head++
		}
		n.out++
	}
	n.used = 0
	if n.head < n.tail {
		n.used = tl.steps[tl.dq[n.head]].used
	}
	n.key = 1<<62 - 1
	if n.in < n.hi {
		// A step enters once t + dur passes its start.
		n.key = tl.steps[n.in].from - w.dur + 1
	}
	if n.out < n.hi {
		n.key = min(n.key, tl.steps[n.out].to)
	}
}

// next moves to the next start at which some node's window changes (the
// first call stays at lo) and reports whether it is at most hi.
func (w *sweeper) next() bool {
	if !w.begun {
		w.begun = true
		return w.t <= w.hi
	}
	tl := w.tl
	if len(tl.heap) == 0 {
		return false
	}
	t := tl.nodes[tl.heap[0]].key
	if t > w.hi {
		return false
	}
	w.t = t
	for len(tl.heap) > 0 && tl.nodes[tl.heap[0]].key <= t {
		n := &tl.nodes[tl.heap[0]]
		w.add(n.used, -1)
		w.advance(n)
		w.add(n.used, 1)
		tl.down(0)
	}
	return true
}

func (tl *timeline) down(k int) {
	h := tl.heap
	for {
		c := 2*k + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && tl.nodes[h[c+1]].key < tl.nodes[h[c]].key {
			c++
		}
		if tl.nodes[h[k]].key <= tl.nodes[h[c]].key {
			return
		}
		h[k], h[c] = h[c], h[k]
		k = c
	}
}

// earliestStart returns the earliest s in [lo, hi] at which devices fit in
// layout l throughout [s, s+dur). The answer is lo or the end of some
// commitment: moving a start left to the previous such point never adds an
// overlapping commitment, on any node.
func (tl *timeline) earliestStart(sh shape, l layout, devices, lo, hi, dur int64) (int64, bool) {
	if lo > hi || devices > sh.nodes*sh.dpn || (l == layoutNode && devices > sh.dpn) {
		return 0, false
	}
	thr, need := sh.dpn-devices, int64(1) // a node with room for the gang
	if l == layoutWhole {
		thr, need = 0, wholeNodes(devices, sh.dpn) // wholly free nodes
	}
	w := tl.sweep(sh, lo, hi, dur, thr)
	for w.next() {
		if (l == layoutSpread && w.free >= devices) || (l != layoutSpread && w.le >= need) {
			return w.t, true
		}
	}
	return 0, false
}

// maxFree returns the most devices free throughout some window [s, s+dur)
// with s in [lo, hi], summed over the nodes (what split pieces can have),
// and the earliest such s.
func (tl *timeline) maxFree(sh shape, lo, hi, dur int64) (int64, int64) {
	if lo > hi {
		return 0, 0
	}
	total := sh.nodes * sh.dpn
	best, at := int64(-1), lo
	w := tl.sweep(sh, lo, hi, dur, 0)
	for w.next() {
		if w.free > best {
			best, at = w.free, w.t
			if best == total {
				break
			}
		}
	}
	return best, at
}

// placeLeft is the leftover of place without building the placement, for
// ranking: it allocates only for a split piece no single node holds.
func (tl *timeline) placeLeft(sh shape, l layout, devices, from, to int64) int64 {
	if l == layoutWhole {
		return 0
	}
	if devices <= sh.dpn {
		best, touched := int64(-1), int64(0)
		for k := range tl.nodes {
			u := tl.usedIn(k, from, to)
			if u == 0 {
				continue
			}
			touched++
			if free := sh.dpn - u; free >= devices && (best < 0 || free < best) {
				best = free
			}
		}
		switch {
		case best >= 0:
			return best - devices
		case touched < sh.nodes:
			return sh.dpn - devices
		}
	}
	_, left, _ := tl.place(sh, l, devices, from, to)
	return left
}

// place chooses nodes for devices in layout l throughout [from, to), as
// PlaceCommitments documents, and returns the shares and the devices the
// placement leaves free on the nodes it uses (0 for whole nodes); ok is
// false when they do not fit.
func (tl *timeline) place(sh shape, l layout, devices, from, to int64) (shares []NodeShare, left int64, ok bool) {
	// The nodes with something committed in the window, in node order.
	busy := tl.busy[:0]
	for k := range tl.nodes {
		if u := tl.usedIn(k, from, to); u > 0 {
			busy = append(busy, nodeFreeDevices{int64(tl.nodes[k].node), max(sh.dpn-u, 0)})
		}
	}
	tl.busy = busy[:0]
	// idle calls f on the idle nodes in order until it returns false.
	idle := func(f func(n int64) bool) {
		b := 0
		for n := int64(0); n < sh.nodes; n++ {
			for b < len(busy) && busy[b].node < n {
				b++
			}
			if b < len(busy) && busy[b].node == n {
				continue
			}
			if !f(n) {
				return
			}
		}
	}
	if l == layoutWhole {
		k := wholeNodes(devices, sh.dpn)
		idle(func(n int64) bool {
			shares = append(shares, NodeShare{Node: int(n), Devices: int(sh.dpn)})
			return int64(len(shares)) < k
		})
		return shares, 0, int64(len(shares)) == k
	}
	byFree := append([]nodeFreeDevices(nil), busy...)
	sort.Slice(byFree, func(i, j int) bool {
		if byFree[i].free != byFree[j].free {
			return byFree[i].free < byFree[j].free
		}
		return byFree[i].node < byFree[j].node
	})
	// One node by best fit: a busy node if one holds it (busy nodes have
	// fewer free devices than idle ones), else the lowest idle node.
	if devices <= sh.dpn {
		for _, b := range byFree {
			if b.free >= devices {
				return []NodeShare{{Node: int(b.node), Devices: int(devices)}}, b.free - devices, true
			}
		}
		var got []NodeShare
		idle(func(n int64) bool {
			got = []NodeShare{{Node: int(n), Devices: int(devices)}}
			return false
		})
		if got != nil {
			return got, sh.dpn - devices, true
		}
	}
	if l == layoutNode {
		return nil, 0, false
	}
	// Spread: the nodes with the fewest free devices first, then idle ones.
	need := devices
	take := func(n, free int64) {
		t := min(free, need)
		shares = append(shares, NodeShare{Node: int(n), Devices: int(t)})
		need -= t
		left = free - t
	}
	for _, b := range byFree {
		if need > 0 && b.free > 0 {
			take(b.node, b.free)
		}
	}
	idle(func(n int64) bool {
		if need > 0 {
			take(n, sh.dpn)
		}
		return need > 0
	})
	if need > 0 {
		return nil, 0, false
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].Node < shares[j].Node })
	return shares, left, true
}
