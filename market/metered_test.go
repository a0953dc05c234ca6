package market

import (
	"testing"
	"time"
)

func TestMeteredMinutes(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := func(min, sec int) time.Time {
		return t0.Add(time.Duration(min)*time.Minute + time.Duration(sec)*time.Second)
	}
	cases := []struct {
		name        string
		start, stop time.Time
		outages     []Span
		seconds     int64
		minutes     int64
	}{
		{"clock never started", time.Time{}, at(30, 0), nil, 0, 0},
		{"stop before start", at(10, 0), at(5, 0), nil, 0, 0},
		{"exactly 20 minutes", at(0, 0), at(20, 0), nil, 1200, 20},
		{"a started minute is not billed until complete", at(0, 0), at(20, 59), nil, 1259, 20},
		{"59 seconds bill nothing", at(0, 0), at(0, 59), nil, 59, 0},
		// 60 min less a 10-minute host failure = 50.
		{"outage inside", at(0, 0), at(60, 0), []Span{{at(20, 0), at(30, 0)}}, 3000, 50},
		// Outage 5 min before the start to 5 after: only 5 inside.
		{"outage straddling the start", at(0, 0), at(60, 0), []Span{{at(-5, 0), at(5, 0)}}, 3300, 55},
		// Outage from 50 to 70 clipped at the stop 60: 10 excluded.
		{"outage past the stop", at(0, 0), at(60, 0), []Span{{at(50, 0), at(70, 0)}}, 3000, 50},
		// Host failure 10–20 and fewer devices 15–25 overlap: 10–25 = 15 min once.
		{"overlapping outages counted once", at(0, 0), at(60, 0), []Span{{at(10, 0), at(20, 0)}, {at(15, 0), at(25, 0)}}, 2700, 45},
		// Two separate outages 10–12 and 40–41, given out of order: 3 min.
		{"separate outages", at(0, 0), at(60, 0), []Span{{at(40, 0), at(41, 0)}, {at(10, 0), at(12, 0)}}, 3420, 57},
		// 30 s outage in a 10 min rental: 570 s, floor 9 minutes.
		{"part-minute outage rounds the total down", at(0, 0), at(10, 0), []Span{{at(3, 0), at(3, 30)}}, 570, 9},
		{"outage before the clock", at(0, 0), at(10, 0), []Span{{at(-20, 0), at(-10, 0)}}, 600, 10},
		{"outage over the whole rental", at(0, 0), at(10, 0), []Span{{at(-1, 0), at(11, 0)}}, 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := MeteredBillableSeconds(c.start, c.stop, c.outages); got != c.seconds {
				t.Errorf("seconds = %d, want %d", got, c.seconds)
			}
			if got := MeteredMinutes(c.start, c.stop, c.outages); got != c.minutes {
				t.Errorf("minutes = %d, want %d", got, c.minutes)
			}
		})
	}
}

func TestMeteredCents(t *testing.T) {
	cases := []struct {
		minutes int64
		price   Cents
		devices int
		want    Cents
	}{
		{0, 250, 1, 0},
		{1, 250, 1, 4},      // 250/60 = 4.16… → 4
		{20, 250, 1, 83},    // 5000/60 = 83.3… → 83
		{60, 250, 1, 250},   // an hour is the hourly price
		{20, 249, 8, 664},   // 20·249·8 = 39840 / 60 = 664 exactly
		{7, 199, 3, 69},     // 4179/60 = 69.65 → 69
		{90, 1999, 2, 5997}, // 359820/60 = 5997
		{5, 0, 1, 0},
		{5, 100, 0, 0},
	}
	for _, c := range cases {
		if got := MeteredCents(c.minutes, c.price, c.devices); got != c.want {
			t.Errorf("MeteredCents(%d, %d, %d) = %d, want %d", c.minutes, c.price, c.devices, got, c.want)
		}
	}
}

// Draws in batches of any size add up to the whole's rounding: the
// cumulative rule never bills a minute or a cent twice.
func TestMeteredDrawsTelescope(t *testing.T) {
	const price, devices = 199, 3 // 597 cents an hour, 9.95 a minute
	for _, batches := range [][]int64{{1, 1, 1, 1, 1, 1, 1}, {3, 4}, {7}, {2, 0, 5}} {
		var drawnMin int64
		var drawnCents Cents
		var total int64
		for _, b := range batches {
			total += b
			m, c := MeteredDraw(drawnMin, drawnCents, total, price, devices)
			if m != b {
				t.Fatalf("batches %v: drew %d minutes, want %d", batches, m, b)
			}
			drawnMin += m
			drawnCents += c
		}
		// 7 minutes × 597 / 60 = 69.65 → 69, by hand.
		if drawnMin != 7 || drawnCents != 69 {
			t.Errorf("batches %v: drew %d minutes for %d cents, want 7 for 69", batches, drawnMin, drawnCents)
		}
	}
	if m, c := MeteredDraw(10, 100, 8, price, devices); m != 0 || c != 0 {
		t.Errorf("a total below what was drawn drew %d min %d cents", m, c)
	}
}

