package market

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// tlRef is the brute-force reference for the timeline: each node's devices
// held at every second of a short horizon, summed from the spans one by
// one, and every question answered by looking at every second and every
// start. It calls no capacity code.
type tlRef struct {
	nodes, dpn int64
	base       int64     // unix second of used[n][0]
	used       [][]int64 // by node, by second from base
}

const tlHorizon = 1000 // seconds the reference covers

func newTLRef(spans []span, nodes, dpn int64) tlRef {
	r := tlRef{nodes: nodes, dpn: dpn, base: tlBase + compactEpoch, used: make([][]int64, nodes)}
	for n := range r.used {
		r.used[n] = make([]int64, tlHorizon)
	}
	for _, s := range spans {
		if int64(s.node) >= nodes {
			continue
		}
		for t := int64(s.start) - tlBase; t < int64(s.end)-tlBase; t++ {
			r.used[s.node][t] += int64(s.devices)
		}
	}
	return r
}

// most is the most node n holds at one second of [from, to).
func (r tlRef) most(n, from, to int64) int64 {
	var m int64
	for t := from; t < to; t++ {
		if i := t - r.base; i >= 0 && i < tlHorizon {
			m = max(m, r.used[n][i])
		}
	}
	return m
}

// free is each node's devices free throughout [from, to), never below zero.
func (r tlRef) free(from, to int64) []int64 {
	out := make([]int64, r.nodes)
	for n := range out {
		out[n] = max(r.dpn-r.most(int64(n), from, to), 0)
	}
	return out
}

func (r tlRef) fits(l layout, devices, from, to int64) bool {
	free := r.free(from, to)
	var sum, whole int64
	one := false
	for _, f := range free {
		sum += f
		one = one || f >= devices
	}
	// A node is wholly free when nothing at all is held on it in the
	// window (its free devices are then all it has).
	for n := range free {
		if r.most(int64(n), from, to) == 0 {
			whole++
		}
	}
	switch l {
	case layoutNode:
		return devices <= r.dpn && one
	case layoutWhole:
		return whole*r.dpn >= devices
	}
	return sum >= devices
}

// place applies the placement rule PlaceCommitments documents to the free
// devices second by second; left is what the placement leaves free on the
// nodes it uses (0 for whole nodes).
func (r tlRef) place(l layout, devices, from, to int64) ([]NodeShare, int64, bool) {
	free := r.free(from, to)
	if l == layoutWhole {
		var out []NodeShare
		for n := int64(0); n < r.nodes && int64(len(out))*r.dpn < devices; n++ {
			if r.most(n, from, to) == 0 {
				out = append(out, NodeShare{Node: int(n), Devices: int(r.dpn)})
			}
		}
		return out, 0, int64(len(out))*r.dpn >= devices
	}
	best := -1
	for n, f := range free {
		if f >= devices && (best < 0 || f < free[best]) {
			best = n
		}
	}
	if best >= 0 {
		return []NodeShare{{Node: best, Devices: int(devices)}}, free[best] - devices, true
	}
	if l == layoutNode {
		return nil, 0, false
	}
	order := make([]int, r.nodes)
	for n := range order {
		order[n] = n
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(free[a] - free[b]) })
	var out []NodeShare
	need, left := devices, int64(0)
	for _, n := range order {
		if need > 0 && free[n] > 0 {
			t := min(free[n], need)
			out = append(out, NodeShare{Node: n, Devices: int(t)})
			need -= t
			left = free[n] - t
		}
	}
	if need > 0 {
		return nil, 0, false
	}
	slices.SortFunc(out, func(a, b NodeShare) int { return a.Node - b.Node })
	return out, left, true
}

// tlBase is the compact second the reference's horizon opens at.
const tlBase = 820_000_000

