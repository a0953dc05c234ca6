package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestStatusClass(t *testing.T) {
	for status, want := range map[int]string{200: "2xx", 204: "2xx", 303: "3xx", 404: "4xx", 429: "4xx", 503: "5xx", 0: "other", 600: "other"} {
		if got := statusClass(status); got != want {
			t.Errorf("statusClass(%d) = %q, want %q", status, got, want)
		}
	}
}

// A nil *Metrics records nothing and does not panic.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ObserveRequest("GET", "/", 200, time.Millisecond)
	m.Booked()
	m.BookingConflict()
	m.Quoted("web", true)
	m.SettlementStep(StepRefund)
	m.SettlementFailure(StepTransfer, true)
}

// TestScrapeSurvivesABacklogError: when the backlog query fails the scrape
// still answers with every other metric, and the gauges read their sources
// when scraped.
func TestScrapeSurvivesABacklogError(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	m.SettlementFailure(StepTransfer, true)
	fail := true
	held := false
	err := RegisterSources(reg, Sources{
		Backlog: func(context.Context) (Backlog, error) {
			if fail {
				return Backlog{}, errors.New("database is closed")
			}
			return Backlog{Due: 2, Retrying: 1, Failed: 3}, nil
		},
		IndexSize:  func() int { return 7 },
		IndexAge:   func() time.Duration { return 90 * time.Second },
		HoldsLease: func() bool { return held },
		FeedLag:    func() (time.Duration, bool) { return 1500 * time.Millisecond, !fail },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(reg))
	defer srv.Close()
	scrape := func() string {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("scrape: %d\n%s", resp.StatusCode, b)
		}
		return string(b)
	}
	text := scrape()
	for _, want := range []string{`gpumarket_settlement_failures_total{gave_up="true",step="transfer"} 1`,
		"gpumarket_matcher_index_offers 7", "gpumarket_matcher_index_age_seconds 90", "gpumarket_background_lease_held 0",
		"gpumarket_change_feed_lag_seconds 1.5", "gpumarket_change_feed_joined 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(text, "gpumarket_settlement_backlog{") {
		t.Errorf("a failed backlog query was reported as values:\n%s", text)
	}
	fail, held = false, true
	text = scrape()
	for _, want := range []string{`gpumarket_settlement_backlog{state="due"} 2`, `gpumarket_settlement_backlog{state="retrying"} 1`,
		`gpumarket_settlement_backlog{state="failed"} 3`, "gpumarket_background_lease_held 1", "gpumarket_change_feed_joined 1"} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
}
