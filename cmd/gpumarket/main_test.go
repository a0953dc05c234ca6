package main

import (
	"bytes"
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/store"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestSessionKeyIsGeneratedOnceAndKept(t *testing.T) {
	dir := t.TempDir()
	k1, err := loadSessionKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := loadSessionKey("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(k1) < 32 || !bytes.Equal(k1, k2) {
		t.Fatalf("key not kept across restarts: %x vs %x", k1, k2)
	}
	if _, err := loadSessionKey("abcd", dir); err == nil {
		t.Fatal("a 2-byte configured key was accepted")
	}
}

func TestAdminCreate(t *testing.T) {
	db := filepath.Join(t.TempDir(), "m.db")
	var out bytes.Buffer
	err := run(context.Background(), []string{"admin", "create", "-db", db, "-email", "Ops@Example.com", "-name", "Ops"},
		env(map[string]string{"GPUMARKET_ADMIN_PASSWORD": "a long admin passphrase"}), strings.NewReader(""), &out, &out)
	if err != nil {
		t.Fatalf("admin create: %v\n%s", err, out.String())
	}
	s, err := store.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	u, _, err := s.FindUserByEmail(context.Background(), "ops@example.com")
	if err != nil || !u.IsAdmin {
		t.Fatalf("admin not stored: %+v %v", u, err)
	}
	// A short password from standard input is refused with the reason.
	err = run(context.Background(), []string{"admin", "create", "-db", db, "-email", "two@example.com"},
		env(nil), strings.NewReader("short\n"), &out, &out)
	if err == nil || !strings.Contains(err.Error(), "10 characters") {
		t.Fatalf("short password: %v", err)
	}
}

func TestServeStopsGracefully(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut lockedBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve", "-addr", "127.0.0.1:0", "-db", filepath.Join(dir, "m.db")}, env(nil), strings.NewReader(""), &out, &errOut)
	}()
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "listening"); {
		if time.Now().After(deadline) {
			t.Fatalf("serve never listened:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A request's log line waits in the log buffer; the stop writes it out.
	addr := strings.Fields(strings.TrimPrefix(out.String(), "gpumarket listening on "))[0]
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v\n%s", err, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
	for _, want := range []string{"path=/healthz", "msg=stopped", `msg="background work stopped"`} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("%s missing from the log after the stop:\n%s", want, errOut.String())
		}
	}
}

func TestUnknownCommand(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"frobnicate"}, env(nil), strings.NewReader(""), &out, &out); err == nil {
		t.Fatal("unknown command accepted")
	}
}

// lockedBuffer is a bytes.Buffer safe for the server writing while the test reads.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