func randomSpans(rng *rand.Rand, nodes, dpn int64) []span {
	var out []span
	for range rng.IntN(40) {
		start := uint32(tlBase + 200 + rng.IntN(300))
		s := span{start: start, end: start + uint32(1+rng.IntN(80)), node: uint16(rng.Int64N(nodes + 1)),
			devices: uint16(rng.Int64N(dpn + 3))} // beyond the nodes, overbooked, or holding nothing
		out = append(out, s)
		for k := 0; k < 5 && rng.IntN(4) == 0; k++ { // the same commitment again, or one ending or starting where it does
			switch rng.IntN(3) {
			case 0:
			case 1:
				s.start, s.end = s.end, s.end+uint32(1+rng.IntN(20))
			default:
				s.end, s.start = s.start, s.start-uint32(1+rng.IntN(20))
			}
			out = append(out, s)
		}
	}
	if rng.IntN(2) == 0 {
		sortSpans(out) // the index's order; otherwise the timeline sorts a copy
	}
	return out
}

// TestTimelineAgainstBruteForce: every answer of the timeline (usage, free
// devices, fit, earliest start, most free, placement and its leftover)
// equals the second-by-second reference on random spans, including
// overbooked nodes, spans on nodes the offer lacks, spans holding nothing,
// duplicates and spans meeting end to start.
func TestTimelineAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	var found, notFound, later, quick int
	for i := range 3000 {
		nodes, dpn := 1+rng.Int64N(5), 1+rng.Int64N(8)
		sh := shape{nodes: nodes, dpn: dpn}
		spans := randomSpans(rng, nodes, dpn)
		ref := newTLRef(spans, nodes, dpn)
		tl := newTimeline(spans, nodes)
		base := int64(tlBase + compactEpoch)
		for range 4 {
			from := base + 150 + rng.Int64N(400)
			dur := 1 + rng.Int64N(60)
			to := from + dur
			n := rng.Int64N(nodes)
			if got, want := tl.usage(uint16(n), from, to), ref.most(n, from, to); got != want {
				t.Fatalf("instance %d: node %d used %d during [%d, %d), reference %d (spans %v)", i, n, got, from-base, to-base, want, spans)
			}
			f := tl.freeIn(sh, from, to)
			var sum, most, idle int64
			for k, fr := range ref.free(from, to) {
				sum, most = sum+fr, max(most, fr)
				if ref.most(int64(k), from, to) == 0 {
					idle++
				}
			}
			if f.sum != sum || f.most != most || f.idle != idle {
				t.Fatalf("instance %d: freeIn %+v, reference sum %d most %d idle %d", i, f, sum, most, idle)
			}
			devices := 1 + rng.Int64N(nodes*dpn+1)
			l := []layout{layoutSpread, layoutNode, layoutWhole}[rng.IntN(3)]
			if got, want := tl.fits(sh, l, devices, from, to), ref.fits(l, devices, from, to); got != want {
				t.Fatalf("instance %d: fits %t, reference %t (%d devices, layout %d)", i, got, want, devices, l)
			}
			shares, left, ok := tl.place(sh, l, devices, from, to)
			wShares, wLeft, wOK := ref.place(l, devices, from, to)
			if ok != wOK || (ok && (!slices.Equal(shares, wShares) || left != wLeft)) {
				t.Fatalf("instance %d: place %v left %d ok %t, reference %v left %d ok %t (%d devices, layout %d)", i, shares, left, ok, wShares, wLeft, wOK, devices, l)
			}
			if ok {
				if got := tl.placeLeft(sh, l, devices, from, to); got != left {
					t.Fatalf("instance %d: placeLeft %d, place left %d", i, got, left)
				}
				if got := placeLeft(spans, sh, l, devices, from, to); got != left {
					t.Fatalf("instance %d: placeLeft over spans %d, place left %d", i, got, left)
				}
			}

			lo := from
			hi := lo + rng.Int64N(120) - 10
			if rng.IntN(3) == 0 {
				hi = lo // one window: the wrappers may decide from the spans alone
			}
			wantAt, wantOK := int64(0), false
			for s := lo; s <= hi; s++ {
				if ref.fits(l, devices, s, s+dur) {
					wantAt, wantOK = s, true
					break
				}
			}
			at, ok2 := tl.earliestStart(sh, l, devices, lo, hi, dur)
			if ok2 != wantOK || (ok2 && at != wantAt) {
				t.Fatalf("instance %d: earliest start %d %t, reference %d %t (%d devices, layout %d, [%d, %d] for %d; spans %v)",
					i, at-base, ok2, wantAt-base, wantOK, devices, l, lo-base, hi-base, dur, spans)
			}
			if at, ok2 := earliestStart(spans, sh, l, devices, lo, hi, dur); ok2 != wantOK || (ok2 && at != wantAt) {
				t.Fatalf("instance %d: earliestStart over spans %d %t, reference %d %t", i, at-base, ok2, wantAt-base, wantOK)
			}
			switch {
			case !wantOK:
				notFound++
			case wantAt > lo:
				later++
			default:
				found++
			}
			bestFree, bestAt := int64(0), int64(0)
			for s := lo; s <= hi; s++ {
				var sum int64
				for _, fr := range ref.free(s, s+dur) {
					sum += fr
				}
				if s == lo || sum > bestFree {
					bestFree, bestAt = sum, s
				}
			}
			if lo > hi {
				bestFree, bestAt = 0, 0
			}
			if gf, ga := tl.maxFree(sh, lo, hi, dur); gf != bestFree || ga != bestAt {
				t.Fatalf("instance %d: most free %d at %d, reference %d at %d ([%d, %d] for %d)", i, gf, ga-base, bestFree, bestAt-base, lo-base, hi-base, dur)
			}
			if gf, ga := maxFree(spans, sh, lo, hi, dur); gf != bestFree || ga != bestAt {
				t.Fatalf("instance %d: maxFree over spans %d at %d, reference %d at %d", i, gf, ga-base, bestFree, bestAt-base)
			}
			if qf, exact, ok := quickFree(spans, sh, from, to); ok {
				if qf.idle != idle || qf.sum > sum || qf.most > most || (exact && (qf.sum != sum || qf.most != most)) {
					t.Fatalf("instance %d: quickFree %+v exact %t, reference sum %d most %d idle %d", i, qf, exact, sum, most, idle)
				}
				quick++
			}
		}
		tl.free()
	}
	// The generator must keep producing every case of the earliest start.
	if found < 1000 || later < 500 || notFound < 1000 || quick < 1000 {
		t.Fatalf("earliest start at the lower bound %d, later %d, none %d, quick bounds %d: too few of a case", found, later, notFound, quick)
	}
}

