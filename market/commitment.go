package market

import (
	"time"
)

// NodeShare is the devices a commitment holds on one node of its offer.
// An offer's nodes are numbered from 0 to Nodes−1.
type NodeShare struct {
	Node    int
	Devices int
}

// Commitment holds some of an offer's devices over the half-open interval
// [Start, End): a reservation, or a piece of one.
//
// Capacity lives on nodes. A gang (Gang: tightly coupled devices, a
// training job) of at most DevicesPerNode devices holds devices of one
// node; a larger gang holds ⌈Devices/DevicesPerNode⌉ whole nodes of an
// offer with a placement group — all their devices, so its shares add up
// to more than Devices when Devices is not a multiple of DevicesPerNode.
// Loosely coupled devices (split pieces) may be spread over several nodes
// and share nodes with others. Nodes records where the devices are; a
// commitment to be booked without Nodes is placed by PlaceCommitments, and
// an existing one without Nodes counts as held on node 0 (exact on a
// one-node offer; the store records the nodes of every piece).
type Commitment struct {
	ID      int64
	OfferID int64
	Devices int
	Start   time.Time
	End     time.Time
	Gang    bool
	Nodes   []NodeShare
}

// FitsCapacity reports whether the commitments in add can be booked on offer
// beside existing (commitments of other offers in either list are ignored),
// node by node: it is PlaceCommitments without the placement. It returns nil
// when they fit; an invalid *Error for a malformed piece; a conflict *Error
// when a piece lies outside the offer's availability window or rental
// limits, is a gang larger than a node on an offer without a placement
// group, or does not fit the nodes' free devices. The store calls it
// (through PlaceCommitments) inside its write transaction to re-check
// capacity at booking time.
func FitsCapacity(offer Offer, existing []Commitment, add []Commitment) error {
	_, err := PlaceCommitments(offer, existing, add)
	return err
}

// PlaceCommitments places the commitments in add on offer's nodes beside
// existing, in order (each sees those before it), and returns add with
// Nodes set; commitments of other offers are returned unchanged and
// ignored. A commitment that already names its nodes is checked where it
// is. Otherwise the nodes are chosen to limit fragmentation: a gang that
// fits in one node goes to the node with the fewest free devices that
// still holds it (best fit, lowest node on ties); a larger gang takes the
// lowest-numbered wholly free nodes; a split piece goes to one node by
// best fit when one holds it, else fills the nodes with the fewest free
// devices first. Free means free throughout the piece's interval; a node
// never counts fewer than zero free devices. Errors are FitsCapacity's.
func PlaceCommitments(offer Offer, existing []Commitment, add []Commitment) ([]Commitment, error) {
	sh := shape{nodes: int64(offer.Nodes), dpn: int64(offer.DevicesPerNode)}
	total := offer.Devices()
	var spans []span
	for _, c := range existing {
		if c.OfferID == offer.ID {
			spans = appendSpans(spans, c)
		}
	}
	out := make([]Commitment, len(add))
	for i, c := range add {
		out[i] = c
		if c.OfferID != offer.ID {
			continue
		}
		switch {
		case c.Devices < 1:
			return nil, Errorf(CodeInvalid, "Piece %d must hold at least one device.", i+1)
		case !c.End.After(c.Start):
			return nil, Errorf(CodeInvalid, "Piece %d must end after it starts.", i+1)
		case c.Devices > total:
			return nil, Errorf(CodeConflict, "Offer %d has %d devices; piece %d asks for %d.", offer.ID, total, i+1, c.Devices)
		case c.Start.Before(offer.AvailableFrom) || c.End.After(offer.AvailableUntil):
			return nil, Errorf(CodeConflict, "Offer %d is not available for the whole of piece %d.", offer.ID, i+1)
		}
		d := c.End.Sub(c.Start)
		if d < time.Duration(offer.MinRentalHours)*time.Hour || (offer.MaxRentalHours > 0 && d > time.Duration(offer.MaxRentalHours)*time.Hour) {
			return nil, Errorf(CodeConflict, "Offer %d rents for %d to %d hours; piece %d lasts %s.", offer.ID, offer.MinRentalHours, offer.MaxRentalHours, i+1, d)
		}
		l := layoutOf(c.Gang, int64(c.Devices), sh.dpn)
		if l == layoutWhole && !offer.PlacementGroup {
			return nil, Errorf(CodeConflict, "Offer %d has no placement group, so a gang must fit in one of its %d-device nodes; piece %d has %d devices.",
				offer.ID, offer.DevicesPerNode, i+1, c.Devices)
		}
		from, to := compactUnix(c.Start), compactEndUnix(c.End)
		var shares []NodeShare
		if len(c.Nodes) > 0 {
			if err := checkShares(offer, c, l, i); err != nil {
				return nil, err
			}
			shares = append([]NodeShare(nil), c.Nodes...)
			tl := newTimeline(appendShareSpans(spans, c.Start, c.End, shares), sh.nodes)
			for _, s := range shares {
				if used := tl.usage(uint16(s.Node), from, to); used > sh.dpn {
					tl.free()
					return nil, Errorf(CodeConflict, "Node %d of offer %d would be overbooked: %d of its %d devices committed at once. Someone may have booked it a moment ago; ask for a new quote.",
						s.Node+1, offer.ID, used, offer.DevicesPerNode)
				}
			}
			tl.free()
		} else {
			var ok bool
			tl := newTimeline(spans, sh.nodes)
			if shares, _, ok = tl.place(sh, l, int64(c.Devices), from, to); !ok {
				err := overbooked(offer, l, c.Devices, i, tl.freeIn(sh, from, to))
				tl.free()
				return nil, err
			}
			tl.free()
		}
		out[i].Nodes = shares
		spans = appendShareSpans(spans, c.Start, c.End, shares)
	}
	return out, nil
}

