package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// agentState is what the agent keeps across restarts (-state): the last
// heartbeat's sequence number and what it did for each piece, so that a
// restarted agent neither reuses a sequence number nor installs keys twice.
type agentState struct {
	Seq    int64                `json:"seq"`
	Pieces map[int64]pieceState `json:"pieces"`
}

// pieceState is what the agent did for one piece.
type pieceState struct {
	ReservationID int64     `json:"reservation_id"`
	Devices       int       `json:"devices"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	// KeysSHA256 identifies the installed keys: a piece whose keys change
	// (a buyer adds one) is installed again.
	KeysSHA256  string     `json:"keys_sha256,omitempty"`
	InstalledAt time.Time  `json:"installed_at,omitzero"`
	Connection  connection `json:"connection,omitzero"`
	// Reported is the connection the server accepted; "installed" is
	// posted while it differs from Connection.
	Reported  connection `json:"reported,omitzero"`
	RemovedAt time.Time  `json:"removed_at,omitzero"`
	// RemoveFailed is the last removal failure the server accepted, so
	// each is reported once, not on every retry.
	RemoveFailed string `json:"remove_failed,omitempty"`
	// RemovalReported is set once the server accepted "removed".
	RemovalReported bool `json:"removal_reported,omitempty"`
	// Acceptance is the acceptance test's result, kept so the test runs
	// once per piece; AcceptanceReported once the server accepted it.
	Acceptance         *acceptanceReport `json:"acceptance,omitempty"`
	AcceptanceReported bool              `json:"acceptance_reported,omitempty"`
	// Container is the piece's container in container mode (container.go).
	Container *containerState `json:"container,omitempty"`
}

// installed reports whether the piece's keys are in place.
func (p pieceState) installed() bool {
	return !p.InstalledAt.IsZero() && p.RemovedAt.IsZero()
}

// stateFile is the agent's state and the file that keeps it. Every change
// is written at once (write and rename), so a crash loses nothing already
// done. Its methods are safe for concurrent use.
type stateFile struct {
	path string
	mu   sync.Mutex
	st   agentState
}

// loadState reads the state file at path. A missing file starts a new
// state whose sequence numbers begin at the current Unix time in
// milliseconds: an agent whose state was lost still sends numbers above
// those it sent before, which the server would otherwise ignore as
// replays. A file that cannot be read is an error: starting afresh would
// forget installed keys.
func loadState(path string, now time.Time) (*stateFile, error) {
	s := &stateFile{path: path, st: agentState{Pieces: map[int64]pieceState{}}}
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		s.st.Seq = now.UnixMilli()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("state: create the directory of %s: %w", path, err)
		}
		if err := s.save(); err != nil {
			return nil, err
		}
		return s, nil
	case err != nil:
		return nil, fmt.Errorf("state: read %s: %w", path, err)
	}
	if err := json.Unmarshal(b, &s.st); err != nil {
		return nil, fmt.Errorf("state: %s is not a state file the agent wrote (%v); move it away to start afresh, "+
			"after removing any buyer keys it installed by hand", path, err)
	}
	if s.st.Seq < 0 {
		return nil, fmt.Errorf("state: %s has a negative sequence number", path)
	}
	if s.st.Pieces == nil {
		s.st.Pieces = map[int64]pieceState{}
	}
	return s, nil
}

// nextSeq takes the next heartbeat sequence number and saves it before the
// heartbeat goes out, so it is never used twice.
func (s *stateFile) nextSeq() (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.Seq++
	return s.st.Seq, s.saveLocked()
}

// seq is the last sequence number taken.
func (s *stateFile) seq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.Seq
}

// piece returns what the agent did for a piece.
func (s *stateFile) piece(id int64) (pieceState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.st.Pieces[id]
	return p, ok
}

// pieces returns a copy of every piece's state.
func (s *stateFile) pieces() map[int64]pieceState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.st.Pieces)
}

// update changes a piece's state (a new one starts empty) and saves.
func (s *stateFile) update(id int64, change func(p *pieceState)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.st.Pieces[id]
	change(&p)
	s.st.Pieces[id] = p
	return s.saveLocked()
}

// forget drops pieces and saves.
func (s *stateFile) forget(ids ...int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		delete(s.st.Pieces, id)
	}
	return s.saveLocked()
}

// save writes the state.
func (s *stateFile) save() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saveLocked()
}

func (s *stateFile) saveLocked() error {
	b, err := json.MarshalIndent(s.st, "", "  ")
	if err != nil {
		return fmt.Errorf("state: %w", err)
	}
	if err := writeFileAtomic(s.path, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("state: %w", err)
	}
	return nil
}
