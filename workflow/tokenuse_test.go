package workflow

import (
	"context"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// TestTokenUseIsWrittenOffTheRequest: authenticating with an API token
// writes nothing; its use is written by FlushTokenUses (at the time of the
// request), again only once the recorded use is a minute old, and by the
// background loop on its way out.
func TestTokenUseIsWrittenOffTheRequest(t *testing.T) {
	ctx := context.Background()
	wf, db, now := newAccounts(t)
	// Created as cmd creates accounts, its address confirmed (API tokens
	// need it).
	u, err := db.CreateUser(ctx, market.User{Email: "ada@example.com", DisplayName: "Ada", IsBuyer: true}, []byte("x"), t0)
	if err != nil {
		t.Fatal(err)
	}
	id := u.ID
	tok, raw, err := wf.CreateAPIToken(ctx, id, "ci", "read")
	if err != nil {
		t.Fatal(err)
	}
	recorded := func() time.Time {
		t.Helper()
		ts, err := db.ListAPITokens(ctx, id)
		if err != nil || len(ts) != 1 || ts[0].ID != tok.ID {
			t.Fatalf("ListAPITokens = %+v, %v", ts, err)
		}
		return ts[0].LastUsedAt
	}
	use := func(at time.Time) {
		t.Helper()
		*now = at
		if got, _, err := wf.Authenticate(ctx, raw); err != nil || got.ID != tok.ID {
			t.Fatalf("Authenticate = %+v, %v", got, err)
		}
	}

	first := t0.Add(10 * time.Second)
	use(first)
	if lu := recorded(); !lu.IsZero() {
		t.Fatalf("last use %s written on the request", lu)
	}
	use(first.Add(500 * time.Millisecond))
	wf.FlushTokenUses(ctx)
	if lu := recorded(); !lu.Equal(first) {
		t.Fatalf("last use %s after the flush, want %s", lu, first)
	}
	use(first.Add(59 * time.Second)) // within a minute of the recorded use
	wf.FlushTokenUses(ctx)
	if lu := recorded(); !lu.Equal(first) {
		t.Fatalf("last use %s after a use 59 s later, want it unchanged", lu)
	}
	later := first.Add(61 * time.Second)
	use(later)
	wf.FlushTokenUses(ctx)
	if lu := recorded(); !lu.Equal(later) {
		t.Fatalf("last use %s after a use 61 s later, want %s", lu, later)
	}

	last := later.Add(2 * time.Minute)
	use(last)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); wf.Run(runCtx, time.Hour) }()
	stop()
	<-done
	if lu := recorded(); !lu.Equal(last) {
		t.Fatalf("last use %s after the background loop stopped, want %s", lu, last)
	}
}