// overbooked is the conflict of a piece that does not fit the nodes' free devices.
func overbooked(offer Offer, l layout, devices, i int, f nodeFree) error {
	const again = " Someone may have booked it a moment ago; ask for a new quote."
	switch l {
	case layoutNode:
		return Errorf(CodeConflict, "No node of offer %d has %d devices free for the whole of piece %d (%d at most)."+again, offer.ID, devices, i+1, f.most)
	case layoutWhole:
		return Errorf(CodeConflict, "Offer %d has %d wholly free nodes for the whole of piece %d, which needs %d."+again,
			offer.ID, max(f.idle, 0), i+1, (devices+offer.DevicesPerNode-1)/offer.DevicesPerNode)
	}
	return Errorf(CodeConflict, "Offer %d would be overbooked: piece %d needs %d devices and %d are free on its nodes throughout."+again, offer.ID, i+1, devices, f.sum)
}

// checkShares checks the nodes a commitment names against its offer and
// its layout.
func checkShares(offer Offer, c Commitment, l layout, i int) error {
	sum := 0
	for k, s := range c.Nodes {
		if s.Node < 0 || s.Node >= offer.Nodes || s.Devices < 1 || s.Devices > offer.DevicesPerNode {
			return Errorf(CodeInvalid, "Piece %d names %d devices on node %d; offer %d has nodes 0 to %d of %d devices.",
				i+1, s.Devices, s.Node, offer.ID, offer.Nodes-1, offer.DevicesPerNode)
		}
		for _, o := range c.Nodes[:k] {
			if o.Node == s.Node {
				return Errorf(CodeInvalid, "Piece %d names node %d twice.", i+1, s.Node+1)
			}
		}
		sum += s.Devices
	}
	switch l {
	case layoutNode:
		if len(c.Nodes) != 1 || sum != c.Devices {
			return Errorf(CodeInvalid, "Piece %d is a gang of %d devices and must be on one node.", i+1, c.Devices)
		}
	case layoutWhole:
		if len(c.Nodes) != (c.Devices+offer.DevicesPerNode-1)/offer.DevicesPerNode || sum != len(c.Nodes)*offer.DevicesPerNode {
			return Errorf(CodeInvalid, "Piece %d is a gang of %d devices and must hold whole nodes.", i+1, c.Devices)
		}
	default:
		if sum != c.Devices {
			return Errorf(CodeInvalid, "Piece %d has %d devices but names %d on its nodes.", i+1, c.Devices, sum)
		}
	}
	return nil
}

