// Package metrics defines what a replica reports to Prometheus: request
// latency by route, bookings and conflicts, quotes, settlement steps and
// failures, and gauges read when scraped (the settlement retrier's
// backlog, the matcher index's size and age, the change feed's lag, the background lease). The
// registry is the process owner's (prometheus.NewRegistry in cmd); nothing
// here registers globally. A nil *Metrics records nothing, so packages can
// be built and tested without one.
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds the counters and histograms the application updates.
type Metrics struct {
	requests           *prometheus.HistogramVec
	bookings           prometheus.Counter
	conflicts          prometheus.Counter
	quotes             *prometheus.CounterVec
	settlementSteps    *prometheus.CounterVec
	settlementFailures *prometheus.CounterVec
}

// New registers the application's counters and histograms, and the Go
// runtime's and the process's own, with reg.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gpumarket_http_request_duration_seconds",
			Help:    "Time to answer an HTTP request, by method, route template and status class.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "status"}),
		bookings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpumarket_bookings_total",
			Help: "Reservations held by a booking.",
		}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpumarket_booking_conflicts_total",
			Help: "Bookings refused because the capacity was taken meanwhile (409).",
		}),
		quotes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumarket_quotes_total",
			Help: "Quote requests answered, by channel (web, api) and whether any way to run the request was found.",
		}, []string{"channel", "found"}),
		settlementSteps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumarket_settlement_steps_total",
			Help: "Settlement money movements made and recorded, by step (refund, transfer).",
		}, []string{"step"}),
		settlementFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpumarket_settlement_failures_total",
			Help: "Settlement steps that failed, by step and whether the retrier gave up (left for an admin).",
		}, []string{"step", "gave_up"}),
	}
	reg.MustRegister(m.requests, m.bookings, m.conflicts, m.quotes, m.settlementSteps, m.settlementFailures,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// ObserveRequest records one answered request. route is the route template
// (never the raw path, which would make a series per URL).
func (m *Metrics) ObserveRequest(method, route string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(method, route, statusClass(status)).Observe(d.Seconds())
}

// statusClass is "2xx" for 200 to 299, and so on.
func statusClass(status int) string {
	if status < 100 || status > 599 {
		return "other"
	}
	return strconv.Itoa(status/100) + "xx"
}

// Booked counts a reservation held.
func (m *Metrics) Booked() {
	if m != nil {
		m.bookings.Inc()
	}
}

// BookingConflict counts a booking refused for capacity taken meanwhile.
func (m *Metrics) BookingConflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

// Quoted counts a quote request answered on channel ("web" or "api");
// found is whether it had at least one quote.
func (m *Metrics) Quoted(channel string, found bool) {
	if m != nil {
		m.quotes.WithLabelValues(channel, strconv.FormatBool(found)).Inc()
	}
}

// Settlement steps, as the step label names them.
const (
	StepRefund   = "refund"
	StepTransfer = "transfer"
)

// SettlementStep counts a settlement step made and recorded.
func (m *Metrics) SettlementStep(step string) {
	if m != nil {
		m.settlementSteps.WithLabelValues(step).Inc()
	}
}

// SettlementFailure counts a failed settlement step; gaveUp is set when no
// retry follows.
func (m *Metrics) SettlementFailure(step string, gaveUp bool) {
	if m != nil {
		m.settlementFailures.WithLabelValues(step, strconv.FormatBool(gaveUp)).Inc()
	}
}

// Backlog is the settlement retrier's work: settlements with a step to make
// that has not failed yet (Due), that failed and will be retried
// (Retrying), and that the retrier gave up on, waiting for an admin
// (Failed).
type Backlog struct {
	Due, Retrying, Failed int
}

// Sources are the values read when Prometheus scrapes. Every field is
// required.
type Sources struct {
	// Backlog counts the settlement retrier's work in the database.
	Backlog func(context.Context) (Backlog, error)
	// IndexSize is the number of offers in this replica's matcher index.
	IndexSize func() int
	// IndexAge is the time since this replica's index was last loaded
	// from the database.
	IndexAge func() time.Duration
	// HoldsLease reports whether this replica runs the background work.
	HoldsLease func() bool
	// FeedLag is how far this replica's index is behind the change feed
	// (workflow.Service.FeedLag): the age of the oldest change heard and not
	// applied, or how long the feed has been down, with joined false.
	FeedLag func() (lag time.Duration, joined bool)
}

// RegisterSources registers the gauges read from src at scrape time.
func RegisterSources(reg prometheus.Registerer, src Sources) error {
	cs := []prometheus.Collector{
		backlogCollector{count: src.Backlog, desc: prometheus.NewDesc("gpumarket_settlement_backlog",
			"Settlements the retrier has work on, by state: due (no failure yet), retrying (failed, will retry), failed (given up, waiting for an admin).",
			[]string{"state"}, nil)},
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumarket_matcher_index_offers",
			Help: "Offers in this replica's matcher index.",
		}, func() float64 { return float64(src.IndexSize()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumarket_matcher_index_age_seconds",
			Help: "Seconds since this replica's matcher index was last loaded from the database.",
		}, func() float64 { return src.IndexAge().Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumarket_change_feed_lag_seconds",
			Help: "Age of the oldest change to offers heard from the change feed and not yet applied to this replica's index (0 when none), or, while the feed is down, seconds since it went down.",
		}, func() float64 { lag, _ := src.FeedLag(); return lag.Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumarket_change_feed_joined",
			Help: "1 when the change feed is connected and the index was reloaded after it joined (always 1 on SQLite, which has no feed), else 0.",
		}, func() float64 {
			if _, joined := src.FeedLag(); joined {
				return 1
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "gpumarket_background_lease_held",
			Help: "1 when this replica holds the background lease (runs hold expiry, settlement, pruning), else 0.",
		}, func() float64 {
			if src.HoldsLease() {
				return 1
			}
			return 0
		}),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// backlogTimeout bounds the database query a scrape makes.
const backlogTimeout = 5 * time.Second

// backlogCollector queries the backlog when scraped. A failed query is
// reported as an error of this metric alone; the rest of the scrape still
// answers.
type backlogCollector struct {
	count func(context.Context) (Backlog, error)
	desc  *prometheus.Desc
}

func (b backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogTimeout)
	defer cancel()
	bl, err := b.count(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(b.desc, err)
		return
	}
	for state, n := range map[string]int{"due": bl.Due, "retrying": bl.Retrying, "failed": bl.Failed} {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, float64(n), state)
	}
}

// Handler serves reg in Prometheus's text format. A metric that cannot be
// collected is left out and the rest served.
func Handler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Registry: reg})
}
