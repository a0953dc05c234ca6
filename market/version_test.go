package market

import (
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"6.2.41133", "6.2.41134", -1},
		{"550.54.15.1", "550.54.15.2", -1},
		{"550.54.15.2", "550.54.15.1", 1},
		{"550.54.15", "550.54.15.0.0", 0},
		{"12", "12.0", 0},
		{"12.4", "12.10", -1},
		{"550.054", "550.54", 0},
		{"1.2.3.4.5.6.7", "1.2.3.4.5.6.8", -1},
		{"99999999999999999999999.1", "99999999999999999999998.9", 1},
		{"4096.0", "4095.9999", 1},
		{"12.x", "0", -1}, // malformed compares lowest
		{"", "0", -1},
		{"12.x", "", 0},
	} {
		if got := CompareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestVersionMinimumsExact: the matcher agrees with CompareVersions, and a
// malformed minimum is refused with a message saying what is wrong.
func TestVersionMinimumsExact(t *testing.T) {
	mi := plainOffer(1, "amd-mi300x-192gb-oam", "us-east-va", 1, 100)
	mi.CUDAVersion = "6.2.41133"
	drv := plainOffer(2, "nvidia-h100-80gb-sxm", "us-east-va", 1, 100)
	drv.DriverVersion = "550.54.15.1"
	cands := []Candidate{{Offer: mi}, {Offer: drv}}
	for _, tc := range []struct {
		driver, cuda string
		want         []int64
	}{
		{cuda: "6.2.41134", want: []int64{2}}, // the H100's CUDA 12.4 is above; the MI300X's ROCm is not
		{cuda: "6.2.41133", want: []int64{1, 2}},
		{driver: "550.54.15.2", want: nil},
		{driver: "550.54.15.1", want: []int64{2}},
		{driver: "550.54.15.0.1", want: []int64{2}},
		{driver: "550.54.15.1.0.0.1", want: nil},
	} {
		req := oneDeviceJob(WorkBatch)
		req.Constraints.MinDriverVersion, req.Constraints.MinCUDAVersion = tc.driver, tc.cuda
		req.Limit = MaxQuoteLimit
		res, err := Match(cands, nil, req, t0)
		if err != nil {
			t.Fatal(err)
		}
		if got := quotedOffers(res); !sameIDs(got, tc.want) {
			t.Errorf("driver %q cuda %q: quoted %v, want %v", tc.driver, tc.cuda, got, tc.want)
		}
		for _, c := range cands {
			fits := (tc.driver == "" || CompareVersions(c.Offer.DriverVersion, tc.driver) >= 0) &&
				(tc.cuda == "" || CompareVersions(c.Offer.CUDAVersion, tc.cuda) >= 0)
			if fits != containsID(quotedOffers(res), c.Offer.ID) {
				t.Errorf("driver %q cuda %q: offer %d quoted %t, CompareVersions says it fits: %t", tc.driver, tc.cuda, c.Offer.ID, !fits, fits)
			}
		}
	}
	for _, tc := range []struct{ v, says string }{
		{"550.54-beta", `"-"`},
		{"550..54", "empty part"},
		{".550", "empty part"},
		{"550.", "empty part"},
		{" 550", `" "`},
		{strings.Repeat("1.", 20) + "1", "at most 32 characters"},
	} {
		req := oneDeviceJob(WorkBatch)
		req.Constraints.MinDriverVersion = tc.v
		err := ValidateRequest(&req)
		if msg := FieldErrors(err)["constraints.min_driver_version"]; !strings.Contains(msg, tc.says) {
			t.Errorf("%q: message %q, want it to mention %s", tc.v, msg, tc.says)
		}
	}
	o := plainOffer(1, "nvidia-h100-80gb-sxm", "us-east-va", 8, 100)
	o.DriverVersion = "550.54.15.1.2"
	if err := ValidateOffer(&o, t0); FieldErrors(err)["driver_version"] != "" {
		t.Errorf("a five-part driver version is refused: %v", err)
	}
}

func containsID(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// refParseVersion reads a version by the documented grammar (numbers
// separated by dots, at most 32 characters) into big integers; written
// without the package's parsing.
func refParseVersion(v string) ([]*big.Int, bool) {
	if v == "" || len(v) > 32 {
		return nil, false
	}
	var out []*big.Int
	for _, p := range strings.Split(v, ".") {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return nil, false
		}
		n, _ := new(big.Int).SetString(p, 10)
		out = append(out, n)
	}
	return out, true
}

// refCompareVersions compares versions part by part, missing parts zero,
// malformed lowest.
func refCompareVersions(a, b string) int {
	pa, okA := refParseVersion(a)
	pb, okB := refParseVersion(b)
	switch {
	case !okA && !okB:
		return 0
	case !okA:
		return -1
	case !okB:
		return 1
	}
	for i := 0; i < len(pa) || i < len(pb); i++ {
		x, y := big.NewInt(0), big.NewInt(0)
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		if c := x.Cmp(y); c != 0 {
			return c
		}
	}
	return 0
}

// TestVersionTableRanks adds random versions to a table in random order
// and checks that ranks order them as the reference does.
func TestVersionTableRanks(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	part := func() string {
		return []string{"0", "00", "1", "9", "10", "054", "54", "4095", "4096", "41133", "99999999999999999999"}[rng.IntN(11)]
	}
	for range 200 {
		var vt versionTable
		var vs []string
		var ids []uint32
		for range 1 + rng.IntN(30) {
			parts := make([]string, 1+rng.IntN(5))
			for i := range parts {
				parts[i] = part()
			}
			v := strings.Join(parts, ".")
			if len(v) > MaxVersionLen {
				continue
			}
			vs = append(vs, v)
			ids = append(ids, vt.id(v))
		}
		for i := range vs {
			for j := range vs {
				if got, want := sign(int(vt.rank[ids[i]])-int(vt.rank[ids[j]])), refCompareVersions(vs[i], vs[j]); got != want {
					t.Fatalf("%q vs %q: ranks %d, %d; reference %d", vs[i], vs[j], vt.rank[ids[i]], vt.rank[ids[j]], want)
				}
			}
			min := vs[rng.IntN(len(vs))]
			if at := vt.rank[ids[i]] >= vt.atLeast(min); at != (refCompareVersions(vs[i], min) >= 0) {
				t.Fatalf("%q at least %q: %t", vs[i], min, at)
			}
		}
	}
}

func FuzzCompareVersions(f *testing.F) {
	for _, s := range [][2]string{{"6.2.41133", "6.2.41134"}, {"550.54.15.1", "550.54.15"}, {"12", "12.0"}, {"1..2", "1"}, {"007", "7.0"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		got, want := CompareVersions(a, b), refCompareVersions(a, b)
		if got != want {
			t.Fatalf("CompareVersions(%q, %q) = %d, reference %d", a, b, got, want)
		}
		if CompareVersions(b, a) != -got {
			t.Fatalf("CompareVersions(%q, %q) is not antisymmetric", a, b)
		}
		if _, ok := refParseVersion(a); (versionProblem(a, "it", "1") == "") != ok {
			t.Fatalf("%q: versionProblem %q disagrees with the grammar", a, versionProblem(a, "it", "1"))
		}
	})
}
