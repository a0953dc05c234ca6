package web

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpumarket/gpumarket/metrics"
	"github.com/gpumarket/gpumarket/workflow"
)

// scrape serves reg as Prometheus scrapes it and returns the text.
func scrape(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(metrics.Handler(reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %d %v\n%s", resp.StatusCode, err, b)
	}
	return string(b)
}

// sample returns the value of one series (name with its labels, as the
// text format writes them) in a scrape, or -1 when it is absent.
func sample(text, series string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

// requireSamples checks each series' value in a scrape.
func requireSamples(t *testing.T, text string, want map[string]float64) {
	t.Helper()
	for series, v := range want {
		if got := sample(text, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}

// TestMetricsRequestsBookingsQuotes: requests are measured by route
// template and status class (a path that matches no route as "unmatched",
// never by its raw URL); quotes, bookings and a lost race are counted.
func TestMetricsRequestsBookingsQuotes(t *testing.T) {
	reg := prometheus.NewRegistry()
	app := newTestAppWith(t, func(c *Config) { c.Metrics = metrics.New(reg) })
	offer := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	visitor := app.client()
	for range 2 {
		if r := visitor.get(fmt.Sprintf("/offers/%d", offer.ID)); r.status != http.StatusOK {
			t.Fatalf("offer page: %d", r.status)
		}
	}
	if r := visitor.get("/offers/987654"); r.status != http.StatusNotFound {
		t.Fatalf("missing offer: %d, want 404", r.status)
	}
	if r := visitor.get("/no/such/page"); r.status != http.StatusNotFound {
		t.Fatalf("unknown path: %d, want 404", r.status)
	}

	// Two buyers quote the same devices (2 quotes); one books them, the
	// other loses the race (a conflict, answered with fresh quotes: 1 more).
	alice, bob := app.client(), app.client()
	alice.signUp("alice@example.com", false)
	bob.signUp("bob@example.com", false)
	reqJSON, sig := firstQuote(t, alice.get("/requests?"+trainingQuery().Encode()).body)
	bobReq, bobSig := firstQuote(t, bob.get("/requests?"+trainingQuery().Encode()).body)
	if r := alice.post("/requests", "/reservations", url.Values{"request": {reqJSON}, "quote_id": {sig}}); r.status != http.StatusSeeOther {
		t.Fatalf("reserve: %d\n%s", r.status, r.body)
	}
	if r := bob.post("/requests", "/reservations", url.Values{"request": {bobReq}, "quote_id": {bobSig}}); r.status != http.StatusConflict {
		t.Fatalf("lost race: %d, want 409", r.status)
	}

	text := scrape(t, reg)
	const h = "gpumarket_http_request_duration_seconds_count"
	requireSamples(t, text, map[string]float64{
		h + `{method="GET",route="/offers/:id",status="2xx"}`:    2,
		h + `{method="GET",route="/offers/:id",status="4xx"}`:    1,
		h + `{method="GET",route="unmatched",status="4xx"}`:      1,
		h + `{method="POST",route="/reservations",status="3xx"}`: 1,
		h + `{method="POST",route="/reservations",status="4xx"}`: 1,
		`gpumarket_quotes_total{channel="web",found="true"}`:     3,
		`gpumarket_bookings_total`:                               1,
		`gpumarket_booking_conflicts_total`:                      1,
	})
	if strings.Contains(text, fmt.Sprintf(`route="/offers/%d"`, offer.ID)) || strings.Contains(text, "/no/such/page") {
		t.Errorf("a raw URL became a route label:\n%s", text)
	}
}

// TestMetricsSettlementAndGauges: a settlement's refund and transfers are
// counted, a failed transfer too, and the retrier's backlog shows it until
// the retry succeeds; the index and lease gauges are read when scraped.
func TestMetricsSettlementAndGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	app := newBillingAppWith(t, func(c *Config) { c.Metrics = metrics.New(reg) })
	err := metrics.RegisterSources(reg, metrics.Sources{
		Backlog: func(ctx context.Context) (metrics.Backlog, error) {
			b, err := app.db.CountSettlementBacklog(ctx)
			return metrics.Backlog(b), err
		},
		IndexSize:  func() int { return app.handler.wf.Index().Len() },
		IndexAge:   app.handler.wf.IndexAge,
		HoldsLease: func() bool { return true },
		FeedLag:    app.handler.wf.FeedLag,
	})
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := settledFlow(t, app, 1) // the transfer fails once, retryably
	requireSamples(t, scrape(t, reg), map[string]float64{
		`gpumarket_settlement_steps_total{step="refund"}`:                      1,
		`gpumarket_settlement_steps_total{step="transfer"}`:                    -1, // none yet
		`gpumarket_settlement_failures_total{gave_up="false",step="transfer"}`: 1,
		`gpumarket_settlement_backlog{state="due"}`:                            0,
		`gpumarket_settlement_backlog{state="retrying"}`:                       1,
		`gpumarket_settlement_backlog{state="failed"}`:                         0,
		`gpumarket_bookings_total`:                                             1,
		`gpumarket_matcher_index_offers`:                                       1,
		`gpumarket_background_lease_held`:                                      1,
	})
	st, err := app.db.FindSettlement(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	app.tick(st.NextAttemptAt.Add(time.Second))
	text := scrape(t, reg)
	requireSamples(t, text, map[string]float64{
		`gpumarket_settlement_steps_total{step="transfer"}`: 1,
		`gpumarket_settlement_backlog{state="retrying"}`:    0,
	})
	// The index was loaded at the test's start and the clock has moved
	// days since: its age is the clock's, in seconds.
	if age := sample(text, "gpumarket_matcher_index_age_seconds"); age < st.NextAttemptAt.Sub(testNow).Seconds() {
		t.Errorf("index age %v s, want at least %v s", age, st.NextAttemptAt.Sub(testNow).Seconds())
	}
}

// TestHealthzIndexAndDatabase: /healthz is 200 while the database answers
// and the index is recent, 503 once the index is older than IndexMaxAge
// (200 again after a reload), and 503 when the database is closed.
func TestHealthzIndexAndDatabase(t *testing.T) {
	app := newBillingApp(t)
	c := app.client()
	if r := c.get("/healthz"); r.status != http.StatusOK || !strings.Contains(r.body, `"index":"ok"`) || !strings.Contains(r.body, `"database":"ok"`) {
		t.Fatalf("healthy: %d %s", r.status, r.body)
	}
	app.clock.set(testNow.Add(workflow.IndexMaxAge(0) + time.Minute))
	if r := c.get("/healthz"); r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"index":"stale"`) || !strings.Contains(r.body, `"database":"ok"`) {
		t.Fatalf("stale index: %d %s", r.status, r.body)
	}
	if err := app.handler.wf.ReloadIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	if r := c.get("/healthz"); r.status != http.StatusOK || !strings.Contains(r.body, `"index_age_seconds":0`) {
		t.Fatalf("after a reload: %d %s", r.status, r.body)
	}
	app.db.Close()
	r := c.get("/healthz")
	if r.status != http.StatusServiceUnavailable || !strings.Contains(r.body, `"database":"unreachable"`) || !strings.Contains(r.body, `"status":"unavailable"`) {
		t.Fatalf("closed database: %d %s", r.status, r.body)
	}
	mustNotContain(t, r.body, "sql:", "closed")
}

// forwardedFor sets X-Forwarded-For on every request it sends.
type forwardedFor struct {
	addr string
	next http.RoundTripper
}

func (f *forwardedFor) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("X-Forwarded-For", f.addr)
	return f.next.RoundTrip(req)
}

// TestTrustedProxies: the log-in throttle counts by the client address.
// X-Forwarded-For names it only when the TCP peer (here 127.0.0.1) is a
// listed trusted proxy: with no list, or a list without the peer (loopback
// is not trusted unless listed), a forged header neither moves the count
// to a fresh address nor escapes it.
func TestTrustedProxies(t *testing.T) {
	for _, tc := range []struct {
		name     string
		trusted  string
		believed bool
	}{
		{"no trusted proxies", "", false},
		{"peer not listed", "10.0.0.0/8", false},
		{"peer listed", "127.0.0.1/32", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var nets []*net.IPNet
			if tc.trusted != "" {
				_, n, err := net.ParseCIDR(tc.trusted)
				if err != nil {
					t.Fatal(err)
				}
				nets = append(nets, n)
			}
			app := newTestAppWith(t, func(c *Config) { c.TrustedProxies = nets })
			c := app.client()
			xff := &forwardedFor{addr: "203.0.113.7", next: http.DefaultTransport}
			c.http.Transport = xff
			for i := 0; i < loginPerAddress; i++ {
				if r := c.login(fmt.Sprintf("nobody%d@example.com", i), "wrong password!", "/"); r.status != http.StatusUnauthorized {
					t.Fatalf("attempt %d: %d, want 401", i+1, r.status)
				}
			}
			// The same forwarded address is over the limit either way.
			if r := c.login("more@example.com", "wrong password!", "/"); r.status != http.StatusTooManyRequests {
				t.Fatalf("same address: %d, want 429", r.status)
			}
			// Another forwarded address is a fresh client only from a trusted proxy.
			xff.addr = "198.51.100.9"
			want := http.StatusTooManyRequests
			if tc.believed {
				want = http.StatusUnauthorized
			}
			if r := c.login("other@example.com", "wrong password!", "/"); r.status != want {
				t.Fatalf("another forwarded address: %d, want %d", r.status, want)
			}
		})
	}
}
