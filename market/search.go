package market

import (
	"fmt"
	"strconv"
	"strings"
)

// OfferSearch is what a buyer asks of the catalogue. The catalogue's
// filter form and its query language both become conditions, and
// CompileSearch turns conditions into this, so the two cannot drift; the
// store turns it into SQL.
//
// A nil id list means any; a non-nil one means any of these. Conditions on
// the accelerator (model, family, vendor, memory) narrow AcceleratorIDs,
// on the place (region, country) RegionIDs, on the network between nodes
// NetworkIDs.
type OfferSearch struct {
	AcceleratorIDs []string
	RegionIDs      []string
	NetworkIDs     []string
	Devices        Range // devices per node × nodes
	PriceCents     Range // on-demand price per device-hour
	Interruptible  *bool // nil: any; true: sells interruptible capacity; false: does not
	Agent          *bool // nil: any; true: the hosts run the provider agent; false: access by the provider's hand
	// Free, when set, keeps offers that can be booked for its window with
	// devices free on their nodes (FreeAdmits); the store checks it against
	// the commitments, not in SQL.
	Free *FreeWindow
}

// Range is an inclusive range of whole numbers; the zero Range is any.
type Range struct {
	Min    int64 // lower bound; 0 bounds nothing the catalogue holds
	Max    int64 // upper bound when HasMax
	HasMax bool
}

// Empty reports whether no number is in the range.
func (r Range) Empty() bool { return r.HasMax && r.Max < r.Min }

func (r Range) intersect(o Range) Range {
	out := Range{Min: max(r.Min, o.Min), Max: r.Max, HasMax: r.HasMax}
	if o.HasMax && (!out.HasMax || o.Max < out.Max) {
		out.Max, out.HasMax = o.Max, true
	}
	return out
}

// ParseSearch parses and compiles a catalogue query.
func ParseSearch(q string) (OfferSearch, error) {
	conds, err := ParseQuery(q)
	if err != nil {
		return OfferSearch{}, err
	}
	return CompileSearch(conds)
}

// CompileSearch gives conditions their meaning: every condition must hold.
// A field name, operator or value that means nothing, and a condition that
// leaves nothing possible together with the ones before it (model=H100...
// family=A100, price>3 price<2), is an invalid *Error naming the token, as
// ParseQuery's are.
func CompileSearch(conds []Condition) (OfferSearch, error) {
	var s OfferSearch
	for _, c := range conds {
		if err := s.Add(c); err != nil {
			return OfferSearch{}, err
		}
	}
	return s, nil
}

// QueryField documents one field of the query language.
type QueryField struct {
	Name    string
	Aliases []string
	Meaning string
	Example string
}

// QueryFields lists the fields of the query language, for its help.
func QueryFields() []QueryField {
	out := make([]QueryField, len(queryFields))
	for i, f := range queryFields {
		out[i] = QueryField{Name: f.name, Aliases: f.aliases, Meaning: f.meaning, Example: f.example}
	}
	return out
}

type fieldKind int

const (
	kindAccelerator fieldKind = iota // a set of accelerator ids named by a word
	kindRegion                       // a set of region ids named by a word
	kindMemory                       // a number of GB, narrowing accelerators
	kindNetwork                      // a speed, narrowing network kinds
	kindDevices                      // a whole number
	kindPrice                        // dollars, kept as cents
	kindBool
	kindFreeFrom  // when devices are wanted free: now, a date, a date and time
	kindFreeHours // for how long, hours or days
)

type queryField struct {
	name     string
	aliases  []string
	kind     fieldKind
	meaning  string
	example  string
	expected string // what a value looks like, for messages
	// resolve names the ids a word means, for set-valued fields.
	resolve func(string) ([]string, bool)
	// units maps a unit (lower case) to how many base units it is; "" is
	// the unit assumed when none is written.
	units map[string]int64
}

