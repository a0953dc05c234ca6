package store

import (
	"context"
	"testing"
	"time"
)

func TestThrottleWindow(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	const key = "login-ip:192.0.2.1"
	window := time.Minute

	type step struct {
		at      time.Duration // after t0
		allowed bool
		retry   time.Duration
		comment string
	}
	steps := []step{
		{0, true, 0, "1st"},
		{10 * time.Second, true, 0, "2nd"},
		{20 * time.Second, true, 0, "3rd: limit reached"},
		{30 * time.Second, false, 30 * time.Second, "4th refused until the 1st (t0) leaves at t0+60s"},
		{59*time.Second + 500*time.Millisecond, false, 500 * time.Millisecond, "still refused half a second before"},
		{60 * time.Second, true, 0, "1st has left the window"},
		{61 * time.Second, false, 9 * time.Second, "2nd (t0+10s) leaves at t0+70s"},
		{3 * time.Minute, true, 0, "all old attempts have left"},
	}
	for _, s := range steps {
		allowed, retry, err := db.ThrottleHit(ctx, key, t0.Add(s.at), window, 3)
		if err != nil {
			t.Fatal(err)
		}
		if allowed != s.allowed || retry != s.retry {
			t.Errorf("%s: ThrottleHit at +%s = %v, %s; want %v, %s", s.comment, s.at, allowed, retry, s.allowed, s.retry)
		}
	}

	// Old rows of the key are pruned: only the last attempt remains.
	var n int
	if err := db.reader.QueryRowContext(ctx, `SELECT COUNT(*) FROM throttle_hits WHERE throttle_key = ?`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d rows left for the key, want 1", n)
	}
}

func TestThrottleKeysAndReset(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	hit := func(key string) bool {
		t.Helper()
		ok, _, err := db.ThrottleHit(ctx, key, t0, time.Hour, 2)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	a, b := "login-acct:a@example.com", "login-acct:b@example.com"
	if !hit(a) || !hit(a) || hit(a) {
		t.Fatal("key a: want allowed, allowed, refused")
	}
	if !hit(b) {
		t.Error("key b throttled by key a's attempts")
	}
	if err := db.ThrottleReset(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !hit(a) || !hit(a) || hit(a) {
		t.Error("key a after reset: want allowed, allowed, refused")
	}
	if !hit(b) || hit(b) {
		t.Error("key b was reset with key a")
	}

	n, err := db.DeleteThrottleHitsBefore(ctx, t0.Add(time.Second))
	if err != nil || n != 4 {
		t.Errorf("DeleteThrottleHitsBefore = %d, %v; want 4", n, err)
	}
	if !hit(a) {
		t.Error("key a still throttled after pruning")
	}

	if _, _, err := db.ThrottleHit(ctx, a, t0, time.Hour, 0); err == nil {
		t.Error("limit 0 accepted")
	}
}

func TestThrottlePeek(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	const key = "login-acct:c@example.com"
	peek := func(at time.Duration) (bool, time.Duration) {
		t.Helper()
		blocked, retry, err := db.ThrottlePeek(ctx, key, t0.Add(at), time.Minute, 2)
		if err != nil {
			t.Fatal(err)
		}
		return blocked, retry
	}
	if blocked, _ := peek(0); blocked {
		t.Error("blocked with no attempts")
	}
	for _, at := range []time.Duration{0, 20 * time.Second} {
		if ok, _, err := db.ThrottleHit(ctx, key, t0.Add(at), time.Minute, 2); err != nil || !ok {
			t.Fatalf("ThrottleHit at +%s = %v, %v", at, ok, err)
		}
	}
	if blocked, retry := peek(30 * time.Second); !blocked || retry != 30*time.Second {
		t.Errorf("peek at +30s = %v, %s; want blocked for 30s", blocked, retry)
	}
	if blocked, retry := peek(30 * time.Second); !blocked || retry != 30*time.Second {
		t.Errorf("peeking recorded an attempt: %v, %s", blocked, retry)
	}
	if blocked, _ := peek(time.Minute); blocked {
		t.Error("still blocked once the first attempt left the window")
	}
	if _, _, err := db.ThrottlePeek(ctx, key, t0, time.Minute, 0); err == nil {
		t.Error("limit 0 accepted")
	}
}
