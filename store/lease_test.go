package store

import (
	"context"
	"testing"
	"time"
)

func TestLeaseOneHolderUntilItExpires(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	ttl := 10 * time.Second
	take := func(holder string, at time.Time) bool {
		t.Helper()
		ok, err := db.TakeLease(ctx, "background", holder, at, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	holder := func(at time.Time) string {
		t.Helper()
		h, err := db.LeaseHolder(ctx, "background", at)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if h := holder(t0); h != "" {
		t.Fatalf("holder before anyone took it = %q", h)
	}
	if !take("a", t0) || take("b", t0.Add(time.Second)) {
		t.Fatal("a should take the free lease and b be refused while a holds it")
	}
	if !take("a", t0.Add(9*time.Second)) { // renewed: now until t0+19s
		t.Fatal("a could not renew its own lease")
	}
	if take("b", t0.Add(18*time.Second)) || holder(t0.Add(18*time.Second)) != "a" {
		t.Fatal("b took a renewed lease before it expired")
	}
	if !take("b", t0.Add(19*time.Second)) || holder(t0.Add(19*time.Second)) != "b" {
		t.Fatal("b could not take the lease once a's expired")
	}
	if take("a", t0.Add(20*time.Second)) {
		t.Fatal("a took back b's live lease")
	}
	// Another lease name is independent.
	if ok, err := db.TakeLease(ctx, "other", "a", t0.Add(20*time.Second), ttl); err != nil || !ok {
		t.Fatalf("TakeLease(other) = %v, %v", ok, err)
	}
	// Released, it is free at once; releasing someone else's does nothing.
	if err := db.ReleaseLease(ctx, "background", "a"); err != nil {
		t.Fatal(err)
	}
	if holder(t0.Add(21*time.Second)) != "b" {
		t.Fatal("a released b's lease")
	}
	if err := db.ReleaseLease(ctx, "background", "b"); err != nil {
		t.Fatal(err)
	}
	if holder(t0.Add(21*time.Second)) != "" || !take("a", t0.Add(21*time.Second)) {
		t.Fatal("a released lease was not free at once")
	}
}