var queryFields = []queryField{
	{name: "model", aliases: []string{"accelerator"}, kind: kindAccelerator, resolve: resolveModel,
		meaning: "accelerator model, by catalogue id or name", example: `model in (h100-80gb-sxm, "H200 141GB SXM")`,
		expected: "a model, e.g. h100-80gb-sxm or \"A100 80GB SXM\""},
	{name: "family", aliases: []string{"gpu", "gpu_name"}, kind: kindAccelerator, resolve: resolveFamily,
		meaning: "accelerator family", example: "family=H100",
		expected: "a family: " + strings.Join(Families(), ", ")},
	{name: "vendor", kind: kindAccelerator, resolve: resolveVendor,
		meaning: "NVIDIA or AMD", example: "vendor=amd", expected: "a vendor: NVIDIA or AMD"},
	{name: "memory", aliases: []string{"mem", "vram", "gpu_ram"}, kind: kindMemory,
		meaning: "memory per device, GB or TB (GB if no unit)", example: "memory>=80GB",
		expected: "an amount of memory, e.g. 80 or 80GB", units: map[string]int64{"": 1, "gb": 1, "g": 1, "tb": 1000, "t": 1000}},
	{name: "devices", aliases: []string{"gpus", "num_gpus"}, kind: kindDevices,
		meaning: "devices in the offer (per node × nodes)", example: "devices>=8",
		expected: "a number of devices, e.g. 8", units: map[string]int64{"": 1}},
	{name: "price", aliases: []string{"dph"}, kind: kindPrice,
		meaning: "on-demand price per device-hour, US dollars", example: "price<2.50",
		expected: "a price in dollars per device-hour, e.g. 2.50 or $2.50", units: map[string]int64{"": 100}},
	{name: "network", aliases: []string{"net"}, kind: kindNetwork,
		meaning: "network between nodes, Gb/s if no unit (single-node offers have 0)", example: "network>=400Gbps",
		expected: "a speed, e.g. 400 or 400Gbps",
		units:    map[string]int64{"": 1000, "gbps": 1000, "gb/s": 1000, "g": 1000, "mbps": 1, "mb/s": 1, "tbps": 1_000_000, "tb/s": 1_000_000}},
	{name: "region", kind: kindRegion, resolve: resolveRegion,
		meaning: "region id, or a region group", example: `region in (eu-north-se, "North America")`,
		expected: "a region id such as us-west-or, or a region group: " + strings.Join(RegionGroups(), ", ")},
	{name: "country", kind: kindRegion, resolve: resolveCountry,
		meaning: "country of the region (data residency), ISO code or name", example: "country in (DE, FR)",
		expected: "a country code: " + strings.Join(Countries(), ", ")},
	{name: "interruptible", aliases: []string{"spot"}, kind: kindBool,
		meaning: "sells interruptible (preemptible) capacity", example: "interruptible=yes",
		expected: "yes or no"},
	{name: "agent", aliases: []string{"automatic_access"}, kind: kindBool,
		meaning: "the hosts run the provider agent: access handed over automatically, outages measured", example: "agent=yes",
		expected: "yes or no"},
	{name: "available", aliases: []string{"from", "free_from"}, kind: kindFreeFrom,
		meaning:  "devices free from then (UTC) for the hours asked, or the offer's shortest rental; with devices>=N, N of them",
		example:  `available="2026-12-01 09:00" hours=24`,
		expected: `now, a date such as 2026-12-01, or a quoted date and time such as "2026-12-01 09:00" (UTC)`},
	{name: "hours", aliases: []string{"for"}, kind: kindFreeHours,
		meaning: "for how long the devices must be free, hours or days (h if no unit); alone, from now", example: "available=now for=8h",
		expected: "a number of hours, e.g. 24, 24h or 2d", units: map[string]int64{"": 1, "h": 1, "hours": 1, "d": 24, "days": 24}},
}

func findQueryField(name string) (queryField, bool) {
	for _, f := range queryFields {
		if strings.EqualFold(f.name, name) {
			return f, true
		}
		for _, a := range f.aliases {
			if strings.EqualFold(a, name) {
				return f, true
			}
		}
	}
	return queryField{}, false
}

// ops says which operators the field takes.
func (f queryField) ops() string {
	switch f.kind {
	case kindAccelerator, kindRegion:
		return "=, !=, in (…) or not in (…)"
	case kindBool:
		return "= or !="
	case kindFreeFrom, kindFreeHours:
		return "="
	}
	return "=, <, <=, > or >="
}

func (f queryField) listExample() string {
	switch f.kind {
	case kindAccelerator, kindRegion:
		if strings.Contains(f.example, "(") {
			return f.example
		}
	}
	return f.name + " in (…)"
}

// normName folds case and drops spaces, hyphens and underscores, so
// "H100 80GB SXM", "h100-80gb-sxm" and "RTX4090" match catalogue names.
func normName(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '-', '_':
			return -1
		}
		return r
	}, strings.ToLower(strings.TrimSpace(s)))
}

func resolveModel(w string) ([]string, bool) {
	n := normName(w)
	for _, a := range accelerators {
		if n == normName(a.ID) || n == normName(a.Name) || n == normName(strings.TrimPrefix(a.ID, strings.ToLower(a.Vendor)+"-")) {
			return []string{a.ID}, true
		}
	}
	return nil, false
}

func resolveFamily(w string) ([]string, bool) {
	return acceleratorsWhere(func(a Accelerator) bool { return normName(a.Family) == normName(w) })
}

