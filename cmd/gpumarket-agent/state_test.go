package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lib", "state.json")
	s, err := loadState(path, t0)
	if err != nil {
		t.Fatal(err)
	}
	// A new state starts its sequence at the time in milliseconds, so an
	// agent whose state was lost still sends higher numbers than before.
	if s.seq() != t0.UnixMilli() {
		t.Errorf("new state seq %d, want %d", s.seq(), t0.UnixMilli())
	}
	first, err := s.nextSeq()
	if err != nil || first != t0.UnixMilli()+1 {
		t.Fatalf("next seq %d, %v", first, err)
	}
	r := acceptanceReport{Metric: "bf16_tflops", PerDevice: []float64{1.5}}
	if err := s.update(31, func(p *pieceState) {
		p.ReservationID, p.End, p.InstalledAt, p.Acceptance = 12, t0.Add(time.Hour), t0, &r
		p.Connection = connection{Host: "h", Port: 22, User: "gpu"}
	}); err != nil {
		t.Fatal(err)
	}
	if err := s.update(32, func(p *pieceState) { p.RemovedAt = t0 }); err != nil {
		t.Fatal(err)
	}
	if err := s.forget(32); err != nil {
		t.Fatal(err)
	}

	again, err := loadState(path, t0.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if again.seq() != first {
		t.Errorf("seq after reload %d, want %d", again.seq(), first)
	}
	p, ok := again.piece(31)
	if !ok || p.ReservationID != 12 || !p.End.Equal(t0.Add(time.Hour)) || !p.installed() || p.Connection.User != "gpu" ||
		p.Acceptance == nil || p.Acceptance.PerDevice[0] != 1.5 {
		t.Errorf("piece 31 after reload: %+v", p)
	}
	if _, ok := again.piece(32); ok {
		t.Error("a forgotten piece came back")
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("state file mode %v, %v; want 0600", fi.Mode(), err)
	}
	if dir, err := os.Stat(filepath.Dir(path)); err != nil || dir.Mode().Perm() != 0o700 {
		t.Errorf("state directory mode %v, %v; want 0700", dir.Mode(), err)
	}
}

func TestCorruptStateIsNotReplaced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	if err := os.WriteFile(path, []byte(`{"seq": 12, "pieces": {"31": `), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := loadState(path, t0)
	if err == nil || !strings.Contains(err.Error(), "move it away") {
		t.Fatalf("corrupt state: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != `{"seq": 12, "pieces": {"31": ` {
		t.Errorf("the corrupt file was changed: %q", b)
	}
}