// TestIndexKeepsSpansSorted: whatever the order of updates, each offer's
// spans in the index stay in the order the timeline reads without sorting.
func TestIndexKeepsSpansSorted(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 2))
	x := NewIndex()
	x.compactMin = 8
	o := randomOffer(rng, 1)
	o.Nodes, o.DevicesPerNode = 4, 8
	var held []Commitment
	for i := range 400 {
		switch rng.IntN(6) {
		case 0:
			x.Remove(o.ID)
		case 1:
			if err := x.Upsert(Candidate{Offer: o}); err != nil {
				t.Fatal(err)
			}
		case 2:
			if len(held) > 0 {
				k := rng.IntN(len(held))
				x.RemoveCommitment(held[k])
				held = append(held[:k], held[k+1:]...)
			}
		default:
			s := o.AvailableFrom.Add(time.Duration(rng.IntN(48)) * time.Hour)
			c := randomCommitment(rng, o, s, s.Add(time.Duration(1+rng.IntN(8))*time.Hour))
			x.AddCommitment(c)
			held = append(held, c)
		}
		x.mu.RLock()
		s := x.find(o.ID)
		if s != nil && !slices.IsSortedFunc(x.spansOf(s), spanCmp) {
			t.Fatalf("step %d: the offer's spans are out of order: %v", i, x.spansOf(s))
		}
		x.mu.RUnlock()
	}
}
