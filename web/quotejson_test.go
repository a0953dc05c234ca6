package web

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// fullQuotes is an answer with every field of every type in it set, and
// strings encoding/json escapes.
func fullQuotes() apiQuotes {
	at := time.Date(2026, 12, 2, 5, 47, 33, 0, time.UTC)
	cost := apiCost{Instance: 8616, Storage: 49, Egress: 3, Orchestration: 42, FailedWork: 7, Restart: 2, Total: 8719}
	piece := func(id int64, nanos int) apiPiece {
		return apiPiece{OfferID: id, ProviderID: 263, Accelerator: "nvidia-h100-80gb-sxm", Region: "us-west-or", Devices: 8,
			Start: at.Add(time.Duration(nanos)), End: at.Add(24 * time.Hour), Interruptible: true, PriceCents: 359, Cost: cost}
	}
	return apiQuotes{
		Quotes: []apiQuote{{
			QuoteID: "q1.1796190453.23701-1-1796190454-86400-0-359-8665", QuotedAt: at, ValidUntil: at.Add(5 * time.Minute), Rank: 1,
			Pieces: []apiPiece{piece(23701, 0), piece(-5, 123456789)}, Cost: cost, ChargedCents: 8665, CentsPerRefDeviceHour: 115,
			EmissionsKgCO2e: "0.9", ReliabilityBP: 9500, Providers: 2, Start: at.In(time.FixedZone("x", 5*3600+1800)), End: at.Add(time.Hour),
			Exact: true, LowerBoundCents: -12,
		}, {QuoteID: "q2", Pieces: []apiPiece{}, EmissionsKgCO2e: "<1 & >0 \"kg\" \\ é € \u2028 \x00 \xff"}},
		Total: 12,
		Explanation: apiExplanation{Summary: "12 offers fit; 3 left out by <region> & price", Considered: 100000, Fit: 12,
			Eliminated: map[string]int{"region": 5, "accelerator": 99000, "price": 3, "": 1, "é<": 2}, Shortfall: "needs\t8 more",
			Relaxations: []apiRelaxation{{Constraint: "price", Message: "Raise the cap to 7 €", Quotes: 4,
				Request: json.RawMessage("{\n  \"version\": 1,\n  \"notes\": \"<a>\"\n}")}}},
		Search: apiSearch{Complete: true, Exhaustive: true, NotEvaluated: 7, Examined: 8, NotExamined: 9, PriceCeilingCents: 700,
			RelaxationsIncomplete: true, Message: "over the budget"},
		OnFailure: "A replacement is found; you pay nothing for the lost hours.",
	}
}

// everyFieldSet fails t for each struct field under v that is zero, and
// each slice or map that is empty, so that a field added to the answer
// without its encoding fails TestQuotesJSONIsEncodingJSONs.
func everyFieldSet(t *testing.T, path string, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := range v.NumField() {
			f := v.Field(i)
			name := path + "." + v.Type().Field(i).Name
			if f.IsZero() {
				t.Errorf("%s is not set", name)
				continue
			}
			everyFieldSet(t, name, f)
		}
	case reflect.Slice:
		if v.Type() == reflect.TypeOf(json.RawMessage{}) {
			return
		}
		if v.Len() == 0 {
			t.Errorf("%s is empty", path)
		}
		for i := range v.Len() {
			everyFieldSet(t, path, v.Index(i))
		}
	}
}

// TestQuotesJSONIsEncodingJSONs: the quotes' hand-written JSON is, byte
// for byte, what encoding/json writes for the same answer — every field
// set (checked by reflection, so a new field fails here until it is
// written), with strings and a request document that encoding/json
// escapes; with every field empty; and with each quote and piece alone.
func TestQuotesJSONIsEncodingJSONs(t *testing.T) {
	full := fullQuotes()
	first := full
	first.Quotes = full.Quotes[:1] // the second quote is the sparse one
	everyFieldSet(t, "apiQuotes", reflect.ValueOf(first))

	cases := map[string]apiQuotes{
		"full":           full,
		"empty":          {},
		"no quotes":      {Quotes: []apiQuote{}, Explanation: apiExplanation{Eliminated: map[string]int{}}},
		"one quote":      {Quotes: full.Quotes[:1]},
		"quote no piece": {Quotes: full.Quotes[1:]},
	}
	for name, q := range cases {
		want, err := json.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := q.appendJSON(nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, want)
		}
	}
}

// BenchmarkQuotesJSON: ten quotes of one piece, as a narrow request is
// answered, by encoding/json (the yardstick) and by hand.
func BenchmarkQuotesJSON(b *testing.B) {
	full := fullQuotes()
	q := full
	q.Quotes = nil
	q.Explanation.Relaxations = nil
	for range 10 {
		x := full.Quotes[0]
		x.Pieces = x.Pieces[:1]
		q.Quotes = append(q.Quotes, x)
	}
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(q); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 16<<10)
		for b.Loop() {
			var err error
			if buf, err = q.appendJSON(buf[:0]); err != nil {
				b.Fatal(err)
			}
		}
	})
}