func TestMeteredCovers(t *testing.T) {
	// 250 × 1 / 60 per minute rounded up = 5 cents; 2 minutes need 10.
	if got := MeteredPerMinute(250, 1); got != 5 {
		t.Fatalf("per minute = %d, want 5", got)
	}
	if MeteredCovers(9, 2, 250, 1) || !MeteredCovers(10, 2, 250, 1) {
		t.Error("covers: 9 cents must not cover 2 minutes at 5, 10 must")
	}
	// 8 devices at 249: 1992/60 = 33.2 → 34 a minute.
	if got := MeteredPerMinute(249, 8); got != 34 {
		t.Errorf("per minute = %d, want 34", got)
	}
}

func TestRefundPlan(t *testing.T) {
	cases := []struct {
		amount Cents
		left   []Cents
		want   []Cents
	}{
		{700, []Cents{1000, 500}, []Cents{200, 500}}, // newest first
		{300, []Cents{1000, 500}, []Cents{0, 300}},
		{2000, []Cents{1000, 500}, []Cents{1000, 500}}, // never more than each has left
		{100, []Cents{0, 0}, []Cents{0, 0}},
		{0, []Cents{100}, []Cents{0}},
	}
	for _, c := range cases {
		got := RefundPlan(c.amount, c.left)
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("RefundPlan(%d, %v) = %v, want %v", c.amount, c.left, got, c.want)
				break
			}
		}
	}
}

func TestSummarizeBalance(t *testing.T) {
	es := []BalanceEntry{
		{7, LedgerEntry{Kind: EntryTopUp, Debit: AccountPlatformCash, Credit: BalanceAccount(7), Amount: 2000, IdempotencyKey: "a"}},
		{7, LedgerEntry{ReservationID: 3, Kind: EntryDraw, Debit: BalanceAccount(7), Credit: ProviderAccount(9), Amount: 83, IdempotencyKey: "b"}},
		{7, LedgerEntry{Kind: EntryBalanceRefund, Debit: BalanceAccount(7), Credit: AccountPlatformCash, Amount: 1000, IdempotencyKey: "c"}},
		{8, LedgerEntry{Kind: EntryTopUp, Debit: AccountPlatformCash, Credit: BalanceAccount(8), Amount: 500, IdempotencyKey: "d"}},
	}
	if err := CheckBalanceLedger(es); err != nil {
		t.Fatal(err)
	}
	s := SummarizeBalance(7, es)
	if s.TopUps != 2000 || s.Draws != 83 || s.Refunds != 1000 || s.Balance != 917 {
		t.Errorf("summary = %+v, want 2000/83/1000 balance 917", s)
	}
	es = append(es, es[0])
	if CheckBalanceLedger(es) == nil {
		t.Error("a key used twice passed")
	}
}

func TestMeteredUsableAt(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	m := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Minute) }
	cases := []struct {
		name  string
		nodes []NodeReadiness
		at    time.Time
		ok    bool
	}{
		{"nothing reported", []NodeReadiness{{}}, time.Time{}, false},
		{"access without acceptance", []NodeReadiness{{InstalledAt: m(2)}}, time.Time{}, false},
		{"acceptance after access", []NodeReadiness{{InstalledAt: m(2), AcceptedAt: m(5)}}, m(5), true},
		{"access after acceptance", []NodeReadiness{{InstalledAt: m(7), AcceptedAt: m(5)}}, m(7), true},
		{"failed acceptance", []NodeReadiness{{InstalledAt: m(2), AcceptedAt: m(5), AcceptanceFailed: true}}, time.Time{}, false},
		{"container running", []NodeReadiness{{ContainerReadyAt: m(4)}}, m(4), true},
		{"the last node counts", []NodeReadiness{{InstalledAt: m(1), AcceptedAt: m(3)}, {ContainerReadyAt: m(9)}}, m(9), true},
		{"one node not ready", []NodeReadiness{{InstalledAt: m(1), AcceptedAt: m(3)}, {InstalledAt: m(2)}}, time.Time{}, false},
		{"no nodes", nil, time.Time{}, false},
	}
	for _, c := range cases {
		at, ok := MeteredUsableAt(c.nodes)
		if ok != c.ok || !at.Equal(c.at) {
			t.Errorf("%s: got %v %v, want %v %v", c.name, at, ok, c.at, c.ok)
		}
	}
}