// Availability is what an offer has free throughout a window, counted as
// requests can get it.
type Availability struct {
	// Free is the devices free throughout on each node, by node.
	Free []int
	// Spread is their sum: the most a split piece (loosely coupled work)
	// can have.
	Spread int
	// Gang is the largest gang (tightly coupled job) that fits: the most
	// free on one node or, on an offer with a placement group, all the
	// devices of its wholly free nodes if that is more.
	Gang int
}

// FreeDevices returns what offer has free throughout [from, to) beside the
// commitments cs (those of other offers are ignored), node by node, for
// calendars and "free now". Outside the offer's availability window, or for
// an empty window, nothing is free.
func FreeDevices(offer Offer, cs []Commitment, from, to time.Time) Availability {
	a := Availability{Free: make([]int, max(offer.Nodes, 0))}
	if !to.After(from) || from.Before(offer.AvailableFrom) || to.After(offer.AvailableUntil) {
		return a
	}
	var spans []span
	for _, c := range cs {
		if c.OfferID == offer.ID {
			spans = appendSpans(spans, c)
		}
	}
	f, t := compactUnix(from), compactEndUnix(to)
	tl := newTimeline(spans, int64(len(a.Free)))
	defer tl.free()
	idle := 0
	for n := range a.Free {
		free := max(offer.DevicesPerNode-int(tl.usage(uint16(n), f, t)), 0)
		a.Free[n] = free
		a.Spread += free
		a.Gang = max(a.Gang, free)
		if free == offer.DevicesPerNode {
			idle++
		}
	}
	if offer.PlacementGroup {
		a.Gang = max(a.Gang, idle*offer.DevicesPerNode)
	}
	return a
}

// FreeNow is what offer has free now for its shortest rental: FreeDevices
// over [now, now + minimum rental), at least an hour. Catalogue cards show it.
func FreeNow(offer Offer, cs []Commitment, now time.Time) Availability {
	return FreeDevices(offer, cs, now, now.Add(time.Duration(max(offer.MinRentalHours, 1))*time.Hour))
}

// FreeByDay is an availability calendar: for each of days days from day0,
// what offer has free throughout that day's part of its availability
// window (FreeDevices; a day outside the window has nothing free).
func FreeByDay(offer Offer, cs []Commitment, day0 time.Time, days int) []Availability {
	out := make([]Availability, days)
	for i := range out {
		from, to := day0.AddDate(0, 0, i), day0.AddDate(0, 0, i+1)
		if from.Before(offer.AvailableFrom) {
			from = offer.AvailableFrom
		}
		if to.After(offer.AvailableUntil) {
			to = offer.AvailableUntil
		}
		out[i] = FreeDevices(offer, cs, from, to)
	}
	return out
}

// span is a commitment's devices on one node in the matcher's compact
// form: seconds since compactEpoch, saturating at both ends (before 2000
// nothing is matched, and after 2136 nothing is asked).
type span struct {
	start, end uint32
	node       uint16
	devices    uint16 // saturating; a node has at most 255
}

// compactEpoch is 2000-01-01T00:00:00Z in unix seconds.
const compactEpoch = 946_684_800

// compactTime stores a unix time in 32 bits, saturating.
func compactTime(unix int64) uint32 {
	return uint32(min(max(unix-compactEpoch, 0), 1<<32-1))
}

// compactUnix is t as unix seconds after a round trip through compactTime.
func compactUnix(t time.Time) int64 { return int64(compactTime(t.Unix())) + compactEpoch }

// compactEndUnix is an end as spans keep it: up to a whole second.
func compactEndUnix(t time.Time) int64 { return int64(compactTime(ceilUnix(t))) + compactEpoch }

func clampDevices(n int) uint16 { return uint16(min(max(n, 0), 1<<16-1)) }

