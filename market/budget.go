package market

import (
	"fmt"
	"math"
	"sort"
)

// Budget bounds the work of one match (Index.MatchWithin), so that no
// request can take the CPU of many: the offers evaluated one by one are
// what a match costs (whole buckets ruled out by model, memory or region,
// and the tail over a maximum price, cost nothing each).
type Budget struct {
	// Offers is the most offers a match evaluates one by one in its run;
	// 0 means no limit. A run that would evaluate more evaluates those
	// with the lowest prices (the lowest price an offer sells at,
	// interruptible where it sells so; ties by offer id) and says so in
	// Explanation.Cut. When nothing fits, each relaxation run evaluates at
	// most a tenth of Offers, and all of them together twice Offers, so a
	// request costs at most three times Offers.
	Offers int
}

// relaxBudget is what the relaxations of a request within b may evaluate:
// per run and in all (see Budget.Offers); -1 for no limit.
func (b Budget) relaxBudget() (perRun, total int) {
	if b.Offers <= 0 {
		return -1, -1
	}
	return max(1, b.Offers/10), 2 * b.Offers
}

// DefaultBudget is the budget the marketplace serves quotes within: about
// 50 ms of one core for the broadest request at 1,000,000 offers (see
// docs/testing.md), and above what any request naming a model or two regions
// evaluates there.
var DefaultBudget = Budget{Offers: 50_000}

// Cut says what a work budget left out of a match. The zero Cut means
// nothing was left out: the counts of the explanation and the quotes are
// those of every listed offer.
type Cut struct {
	// Examined is the offers evaluated one by one when some were left
	// out (the budget), and Unexamined those left out: every one of them
	// sells at PriceCeiling or more, every examined one at PriceCeiling or
	// less. The quotes are exactly the best among the examined offers; the
	// explanation's counts are exact for what was examined, and Total and
	// Fit are lower bounds.
	Examined, Unexamined int
	PriceCeiling         Cents
	// Relaxations is set when the suggestions were searched within what
	// was left of the budget: some of their runs were cut or not tried,
	// so nearer changes may exist.
	Relaxations bool
	// lastID is the last examined offer id at PriceCeiling (offers at
	// the ceiling are examined in id order).
	lastID int64
}

// Partial reports whether the budget left anything out.
func (c Cut) Partial() bool { return c.Unexamined > 0 || c.Relaxations }

// Message tells a person what was left out and what to do, or is empty.
func (c Cut) Message() string {
	if !c.Partial() {
		return ""
	}
	s := ""
	if c.Unexamined > 0 {
		s = fmt.Sprintf("This request matches more offers than one search examines. These are the best quotes among the %s offers with the lowest prices (up to %s per device-hour); %s dearer %s not examined. Name models, regions or a maximum price to search them all.",
			groupThousands(c.Examined), c.PriceCeiling, groupThousands(c.Unexamined), wasWere(c.Unexamined))
	}
	if c.Relaxations {
		if s != "" {
			s += " "
		}
		s += "The suggested changes were searched within the same limit; nearer ones may exist."
	}
	return s
}

func wasWere(n int) string {
	if n == 1 {
		return "offer was"
	}
	return "offers were"
}

// cutRuns keeps, of runs (each sorted by lowest price, then id), the
// limit offers that sell at the lowest prices, ties by id, truncating each
// run to its share in place. It needs 0 < limit < the offers in runs.
func cutRuns(runs [][]slot, limit, visit int) ([][]slot, Cut) {
	lo, hi := int32(math.MaxInt32), int32(0)
	for _, r := range runs {
		lo, hi = min(lo, r[0].intrPrice), max(hi, r[len(r)-1].intrPrice)
	}
	atMost := func(p int32) int {
		n := 0
		for _, r := range runs {
			n += sort.Search(len(r), func(i int) bool { return r[i].intrPrice > p })
		}
		return n
	}
	// The lowest price p with at least limit offers at p or less.
	for lo < hi {
		if mid := lo + (hi-lo)/2; atMost(mid) >= limit {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	p := lo
	need := limit - atMost(p-1) // taken at price p, lowest ids first
	type level struct{ a, b int }
	levels := make([]level, len(runs))
	idLo, idHi := int64(math.MaxInt64), int64(math.MinInt64)
	for i, r := range runs {
		a := sort.Search(len(r), func(k int) bool { return r[k].intrPrice >= p })
		b := sort.Search(len(r), func(k int) bool { return r[k].intrPrice > p })
		levels[i] = level{a, b}
		if a < b {
			idLo, idHi = min(idLo, r[a].id), max(idHi, r[b-1].id)
		}
	}
	upTo := func(i int, id int64) int {
		r, l := runs[i], levels[i]
		return l.a + sort.Search(l.b-l.a, func(k int) bool { return r[l.a+k].id > id })
	}
	atLevel := func(id int64) int {
		n := 0
		for i := range runs {
			n += upTo(i, id) - levels[i].a
		}
		return n
	}
	for idLo < idHi {
		if mid := idLo + (idHi-idLo)/2; atLevel(mid) >= need {
			idHi = mid
		} else {
			idLo = mid + 1
		}
	}
	out := runs[:0]
	for i, r := range runs {
		if end := upTo(i, idLo); end > 0 {
			out = append(out, r[:end])
		}
	}
	return out, Cut{Examined: limit, Unexamined: visit - limit, PriceCeiling: Cents(p), lastID: idLo}
}