func resolveVendor(w string) ([]string, bool) {
	return acceleratorsWhere(func(a Accelerator) bool { return strings.EqualFold(a.Vendor, strings.TrimSpace(w)) })
}

func acceleratorsWhere(keep func(Accelerator) bool) ([]string, bool) {
	var ids []string
	for _, a := range accelerators {
		if keep(a) {
			ids = append(ids, a.ID)
		}
	}
	return ids, len(ids) > 0
}

func resolveRegion(w string) ([]string, bool) {
	var ids []string
	for _, r := range regions {
		if strings.EqualFold(r.ID, strings.TrimSpace(w)) || normName(r.Group) == normName(w) {
			ids = append(ids, r.ID)
		}
	}
	return ids, len(ids) > 0
}

func resolveCountry(w string) ([]string, bool) {
	var ids []string
	for _, r := range regions {
		if strings.EqualFold(r.Country, strings.TrimSpace(w)) || normName(CountryName(r.Country)) == normName(w) {
			ids = append(ids, r.ID)
		}
	}
	return ids, len(ids) > 0
}

// Add narrows the search by one more condition, as CompileSearch does;
// on error the search is unchanged, so a caller can say which of its
// inputs was wrong and go on.
func (s *OfferSearch) Add(c Condition) error {
	next := *s
	if err := next.add(c); err != nil {
		return err
	}
	*s = next
	return nil
}

func (s *OfferSearch) add(c Condition) error {
	f, ok := findQueryField(c.Field.Text)
	if !ok {
		return queryErr(c.Field, unknownFieldExpected(c.Field.Text))
	}
	if len(c.Values) == 0 {
		return queryErr(c.Op, f.expected+" after "+c.Field.Text+" "+c.Op.Text)
	}
	switch f.kind {
	case kindAccelerator, kindRegion:
		return s.applySet(f, c)
	case kindBool:
		return s.applyBool(f, c)
	case kindFreeFrom, kindFreeHours:
		return s.applyFree(f, c)
	}
	switch c.Op.Text {
	case "=", "<", "<=", ">", ">=":
	default:
		return queryErr(c.Op, "an operator for a number after "+c.Field.Text+": "+f.ops())
	}
	num, den, err := parseQuantity(f, c.Values[0])
	if err != nil {
		return err
	}
	switch f.kind {
	case kindMemory:
		ids, _ := acceleratorsWhere(func(a Accelerator) bool { return compareFrac(int64(a.MemoryGB), num, den, c.Op.Text) })
		return narrowIDs(&s.AcceleratorIDs, ids, c.Values[0], "model", fmt.Sprintf("an amount of memory some model has (from %d GB to %d GB)", minMemoryGB(), maxMemoryGB()))
	case kindNetwork:
		var ids []string
		for _, n := range networks {
			if compareFrac(int64(n.Gbps)*1000, num, den, c.Op.Text) {
				ids = append(ids, n.ID)
			}
		}
		return narrowIDs(&s.NetworkIDs, ids, c.Values[0], "network", fmt.Sprintf("a speed some network has (from 0, single node, to %d Gb/s)", networks[len(networks)-1].Gbps))
	}
	r, ok := fracRange(num, den, c.Op.Text)
	if !ok {
		whole := "a whole number of devices"
		if f.kind == kindPrice {
			whole = "a price in whole cents, e.g. 2.50"
		}
		return queryErr(c.Values[0], whole+" after "+c.Field.Text+"=")
	}
	dst := &s.Devices
	if f.kind == kindPrice {
		dst = &s.PriceCents
	}
	before := *dst
	if *dst = dst.intersect(r); dst.Empty() {
		if before != (Range{}) {
			return queryErr(c.Values[0], "a value that fits the earlier conditions on "+f.name+" (together they allow no "+f.name+")")
		}
		return queryErr(c.Values[0], "a "+f.name+" some offer could have")
	}
	return nil
}

func (s *OfferSearch) applySet(f queryField, c Condition) error {
	switch c.Op.Text {
	case "=", "!=", "in", "not in":
	default:
		return queryErr(c.Op, "an operator for "+c.Field.Text+": "+f.ops())
	}
	var named []string
	for _, v := range c.Values {
		ids, ok := f.resolve(v.Text)
		if !ok {
			return queryErr(v, f.expected)
		}
		named = append(named, ids...)
	}
	universe := func() []string {
		var ids []string
		if f.kind == kindAccelerator {
			for _, a := range accelerators {
				ids = append(ids, a.ID)
			}
		} else {
			for _, r := range regions {
				ids = append(ids, r.ID)
			}
		}
		return ids
	}()
	negate := c.Op.Text == "!=" || c.Op.Text == "not in"
	var ids []string
	for _, id := range universe {
		if containsString(named, id) != negate {
			ids = append(ids, id)
		}
	}
	dst, noun := &s.AcceleratorIDs, "model"
	if f.kind == kindRegion {
		dst, noun = &s.RegionIDs, "region"
	}
	return narrowIDs(dst, ids, c.Values[len(c.Values)-1], noun, "a list that leaves out some "+noun)
}