// appendSpans appends the spans of c: one per node share, or one on node 0
// when c names no nodes. Commitments with no devices or an empty interval
// hold nothing.
func appendSpans(spans []span, c Commitment) []span {
	if c.Devices < 1 || !c.End.After(c.Start) {
		return spans
	}
	if len(c.Nodes) == 0 {
		return append(spans, span{start: compactTime(c.Start.Unix()), end: compactTime(ceilUnix(c.End)), devices: clampDevices(c.Devices)})
	}
	return appendShareSpans(spans, c.Start, c.End, c.Nodes)
}

func appendShareSpans(spans []span, start, end time.Time, shares []NodeShare) []span {
	// Outward to whole seconds: the span covers every second the commitment touches.
	s, e := compactTime(start.Unix()), compactTime(ceilUnix(end))
	for _, n := range shares {
		if n.Devices > 0 && n.Node >= 0 && n.Node < 1<<16 {
			spans = append(spans, span{start: s, end: e, node: uint16(n.Node), devices: clampDevices(n.Devices)})
		}
	}
	return spans
}

func (s span) from() int64 { return int64(s.start) + compactEpoch }
func (s span) to() int64   { return int64(s.end) + compactEpoch }

// overlaps reports whether s holds devices during [from, to).
func (s span) overlaps(from, to int64) bool { return s.devices > 0 && s.from() < to && s.to() > from }

// shape is an offer's nodes: how many, and devices on each.
type shape struct{ nodes, dpn int64 }

// layout is how a commitment's devices may be placed on nodes.
type layout uint8

const (
	layoutSpread layout = iota // loosely coupled: any nodes, shared with others
	layoutNode                 // a gang within one node
	layoutWhole                // a gang on whole nodes of a placement group
)

func layoutOf(gang bool, devices, dpn int64) layout {
	switch {
	case !gang:
		return layoutSpread
	case devices <= dpn:
		return layoutNode
	}
	return layoutWhole
}

// wholeNodes is the number of whole nodes a gang of devices holds.
func wholeNodes(devices, dpn int64) int64 { return (devices + dpn - 1) / dpn }

// nodeFree sums up an offer's nodes over a window.
type nodeFree struct {
	idle int64 // nodes on which nothing is committed during the window
	sum  int64 // devices free throughout, summed over the nodes
	most int64 // the most devices free throughout on one node
}

// The capacity check over spans: each builds the spans' timeline (see
// timeline) and asks it.

// fitsAt reports whether devices fit in layout l throughout [from, to).
func fitsAt(spans []span, sh shape, l layout, devices, from, to int64) bool {
	tl := newTimeline(spans, sh.nodes)
	defer tl.free()
	return tl.fits(sh, l, devices, from, to)
}

// earliestStart is timeline.earliestStart over spans, deciding from the
// spans alone (see quickFree) when the first window settles it.
func earliestStart(spans []span, sh shape, l layout, devices, lo, hi, dur int64) (int64, bool) {
	if lo > hi || devices > sh.nodes*sh.dpn || (l == layoutNode && devices > sh.dpn) {
		return 0, false
	}
	if f, exact, ok := quickFree(spans, sh, lo, lo+dur); ok {
		switch {
		case l == layoutNode && f.most >= devices, l == layoutWhole && f.idle >= wholeNodes(devices, sh.dpn),
			l == layoutSpread && f.sum >= devices:
			return lo, true
		case exact && lo == hi:
			return 0, false
		}
	}
	tl := newTimeline(spans, sh.nodes)
	defer tl.free()
	return tl.earliestStart(sh, l, devices, lo, hi, dur)
}

// maxFree is timeline.maxFree over spans, deciding from the spans alone
// (see quickFree) when the first window settles it.
func maxFree(spans []span, sh shape, lo, hi, dur int64) (int64, int64) {
	if lo > hi {
		return 0, 0
	}
	if f, exact, ok := quickFree(spans, sh, lo, lo+dur); ok && exact && (lo == hi || f.sum == sh.nodes*sh.dpn) {
		return f.sum, lo
	}
	tl := newTimeline(spans, sh.nodes)
	defer tl.free()
	return tl.maxFree(sh, lo, hi, dur)
}

