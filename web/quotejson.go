package web

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// The quotes' JSON (POST /api/v1/quotes), written by hand: the same bytes
// encoding/json writes for apiQuotes (TestQuotesJSONIsEncodingJSONs holds
// them equal, field by field), 4–8 times as fast and with 7 allocations
// instead of 73 for ten quotes (BenchmarkQuotesJSON): encoding/json spends
// a narrow quote's encoding on reflection, and on checking again each
// time it formatted (time.Time's MarshalJSON).

// quoteJSONBuffers keeps the buffers of sent quotes for the next ones.
var quoteJSONBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 16<<10); return &b }}

// writeQuotesJSON sends out with status 200.
func writeQuotesJSON(c echo.Context, out apiQuotes) error {
	bp := quoteJSONBuffers.Get().(*[]byte)
	b, err := out.appendJSON((*bp)[:0])
	if err != nil {
		return err
	}
	err = writeJSONBytes(c, 200, b)
	if cap(b) <= 256<<10 { // a broad answer's rare large buffer is not kept
		*bp = b[:0]
		quoteJSONBuffers.Put(bp)
	}
	return err
}

func (q apiQuotes) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"quotes":`...)
	if q.Quotes == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, x := range q.Quotes {
			if i > 0 {
				b = append(b, ',')
			}
			b = x.appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `,"total":`...)
	b = strconv.AppendInt(b, int64(q.Total), 10)
	b = append(b, `,"explanation":`...)
	b, err := q.Explanation.appendJSON(b)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"search":`...)
	b = q.Search.appendJSON(b)
	b = append(b, `,"on_failure":`...)
	b = appendJSONString(b, q.OnFailure)
	return append(b, '}'), nil
}

func (q apiQuote) appendJSON(b []byte) []byte {
	b = append(b, `{"quote_id":`...)
	b = appendJSONString(b, q.QuoteID)
	b = append(b, `,"quoted_at":`...)
	b = appendJSONTime(b, q.QuotedAt)
	b = append(b, `,"valid_until":`...)
	b = appendJSONTime(b, q.ValidUntil)
	b = append(b, `,"rank":`...)
	b = strconv.AppendInt(b, int64(q.Rank), 10)
	b = append(b, `,"pieces":`...)
	if q.Pieces == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, p := range q.Pieces {
			if i > 0 {
				b = append(b, ',')
			}
			b = p.appendJSON(b)
		}
		b = append(b, ']')
	}
	b = append(b, `,"cost":`...)
	b = q.Cost.appendJSON(b)
	b = append(b, `,"charged_cents":`...)
	b = strconv.AppendInt(b, int64(q.ChargedCents), 10)
	if q.CentsPerRefDeviceHour != 0 {
		b = append(b, `,"cents_per_reference_device_hour":`...)
		b = strconv.AppendInt(b, int64(q.CentsPerRefDeviceHour), 10)
	}
	b = append(b, `,"emissions_kg_co2e":`...)
	b = appendJSONString(b, q.EmissionsKgCO2e)
	b = append(b, `,"reliability_bp":`...)
	b = strconv.AppendInt(b, int64(q.ReliabilityBP), 10)
	b = append(b, `,"providers":`...)
	b = strconv.AppendInt(b, int64(q.Providers), 10)
	b = append(b, `,"start":`...)
	b = appendJSONTime(b, q.Start)
	b = append(b, `,"end":`...)
	b = appendJSONTime(b, q.End)
	b = append(b, `,"exact":`...)
	b = strconv.AppendBool(b, q.Exact)
	if q.LowerBoundCents != 0 {
		b = append(b, `,"lower_bound_cents":`...)
		b = strconv.AppendInt(b, int64(q.LowerBoundCents), 10)
	}
	return append(b, '}')
}

func (p apiPiece) appendJSON(b []byte) []byte {
	b = append(b, `{"offer_id":`...)
	b = strconv.AppendInt(b, p.OfferID, 10)
	b = append(b, `,"provider_id":`...)
	b = strconv.AppendInt(b, p.ProviderID, 10)
	b = append(b, `,"accelerator":`...)
	b = appendJSONString(b, p.Accelerator)
	b = append(b, `,"region":`...)
	b = appendJSONString(b, p.Region)
	b = append(b, `,"devices":`...)
	b = strconv.AppendInt(b, int64(p.Devices), 10)
	b = append(b, `,"start":`...)
	b = appendJSONTime(b, p.Start)
	b = append(b, `,"end":`...)
	b = appendJSONTime(b, p.End)
	b = append(b, `,"interruptible":`...)
	b = strconv.AppendBool(b, p.Interruptible)
	b = append(b, `,"price_cents_per_device_hour":`...)
	b = strconv.AppendInt(b, int64(p.PriceCents), 10)
	b = append(b, `,"cost":`...)
	b = p.Cost.appendJSON(b)
	return append(b, '}')
}