// narrowIDs intersects *dst (nil: any) with ids, refusing a result that
// can match nothing: with none, what was expected of this value alone;
// with the conditions before it, that they leave no noun.
func narrowIDs(dst *[]string, ids []string, at Token, noun, none string) error {
	first := *dst == nil
	out := []string{}
	for _, id := range ids {
		if first || containsString(*dst, id) {
			out = append(out, id)
		}
	}
	if len(out) == 0 {
		if first {
			return queryErr(at, none)
		}
		return queryErr(at, "a value that fits the conditions before it: together they leave no "+noun)
	}
	*dst = out
	return nil
}

func (s *OfferSearch) applyBool(f queryField, c Condition) error {
	if c.Op.Text != "=" && c.Op.Text != "!=" {
		return queryErr(c.Op, "an operator for "+c.Field.Text+": "+f.ops())
	}
	var b bool
	switch strings.ToLower(strings.TrimSpace(c.Values[0].Text)) {
	case "yes", "true", "1", "y":
		b = true
	case "no", "false", "0", "n":
	default:
		return queryErr(c.Values[0], f.expected)
	}
	if c.Op.Text == "!=" {
		b = !b
	}
	dst, what := &s.Interruptible, "is interruptible"
	if f.name == "agent" {
		dst, what = &s.Agent, "runs the agent"
	}
	if *dst != nil && **dst != b {
		return queryErr(c.Values[0], "a value that fits the conditions before it: an offer "+what+" or not, not both")
	}
	*dst = &b
	return nil
}

func minMemoryGB() int {
	m := accelerators[0].MemoryGB
	for _, a := range accelerators {
		m = min(m, a.MemoryGB)
	}
	return m
}

func maxMemoryGB() int {
	m := 0
	for _, a := range accelerators {
		m = max(m, a.MemoryGB)
	}
	return m
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// maxQueryDigits bounds a number's digits so that, times the largest unit
// (10⁶), it fits an int64 with room to compare.
const maxQueryDigits = 12

// parseQuantity reads a number with an optional unit (and, for a price,
// an optional leading $) into num/den of the field's base unit: GB,
// megabits per second, devices, cents.
func parseQuantity(f queryField, t Token) (num, den int64, err error) {
	s := strings.TrimSpace(t.Text)
	if f.kind == kindPrice {
		s = strings.TrimPrefix(s, "$")
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	whole, frac := s[:i], ""
	if i < len(s) && s[i] == '.' {
		j := i + 1
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		frac, i = s[i+1:j], j
	}
	if whole == "" && frac == "" {
		return 0, 0, queryErr(t, f.expected)
	}
	mult, ok := f.units[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, 0, queryErr(t, f.expected)
	}
	digits := strings.TrimLeft(whole+frac, "0")
	if len(digits) > maxQueryDigits || len(frac) > maxQueryDigits {
		return 0, 0, queryErr(t, fmt.Sprintf("a number of at most %d digits", maxQueryDigits))
	}
	num = 0
	if digits != "" {
		num, _ = strconv.ParseInt(digits, 10, 64)
	}
	den = 1
	for range len(frac) {
		den *= 10
	}
	return num * mult, den, nil
}

// compareFrac reports whether x op num/den, exactly.
func compareFrac(x, num, den int64, op string) bool {
	l := x * den
	switch op {
	case "=":
		return l == num
	case "<":
		return l < num
	case "<=":
		return l <= num
	case ">":
		return l > num
	case ">=":
		return l >= num
	}
	return false
}

// fracRange is the range of whole numbers n with n op num/den; = with a
// fraction that is not whole has none (ok false).
func fracRange(num, den int64, op string) (Range, bool) {
	floor, ceil := num/den, (num+den-1)/den
	switch op {
	case "=":
		return Range{Min: floor, Max: floor, HasMax: true}, num%den == 0
	case "<":
		return Range{Max: ceil - 1, HasMax: true}, true
	case "<=":
		return Range{Max: floor, HasMax: true}, true
	case ">":
		return Range{Min: floor + 1}, true
	case ">=":
		return Range{Min: ceil}, true
	}
	return Range{}, false
}
