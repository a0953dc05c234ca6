package market

import (
	"fmt"
	"sort"
	"strings"
)

// Software versions (an offer's driver and CUDA or ROCm version, a
// request's minimums) follow one grammar:
//
//	version = number *( "." number )   ; at most MaxVersionLen characters
//	number  = 1*( "0" … "9" )
//
// Any number of parts, each any size. Versions compare numerically part by
// part, exactly: leading zeros do not count (550.054 = 550.54) and missing
// parts count as zero (12 = 12.0 = 12.0.0), so 6.2.41133 < 6.2.41134 and
// 550.54.15.1 < 550.54.15.2.

// MaxVersionLen is the longest version accepted, in characters.
const MaxVersionLen = 32

// versionProblem says what is wrong with v, calling it what (e.g. "the
// driver version") and naming example as a good one, or returns "" when v
// follows the grammar.
func versionProblem(v, what, example string) string {
	use := "use numbers separated by dots, e.g. " + example + "."
	switch {
	case v == "":
		return fmt.Sprintf("Enter %s: %s", what, use)
	case len(v) > MaxVersionLen:
		return fmt.Sprintf("Shorten %s to at most %d characters: %s", what, MaxVersionLen, use)
	}
	for _, r := range v {
		if r != '.' && (r < '0' || r > '9') {
			return fmt.Sprintf("%q is not allowed in %s: %s", string(r), what, use)
		}
	}
	if strings.HasPrefix(v, ".") || strings.HasSuffix(v, ".") || strings.Contains(v, "..") {
		return fmt.Sprintf("%s has an empty part (a dot at the start or end, or two in a row): %s", capitalise(what), use)
	}
	return ""
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// canonicalVersion returns v with each part's leading zeros and the
// trailing zero parts removed ("012.4.0" → "12.4", "0.0" → "0"), so equal
// versions have equal canonical forms; ok is false when v does not follow
// the grammar.
func canonicalVersion(v string) (canon string, ok bool) {
	if versionProblem(v, "", "") != "" {
		return "", false
	}
	parts := strings.Split(v, ".")
	for i, p := range parts {
		if p = strings.TrimLeft(p, "0"); p == "" {
			p = "0"
		}
		parts[i] = p
	}
	n := len(parts)
	for n > 1 && parts[n-1] == "0" {
		n--
	}
	return strings.Join(parts[:n], "."), true
}

// compareCanonical compares canonical versions part by part: a part with
// more digits is larger (no leading zeros), equal lengths compare as text,
// and a version that runs out of parts first is smaller (its missing parts
// are zero and the other's remaining parts are not all zero).
func compareCanonical(a, b string) int {
	for a != "" || b != "" {
		var pa, pb string
		pa, a, _ = strings.Cut(a, ".")
		pb, b, _ = strings.Cut(b, ".")
		if pa == "" {
			pa = "0"
		}
		if pb == "" {
			pb = "0"
		}
		switch {
		case len(pa) != len(pb):
			return sign(len(pa) - len(pb))
		case pa != pb:
			return strings.Compare(pa, pb)
		}
	}
	return 0
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

// CompareVersions compares two versions exactly (see the grammar above):
// -1, 0 or 1. A malformed version compares below every valid one, and two
// malformed versions compare equal.
func CompareVersions(a, b string) int {
	ca, okA := canonicalVersion(a)
	cb, okB := canonicalVersion(b)
	if !okA || !okB {
		return sign(boolInt(okA) - boolInt(okB))
	}
	return compareCanonical(ca, cb)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// versionTable interns the distinct versions of an index's offers and
// ranks them, so a slot keeps a small id, stays pointer-free, and a query
// compares ranks: exact for every version the grammar allows. Id 0 and
// rank 0 stand for a malformed version, below every other. Versions are
// never dropped (there are few distinct ones). The zero value is ready;
// callers serialise writers against readers (the index's lock).
type versionTable struct {
	ids    map[string]uint32 // canonical version → id
	canon  []string          // by id
	rank   []uint32          // by id: 1 + the number of distinct versions below it
	sorted []uint32          // ids of the versions, lowest first
}

// id returns v's id, adding v if it is new.
func (t *versionTable) id(v string) uint32 {
	c, ok := canonicalVersion(v)
	if !ok {
		return 0
	}
	if id, ok := t.ids[c]; ok {
		return id
	}
	if t.ids == nil {
		t.ids, t.canon, t.rank = map[string]uint32{}, []string{""}, []uint32{0}
	}
	id := uint32(len(t.canon))
	t.ids[c] = id
	t.canon = append(t.canon, c)
	t.rank = append(t.rank, 0)
	i := sort.Search(len(t.sorted), func(i int) bool { return compareCanonical(t.canon[t.sorted[i]], c) > 0 })
	t.sorted = append(t.sorted, 0)
	copy(t.sorted[i+1:], t.sorted[i:])
	t.sorted[i] = id
	for r, x := range t.sorted[i:] {
		t.rank[x] = uint32(i + r + 1)
	}
	return id
}

// atLeast returns the rank a version needs to be at least min: 0 (every
// version, malformed included) when min is empty, else 1 + the number of
// distinct versions below min.
func (t *versionTable) atLeast(min string) uint32 {
	if min == "" {
		return 0
	}
	c, ok := canonicalVersion(min)
	if !ok {
		return uint32(len(t.sorted)) + 1 // cannot happen: requests are validated
	}
	return uint32(sort.Search(len(t.sorted), func(i int) bool { return compareCanonical(t.canon[t.sorted[i]], c) >= 0 })) + 1
}