// quickFree bounds what is free throughout [from, to) from spans grouped
// by node in ascending order, as the index keeps them (ok is false for
// others: the order is checked as it goes), in one pass, without a timeline:
// the devices of a node's spans that overlap the window bound its most
// used from above, and are exactly that when those spans share an instant
// in the window (intervals share one when the latest start is before the
// earliest end) — as when a node's bookings all run over the window. So f
// never counts more free than there is, its idle count is exact, and
// exact says whether every node's count is.
func quickFree(spans []span, sh shape, from, to int64) (f nodeFree, exact, ok bool) {
	exact = true
	touched := int64(0)
	for i := 0; i < len(spans); {
		node := spans[i].node
		if i > 0 && node < spans[i-1].node {
			return nodeFree{}, false, false
		}
		var sum, cs, ce int64
		sum, cs, ce, i = nodeRun(spans, i, from, to)
		if int64(node) >= sh.nodes || sum == 0 {
			continue
		}
		touched++
		exact = exact && cs < ce
		free := max(sh.dpn-sum, 0)
		f.sum += free
		f.most = max(f.most, free)
	}
	if f.idle = sh.nodes - touched; f.idle > 0 {
		f.sum += f.idle * sh.dpn
		f.most = sh.dpn
	}
	return f, exact, true
}

// nodeRun reads the spans of one node from spans[i] on (spans grouped by
// node): the devices of those that overlap [from, to), the instants all of
// them hold within the window, [cs, ce) (empty when they share none), and
// where the next node's spans begin.
func nodeRun(spans []span, i int, from, to int64) (sum, cs, ce int64, next int) {
	node := spans[i].node
	cs, ce = from, to
	for ; i < len(spans) && spans[i].node == node; i++ {
		s := spans[i]
		if s.devices == 0 || s.end <= s.start || !s.overlaps(from, to) {
			continue
		}
		sum += int64(s.devices)
		cs, ce = max(cs, s.from()), min(ce, s.to())
	}
	return sum, cs, ce, i
}

// placeLeft is timeline.placeLeft over spans, from the spans alone (see
// quickLeft) when every node's use in the window is exact.
func placeLeft(spans []span, sh shape, l layout, devices, from, to int64) int64 {
	if l != layoutWhole && devices <= sh.dpn {
		if left, ok := quickLeft(spans, sh, devices, from, to); ok {
			return left
		}
	}
	tl := newTimeline(spans, sh.nodes)
	defer tl.free()
	return tl.placeLeft(sh, l, devices, from, to)
}

// quickLeft is what placing devices (at most a node's) on one node by
// best fit leaves free on it throughout [from, to) — the busy node with
// the fewest free that holds them, else an idle node — read from spans
// grouped by node in one pass as quickFree does; ok is false when some
// busy node's use is not exact there (see quickFree), when the spans are
// not grouped, or when no node holds the devices.
func quickLeft(spans []span, sh shape, devices, from, to int64) (int64, bool) {
	best, touched := int64(-1), int64(0)
	for i := 0; i < len(spans); {
		node := spans[i].node
		if i > 0 && node < spans[i-1].node {
			return 0, false
		}
		var sum, cs, ce int64
		sum, cs, ce, i = nodeRun(spans, i, from, to)
		if int64(node) >= sh.nodes || sum == 0 {
			continue
		}
		if cs >= ce {
			return 0, false
		}
		touched++
		if free := sh.dpn - sum; free >= devices && (best < 0 || free < best) {
			best = free
		}
	}
	switch {
	case best >= 0:
		return best - devices, true
	case touched < sh.nodes:
		return sh.dpn - devices, true
	}
	return 0, false
}

// place is timeline.place over spans.
func place(spans []span, sh shape, l layout, devices, from, to int64) ([]NodeShare, int64, bool) {
	tl := newTimeline(spans, sh.nodes)
	defer tl.free()
	return tl.place(sh, l, devices, from, to)
}