func (c apiCost) appendJSON(b []byte) []byte {
	b = append(b, `{"instance_cents":`...)
	b = strconv.AppendInt(b, int64(c.Instance), 10)
	b = append(b, `,"storage_cents":`...)
	b = strconv.AppendInt(b, int64(c.Storage), 10)
	b = append(b, `,"egress_cents":`...)
	b = strconv.AppendInt(b, int64(c.Egress), 10)
	b = append(b, `,"orchestration_cents":`...)
	b = strconv.AppendInt(b, int64(c.Orchestration), 10)
	b = append(b, `,"expected_failed_work_cents":`...)
	b = strconv.AppendInt(b, int64(c.FailedWork), 10)
	b = append(b, `,"restart_cents":`...)
	b = strconv.AppendInt(b, int64(c.Restart), 10)
	b = append(b, `,"total_cents":`...)
	b = strconv.AppendInt(b, int64(c.Total), 10)
	return append(b, '}')
}

func (e apiExplanation) appendJSON(b []byte) ([]byte, error) {
	b = append(b, `{"summary":`...)
	b = appendJSONString(b, e.Summary)
	b = append(b, `,"considered":`...)
	b = strconv.AppendInt(b, int64(e.Considered), 10)
	b = append(b, `,"fit":`...)
	b = strconv.AppendInt(b, int64(e.Fit), 10)
	b = append(b, `,"eliminated":`...)
	if e.Eliminated == nil {
		b = append(b, "null"...)
	} else {
		keys := make([]string, 0, len(e.Eliminated))
		for k := range e.Eliminated {
			keys = append(keys, k)
		}
		slices.Sort(keys) // as encoding/json orders a map's keys
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(e.Eliminated[k]), 10)
		}
		b = append(b, '}')
	}
	if e.Shortfall != "" {
		b = append(b, `,"shortfall":`...)
		b = appendJSONString(b, e.Shortfall)
	}
	if len(e.Relaxations) > 0 {
		// Only quotes that found too little carry relaxations, each with a
		// request document: encoding/json compacts and escapes those.
		r, err := json.Marshal(e.Relaxations)
		if err != nil {
			return nil, err
		}
		b = append(b, `,"relaxations":`...)
		b = append(b, r...)
	}
	return append(b, '}'), nil
}

func (s apiSearch) appendJSON(b []byte) []byte {
	b = append(b, `{"complete":`...)
	b = strconv.AppendBool(b, s.Complete)
	b = append(b, `,"exhaustive":`...)
	b = strconv.AppendBool(b, s.Exhaustive)
	if s.NotEvaluated != 0 {
		b = append(b, `,"not_evaluated":`...)
		b = strconv.AppendInt(b, int64(s.NotEvaluated), 10)
	}
	if s.Examined != 0 {
		b = append(b, `,"examined":`...)
		b = strconv.AppendInt(b, int64(s.Examined), 10)
	}
	if s.NotExamined != 0 {
		b = append(b, `,"not_examined":`...)
		b = strconv.AppendInt(b, int64(s.NotExamined), 10)
	}
	if s.PriceCeilingCents != 0 {
		b = append(b, `,"price_ceiling_cents":`...)
		b = strconv.AppendInt(b, int64(s.PriceCeilingCents), 10)
	}
	if s.RelaxationsIncomplete {
		b = append(b, `,"relaxations_incomplete":true`...)
	}
	if s.Message != "" {
		b = append(b, `,"message":`...)
		b = appendJSONString(b, s.Message)
	}
	return append(b, '}')
}

// appendJSONString appends s as encoding/json writes a string: printable
// ASCII but the quote, the backslash and <, > and & as it is, anything
// else through encoding/json itself (its escapes, its replacement of
// bytes that are not UTF-8).
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			e, _ := json.Marshal(s) // a string always encodes
			return append(b, e...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONTime appends t as time.Time.MarshalJSON does (RFC 3339 with
// the fraction of a second it has), for the years 0–9999 a quote's times
// are in.
func appendJSONTime(b []byte, t time.Time) []byte {
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
