package market

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func boolPtr(b bool) *bool { return &b }

var (
	h100s    = []string{"nvidia-h100-80gb-sxm", "nvidia-h100-80gb-pcie"}
	fastNets = []string{"roce-400", "infiniband-400", "infiniband-800"}
)

func TestParseSearch(t *testing.T) {
	cases := []struct {
		q    string
		want OfferSearch
	}{
		{"", OfferSearch{}},
		{"   ", OfferSearch{}},
		// The example, in Vast's own field names.
		{"num_gpus>=8 gpu_name=H100 dph<2.5 net>=400",
			OfferSearch{AcceleratorIDs: h100s, Devices: Range{Min: 8}, PriceCents: Range{Max: 249, HasMax: true}, NetworkIDs: fastNets}},
		{"devices>=8 and family=h100 and price<=$2.50",
			OfferSearch{AcceleratorIDs: h100s, Devices: Range{Min: 8}, PriceCents: Range{Max: 250, HasMax: true}}},
		{"family = H100", OfferSearch{AcceleratorIDs: h100s}},
		{"family:H100", OfferSearch{AcceleratorIDs: h100s}},
		{"FAMILY==h100", OfferSearch{AcceleratorIDs: h100s}},
		{`family="RTX 4090"`, OfferSearch{AcceleratorIDs: []string{"nvidia-rtx4090-24gb-pcie"}}},
		{"family=rtx4090", OfferSearch{AcceleratorIDs: []string{"nvidia-rtx4090-24gb-pcie"}}},
		{"family in (H100, H200)", OfferSearch{AcceleratorIDs: []string{"nvidia-h200-141gb-sxm", "nvidia-h100-80gb-sxm", "nvidia-h100-80gb-pcie"}}},
		{"family IN(h200,b200)", OfferSearch{AcceleratorIDs: []string{"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm"}}},
		{"model=h100-80gb-sxm", OfferSearch{AcceleratorIDs: []string{"nvidia-h100-80gb-sxm"}}},
		{"model=nvidia-h100-80gb-pcie", OfferSearch{AcceleratorIDs: []string{"nvidia-h100-80gb-pcie"}}},
		{`model in ("H200 141GB SXM", 'MI300X 192GB OAM')`, OfferSearch{AcceleratorIDs: []string{"nvidia-h200-141gb-sxm", "amd-mi300x-192gb-oam"}}},
		{"vendor=amd", OfferSearch{AcceleratorIDs: []string{"amd-mi300x-192gb-oam", "amd-mi250x-128gb-oam"}}},
		{"vendor=amd family!=MI250X", OfferSearch{AcceleratorIDs: []string{"amd-mi300x-192gb-oam"}}},
		{"vendor = nvidia family not in (A100, V100, H100, L40S, A10, L4, T4, P100, B200, H200, RTX4090)",
			OfferSearch{AcceleratorIDs: []string{"nvidia-rtx3090-24gb-pcie"}}},
		// Memory narrows models: only these have 141 GB or more.
		{"memory>=141GB", OfferSearch{AcceleratorIDs: []string{"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm", "amd-mi300x-192gb-oam"}}},
		{"vram>140", OfferSearch{AcceleratorIDs: []string{"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm", "amd-mi300x-192gb-oam"}}},
		{"memory>=0.141TB", OfferSearch{AcceleratorIDs: []string{"nvidia-b200-192gb-sxm", "nvidia-h200-141gb-sxm", "amd-mi300x-192gb-oam"}}},
		{"memory<20", OfferSearch{AcceleratorIDs: []string{"nvidia-v100-16gb-pcie", "nvidia-t4-16gb-pcie", "nvidia-p100-16gb-pcie"}}},
		{"memory=\"32 GB\"", OfferSearch{AcceleratorIDs: []string{"nvidia-v100-32gb-sxm"}}},
		{"memory>=80 family=A100", OfferSearch{AcceleratorIDs: []string{"nvidia-a100-80gb-sxm"}}},
		// Networks by speed, in any unit; single node is 0.
		{"network>=400Gbps", OfferSearch{NetworkIDs: fastNets}},
		{"network>=400gb/s", OfferSearch{NetworkIDs: fastNets}},
		{"network>=0.4Tbps", OfferSearch{NetworkIDs: fastNets}},
		{"network>399999Mbps", OfferSearch{NetworkIDs: fastNets}},
		{"network<100", OfferSearch{NetworkIDs: []string{"none", "ethernet-10", "ethernet-25"}}},
		{"network=0", OfferSearch{NetworkIDs: []string{"none"}}},
		{"network>=200 network<=200", OfferSearch{NetworkIDs: []string{"roce-200", "infiniband-200"}}},
		// Whole numbers from fractions: the bound moves inwards.
		{"devices>7.5", OfferSearch{Devices: Range{Min: 8}}},
		{"devices>=7.5", OfferSearch{Devices: Range{Min: 8}}},
		{"devices<8.5", OfferSearch{Devices: Range{Max: 8, HasMax: true}}},
		{"devices<=8.5", OfferSearch{Devices: Range{Max: 8, HasMax: true}}},
		{"devices<8", OfferSearch{Devices: Range{Max: 7, HasMax: true}}},
		{"devices=16", OfferSearch{Devices: Range{Min: 16, Max: 16, HasMax: true}}},
		{"devices>=8 devices<=16 devices>4", OfferSearch{Devices: Range{Min: 8, Max: 16, HasMax: true}}},
		{"price>1 price<=2.005", OfferSearch{PriceCents: Range{Min: 101, Max: 200, HasMax: true}}},
		{"price<2.505", OfferSearch{PriceCents: Range{Max: 250, HasMax: true}}},
		{"price>=.5", OfferSearch{PriceCents: Range{Min: 50}}},
		{"price=$2", OfferSearch{PriceCents: Range{Min: 200, Max: 200, HasMax: true}}},
		{"price<000000000000002.5", OfferSearch{PriceCents: Range{Max: 249, HasMax: true}}},
		// Regions by id or group, countries by code or name.
		{"region=us-west-or", OfferSearch{RegionIDs: []string{"us-west-or"}}},
		{`region in ("north america", eu-north-se) country!=US`, OfferSearch{RegionIDs: []string{"ca-east-qc", "eu-north-se"}}},
		{"country in (de, France)", OfferSearch{RegionIDs: []string{"eu-west-fr", "eu-central-de"}}},
		{"region=Asia-Pacific country=JP", OfferSearch{RegionIDs: []string{"ap-northeast-jp"}}},
		{"interruptible=yes", OfferSearch{Interruptible: boolPtr(true)}},
		{"spot=no", OfferSearch{Interruptible: boolPtr(false)}},
		{"interruptible!=true interruptible=0", OfferSearch{Interruptible: boolPtr(false)}},
	}
	for _, tc := range cases {
		got, err := ParseSearch(tc.q)
		if err != nil {
			t.Errorf("%q: %v", tc.q, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q:\n got %+v\nwant %+v", tc.q, got, tc.want)
		}
	}
}

func TestParseSearchErrors(t *testing.T) {
	cases := []struct {
		q    string
		pos  int
		want string // in the message after the position
	}{
		{"H100", 1, `“H100”: expected a field name before the value, e.g. family=H100`},
		{"gpu_name=H100 speed>3", 15, `“speed”: expected a field name: model, family,`},
		{"devices", 8, "the end of the query: expected an operator after devices"},
		{"devices 8", 9, `“8”: expected an operator after devices: =, <, <=, > or >=`},
		{"devices>=", 10, "the end of the query: expected a number of devices, e.g. 8 after devices >="},
		{"devices>=eight", 10, `“eight”: expected a number of devices, e.g. 8.`},
		{"devices>=8GB", 10, `“8GB”: expected a number of devices`},
		{"devices=7.5", 9, `“7.5”: expected a whole number of devices after devices=`},
		{"devices!=8", 8, `“!=”: expected an operator for a number after devices: =, <, <=, > or >=`},
		{"devices in (8, 16)", 9, `“in”: expected an operator for a number`},
		{"memory>=80GiB", 9, `“80GiB”: expected an amount of memory, e.g. 80 or 80GB.`},
		{"memory>=300GB", 9, `“300GB”: expected an amount of memory some model has (from 16 GB to 192 GB)`},
		{"network>=400Kbps", 10, `“400Kbps”: expected a speed, e.g. 400 or 400Gbps`},
		{"network>1000", 9, `expected a speed some network has (from 0, single node, to 800 Gb/s)`},
		{"price<2,50", 8, `“,”: expected a field name`},
		{"price<-2", 7, `“-2”: expected a price in dollars per device-hour`},
		{"price<0", 7, `“0”: expected a price some offer could have`},
		{"price=2.505", 7, `“2.505”: expected a price in whole cents`},
		{"price<1234567890123", 7, `expected a number of at most 12 digits`},
		{"price>3 price<2", 15, `“2”: expected a value that fits the earlier conditions on price (together they allow no price)`},
		{"family=Z9000", 8, `“Z9000”: expected a family: B200, H200, H100,`},
		{"model=h100", 7, `“h100”: expected a model, e.g. h100-80gb-sxm`},
		{"family=H100 family=A100", 20, `“A100”: expected a value that fits the conditions before it: together they leave no model`},
		{"model=h100-80gb-sxm memory<80", 28, "leave no model"},
		{"vendor!=nvidia vendor!=amd", 24, "leave no model"},
		{"region not in (Europe, \"North America\", Asia-Pacific)", 41, `expected a list that leaves out some region`},
		{"country=XX", 9, `“XX”: expected a country code: AU, CA, DE,`},
		{"region=mars", 8, `“mars”: expected a region id such as us-west-or, or a region group: North America, Europe, Asia-Pacific`},
		{"interruptible=maybe", 15, `“maybe”: expected yes or no`},
		{"interruptible<yes", 14, `“<”: expected an operator for interruptible: = or !=`},
		{"interruptible=yes spot=no", 24, "an offer is interruptible or not, not both"},
		{"family in H100", 11, `“H100”: expected “(” to open the list after family in`},
		{"family in (H100 H200)", 17, `“H200”: expected “,” and another value, or “)” to close the list opened at character 8`},
		{"family in (H100,", 17, `the end of the query: expected a family`},
		{"family in ()", 12, `“)”: expected a family`},
		{"family not H100", 12, `“H100”: expected “in” after “not”`},
		{"family=H100 or family=H200", 13, `“or”: expected a condition: every condition must hold, so there is no “or”`},
		{"family=H100 and", 16, "the end of the query: expected a condition after “and”"},
		{"family=(H100)", 8, `“(”: expected a family`},
		{"family=H100)", 12, `“)”: expected a field name`},
		{"family!H100", 7, `“!”: expected != ("!" alone is not an operator)`},
		{`family="RTX 4090`, 8, `“"RTX 4090”: expected a closing " for the quote opened here`},
		{"é family=é", 1, `“é”: expected a field name`},
		{"devices>=8 ünits=3", 12, `“ünits”: expected a field name`},
		{strings.Repeat("a", MaxQueryLen+5), MaxQueryLen + 1, "expected the query to end: a query has at most 1000 characters"},
	}
	for _, tc := range cases {
		_, err := ParseSearch(tc.q)
		if err == nil {
			t.Errorf("%q: no error, want one at %d", tc.q, tc.pos)
			continue
		}
		if ErrorCode(err) != CodeInvalid {
			t.Errorf("%q: code %s, want invalid", tc.q, ErrorCode(err))
		}
		msg := ErrorMessage(err)
		prefix := "At character " + strconv.Itoa(tc.pos) + ", "
		if !strings.HasPrefix(msg, prefix) || !strings.Contains(msg, tc.want) {
			t.Errorf("%q:\n got %s\nwant %s…%s", tc.q, msg, prefix, tc.want)
		}
		if f := FieldErrors(err); f["q"] != msg {
			t.Errorf("%q: Fields[q] = %q, want the message", tc.q, f["q"])
		}
	}
}

// TestCompileFormConditions checks that conditions without positions (the
// filter form's) mean what the same query means, and that their errors
// read as a form field's.
func TestCompileFormConditions(t *testing.T) {
	form := []Condition{NewCondition("family", "=", "RTX 4090"), NewCondition("memory", ">=", "24"), NewCondition("price", "<=", "$0.40")}
	got, err := CompileSearch(form)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseSearch(FormatQuery(form))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || FormatQuery(form) != `family="RTX 4090" memory>=24 price<=$0.40` {
		t.Errorf("form %q compiles to %+v, the query to %+v", FormatQuery(form), got, want)
	}
	_, err = CompileSearch([]Condition{NewCondition("memory", ">=", "lots")})
	if msg := ErrorMessage(err); msg != "Expected an amount of memory, e.g. 80 or 80GB, not “lots”." {
		t.Errorf("form error: %q", msg)
	}
}

var errorPos = regexp.MustCompile(`^At character (\d+), (“.*”|the end of the query): expected .+\.$`)

// FuzzParseSearch: no query panics; every error is invalid and names a
// character position inside the query (or just after it) and what was
// expected; every query that parses is written back by FormatQuery to
// one that parses to the same conditions and compiles the same.
func FuzzParseSearch(f *testing.F) {
	for _, s := range []string{"", "num_gpus>=8 gpu_name=H100 dph<2.5 net>=400", `family in ("RTX 4090", h100) and price<=$1`,
		"memory>=0.141TB region!=Europe", "family not in (A100)", `x="`, "devices>=8 or", "interruptible=yes spot=no", "((,,))", "a=b=c", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		conds, perr := ParseQuery(q)
		s, err := ParseSearch(q)
		if (perr != nil) && err == nil {
			t.Fatalf("%q: ParseQuery fails but ParseSearch does not", q)
		}
		if err != nil {
			msg := ErrorMessage(err)
			m := errorPos.FindStringSubmatch(msg)
			if ErrorCode(err) != CodeInvalid || m == nil {
				t.Fatalf("%q: error without a position: %s (%s)", q, msg, ErrorCode(err))
			}
			pos, _ := strconv.Atoi(m[1])
			if n := utf8.RuneCountInString(q); pos < 1 || pos > n+1 {
				t.Fatalf("%q: position %d outside 1..%d", q, pos, n+1)
			}
			return
		}
		again := FormatQuery(conds)
		if strings.Contains(again, `"`) && strings.Contains(again, "'") {
			return // a value holding both quotes cannot be written back
		}
		conds2, err := ParseQuery(again)
		if err != nil {
			t.Fatalf("%q written back as %q: %v", q, again, err)
		}
		if FormatQuery(conds2) != again {
			t.Fatalf("%q written back as %q, then as %q", q, again, FormatQuery(conds2))
		}
		s2, err := CompileSearch(conds2)
		if err != nil || !reflect.DeepEqual(s, s2) {
			t.Fatalf("%q written back as %q compiles to %+v (%v), want %+v", q, again, s2, err, s)
		}
	})
}
