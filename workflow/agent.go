package workflow

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// The provider agents' side of the workflow (docs/agent.md): heartbeats,
// the reports on assignments, and the long-poll that hands an agent its
// assignments as soon as they change.

// measureTick is the periodic part of the SLA measured from the provider
// agents' heartbeats (store.MeasureHosts): silent hosts open host
// failures, outages end with their pieces, and ended outages become
// incidents reported by the agent. It runs after the reservations move on
// and before settlement, so an outage that lasts to a rental's end is on
// the reservation when it settles.
func (s *Service) measureTick(ctx context.Context, now time.Time) {
	incs, err := s.db.MeasureHosts(ctx, now)
	if err != nil {
		s.log.Error("background: measure hosts", "err", err)
		return
	}
	for _, i := range incs {
		s.log.Info("measured outage recorded", "reservation_id", i.ReservationID, "piece_id", i.PieceID, "incident_id", i.ID,
			"kind", string(i.Kind), "devices", i.DevicesAffected, "start", i.Start, "end", i.End)
	}
}

// agentState is what the Service keeps in memory for the agents: the
// long-polls waiting on each offer (agentHub) and the heartbeats absorbed
// since each node's last write (seenCache).
type agentState struct {
	hub  agentHub
	seen seenCache
	// cache: the host tokens and assignments served from memory
	// (agentcache.go).
	cache agentCache
	// reads holds the agentReadSlots taken.
	reads chan struct{}
	// writeAll: absorb nothing (Config.WriteEveryHeartbeat).
	writeAll bool
	// writing is the heartbeats being written in full now, waiting for
	// the writer or in its transaction (ErrHeartbeatsBehind).
	writing atomic.Int64
	counts  struct{ heartbeats, written, absorbed, flushes, flushed, reports, refused atomic.Int64 }
}

// maxHeartbeatWrites is how many heartbeats may wait to be written in
// full at once (one batch of the store's heartbeat group commit); beyond
// it a heartbeat that needs a write is refused (ErrHeartbeatsBehind)
// rather than left to time out in the writer's queue, with the payments
// and bookings queued behind it.
const maxHeartbeatWrites = 64

// HeartbeatRetryAfter is when an agent whose heartbeat was refused because
// the writer is behind is asked to send it again (the agent adds a random
// share of it, so that agents refused together do not come back
// together): far inside the grace period.
const HeartbeatRetryAfter = 5 * time.Second

// ErrHeartbeatsBehind refuses a heartbeat that needs a write while
// maxHeartbeatWrites others wait for the database's writer (answered 429
// with Retry-After: HeartbeatRetryAfter). Nothing of it is recorded; the
// agent sends it again, later.
var ErrHeartbeatsBehind = &market.Error{Code: market.CodeRateLimited,
	Message: "The marketplace is writing many heartbeats just now; send this one again after the Retry-After seconds."}

func newAgentState(writeAll bool) *agentState {
	return &agentState{hub: agentHub{waiters: map[int64]map[chan struct{}]struct{}{}},
		seen: seenCache{nodes: map[int64]*seenNode{}, pending: map[int64]*store.HeartbeatSeen{}}, cache: newAgentCache(),
		reads: make(chan struct{}, agentReadSlots), writeAll: writeAll}
}

// AgentCounts counts, since the start, what the agents' requests cost the
// database: heartbeats received; those written in full (one write
// transaction each) and those absorbed; the batches of absorbed ones
// written (one transaction each) and the nodes they held; the reports on
// assignments (installed, removed, acceptance: one transaction each).
// Refused counts the heartbeats refused because the writer was behind
// (ErrHeartbeatsBehind), counted in Heartbeats too.
type AgentCounts struct {
	Heartbeats, Written, Absorbed, Flushes, Flushed, Reports, Refused int64
}

// WritesPerHeartbeat is the write transactions per heartbeat (full writes
// and batches), reports apart.
func (c AgentCounts) WritesPerHeartbeat() float64 {
	if c.Heartbeats == 0 {
		return 0
	}
	return float64(c.Written+c.Flushes) / float64(c.Heartbeats)
}

// Sub is the counts between before and c.
func (c AgentCounts) Sub(before AgentCounts) AgentCounts {
	return AgentCounts{c.Heartbeats - before.Heartbeats, c.Written - before.Written, c.Absorbed - before.Absorbed,
		c.Flushes - before.Flushes, c.Flushed - before.Flushed, c.Reports - before.Reports, c.Refused - before.Refused}
}

// AgentCounts returns the counts so far.
func (s *Service) AgentCounts() AgentCounts {
	c := &s.agent.counts
	return AgentCounts{c.heartbeats.Load(), c.written.Load(), c.absorbed.Load(), c.flushes.Load(), c.flushed.Load(), c.reports.Load(),
		c.refused.Load()}
}

// RecordHeartbeat records a heartbeat of the token's node (authenticated
// just now) received at the service's now, and reports whether it was
// accepted (not a replay). A heartbeat that reports exactly what the
// node's previous one did, one sequence number later and well within the
// grace period, of a node with every device healthy and as listed, writes
// nothing: it is absorbed in memory (its last-seen time and sequence
// number) and written with the others in one transaction at most
// heartbeatFlushEvery later (FlushHeartbeats). A node's first heartbeat
// heard since this replica started is compared with the store's last one
// (one read, storedSeen), so after a restart a fleet that changed nothing
// is absorbed rather than written node by node. A gap in the sequence
// numbers (heartbeats lost, or sent to another replica) costs one read:
// absorbed still when the store holds no later heartbeat of the node.
// Anything else — a change, a long silence, a node with a problem to
// measure — is written at once (store.RecordHeartbeatRun), unless
// maxHeartbeatWrites others are being written: then it is refused with
// ErrHeartbeatsBehind and nothing of it is kept.
func (s *Service) RecordHeartbeat(ctx context.Context, tok store.HostToken, hb market.Heartbeat) (bool, error) {
	now := s.now()
	digest := heartbeatDigest(hb)
	s.agent.counts.heartbeats.Add(1)
	outcome := seenWrite
	if !s.agent.writeAll {
		outcome = s.agent.seen.absorb(tok.ID, hb.Seq, digest, now, func() string { return devicesJSON(hb) })
	}
	if outcome == seenUnknown {
		// The node's first heartbeat heard here since the start: the
		// store's last heartbeat of it, read once, stands for one written
		// here, so a restart's first heartbeats that change nothing are
		// absorbed rather than written one by one.
		outcome = seenWrite
		if n, ok := s.storedSeen(ctx, tok); ok {
			s.agent.seen.seed(tok.ID, n)
			outcome = s.agent.seen.absorb(tok.ID, hb.Seq, digest, now, func() string { return devicesJSON(hb) })
		}
		if outcome == seenUnknown {
			outcome = seenWrite
		}
	}
	if outcome == seenCheck {
		// Heartbeats were lost in between (timed out, say), or went to
		// another replica: one read tells which, instead of a write.
		outcome = seenWrite
		if n, ok := s.agent.seen.node(tok.ID); ok {
			if last, err := s.db.HostLastSeq(ctx, n.offerID, n.node); err == nil && last <= n.seq {
				outcome = s.agent.seen.absorbAfterGap(tok.ID, n.seq, hb.Seq, now)
			}
		}
	}
	switch outcome {
	case seenReplay:
		return false, nil
	case seenAbsorbed:
		s.agent.counts.absorbed.Add(1)
		if batch := s.agent.seen.due(time.Now()); batch != nil {
			s.flushSeen(ctx, batch)
		}
		return true, nil
	}
	if s.agent.writing.Add(1) > maxHeartbeatWrites {
		s.agent.writing.Add(-1)
		s.agent.counts.refused.Add(1)
		return false, ErrHeartbeatsBehind
	}
	defer s.agent.writing.Add(-1)
	// What this replica absorbed of the node goes first, so that the
	// write below measures from the node's true last heartbeat.
	if p := s.agent.seen.takeNode(tok.ID); p != nil {
		s.flushSeen(ctx, []store.HeartbeatSeen{*p})
	}
	s.agent.counts.written.Add(1)
	rec, err := s.db.RecordHeartbeatRun(ctx, tok.ID, hb, now)
	if err != nil {
		s.agent.seen.forget(tok.ID)
		return false, err
	}
	if !rec.Accepted {
		s.agent.seen.forget(tok.ID)
		return false, nil
	}
	s.agent.seen.remember(tok.ID, seenNode{digest: digest, seq: hb.Seq, at: now, written: now, offerID: rec.OfferID, node: rec.Node,
		runID: rec.RunID, quiet: quietHeartbeat(hb, rec.HardwareDiffers)})
	return true, nil
}

// storedSeen is the store's last heartbeat of the token's node as the seen
// cache keeps one written here; false when the node never reported, or
// its token is ahead of its status (a heartbeat being written elsewhere),
// or the read failed: then the heartbeat is written in full.
func (s *Service) storedSeen(ctx context.Context, tok store.HostToken) (seenNode, bool) {
	release, err := s.agentRead(ctx)
	if err != nil {
		return seenNode{}, false
	}
	st, err := s.db.NodeHeartbeatState(ctx, tok.ID)
	release()
	if err != nil || !st.Reported || st.Token.LastSeq != st.Status.LastSeq {
		return seenNode{}, false
	}
	h := st.Status
	last := market.Heartbeat{Seq: h.LastSeq, AgentVersion: h.AgentVersion, Probe: h.Probe, Error: h.ProbeError, Isolation: h.Isolation, Devices: h.Devices}
	return seenNode{digest: heartbeatDigest(last), seq: h.LastSeq, at: h.LastHeartbeatAt, written: h.LastHeartbeatAt, offerID: h.OfferID, node: h.Node,
		runID: st.RunID, quiet: quietHeartbeat(last, h.HardwareDiffers)}, true
}

// FlushHeartbeats writes the heartbeats absorbed so far (RecordHeartbeat).
// The background loop of every replica calls it every round and on the way
// out, so a node whose heartbeats stop is seen by the store as it was last
// heard, at most a round late.
func (s *Service) FlushHeartbeats(ctx context.Context) {
	if batch := s.agent.seen.takeAll(); len(batch) > 0 {
		s.flushSeen(ctx, batch)
	}
}

// flushSeen writes a batch of absorbed heartbeats; a failed write forgets
// its nodes, whose next heartbeats are then written in full.
func (s *Service) flushSeen(ctx context.Context, batch []store.HeartbeatSeen) {
	s.agent.counts.flushes.Add(1)
	s.agent.counts.flushed.Add(int64(len(batch)))
	err := s.db.FlushHeartbeatsSeen(context.WithoutCancel(ctx), batch)
	s.agent.seen.flushed()
	if err != nil {
		s.log.Error("heartbeats seen not written; their nodes' next heartbeats are written in full", "nodes", len(batch), "err", err)
		for _, b := range batch {
			s.agent.seen.forget(b.TokenID)
		}
	}
}

// heartbeatDigest names what a heartbeat reports, less its sequence
// number, its sending time and the devices' telemetry (temperature,
// utilisation, power: shown on the hosts page, judged by nothing, and
// refreshed every telemetryEvery).
func heartbeatDigest(hb market.Heartbeat) [sha256.Size]byte {
	devices := make([]market.HostDevice, len(hb.Devices))
	for i, d := range hb.Devices {
		d.TemperatureC, d.UtilizationPct, d.PowerW = 0, 0, 0
		devices[i] = d
	}
	b, _ := json.Marshal(struct {
		V, P, E, I string
		D          []market.HostDevice
	}{hb.AgentVersion, hb.Probe, hb.Error, string(hb.Isolation), devices})
	return sha256.Sum256(b)
}

// telemetryEvery is how often an absorbed heartbeat carries its devices
// into the batch write (their telemetry: temperature, utilisation, power),
// so the hosts page shows them at most this old (and a flush late).
const telemetryEvery = 5 * time.Minute

// devicesJSON is the heartbeat's devices as the hosts table keeps them.
func devicesJSON(hb market.Heartbeat) string {
	if hb.Devices == nil {
		return "[]"
	}
	b, _ := json.Marshal(hb.Devices)
	return string(b)
}

// quietHeartbeat reports whether a heartbeat leaves nothing for the SLA to
// measure on any piece of its node: devices reported, every one healthy,
// no probe error, the hardware as listed. Only such a node's repeats are
// absorbed.
func quietHeartbeat(hb market.Heartbeat, hardwareDiffers string) bool {
	return len(hb.Devices) > 0 && hb.HealthyDevices() == len(hb.Devices) && hb.Error == "" && hardwareDiffers == ""
}

// heartbeatFlushEvery is how long an absorbed heartbeat may wait to be
// written: far below the grace period (market.HeartbeatGrace), so a node
// is never measured silent for what sat in memory.
const heartbeatFlushEvery = 2 * time.Second

// seenCache holds, per host token, the last heartbeat this replica wrote
// and the ones absorbed since.
type seenCache struct {
	mu      sync.Mutex
	nodes   map[int64]*seenNode
	pending map[int64]*store.HeartbeatSeen
	// since is when (wall clock) the oldest pending entry was absorbed;
	// flushing that a caller is writing a batch.
	since    time.Time
	flushing bool
}

// seenNode is the last heartbeat of a node written or absorbed here.
type seenNode struct {
	digest  [sha256.Size]byte
	seq     int64
	at      time.Time // service clock
	written time.Time // of the devices' last write (telemetryEvery), service clock
	offerID int64
	node    int
	runID   int64
	quiet   bool
}

type seenOutcome int

const (
	seenWrite    seenOutcome = iota // write it in full
	seenAbsorbed                    // absorbed: accepted, nothing written now
	seenReplay                      // a sequence number already seen here: not accepted
	seenCheck                       // absorbable but for a gap in the sequence numbers: check the store
	seenUnknown                     // nothing known of the node here: compare with the store's last heartbeat
)

// absorb decides a heartbeat's fate against the node's last one here;
// when the node's telemetry is due (telemetryEvery), an absorbed heartbeat
// carries devices() into the batch.
func (c *seenCache) absorb(tokenID, seq int64, digest [sha256.Size]byte, now time.Time, devices func() string) seenOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[tokenID]
	switch {
	case n == nil:
		return seenUnknown
	case seq <= n.seq:
		return seenReplay
	case digest != n.digest || !n.quiet || now.Before(n.at) ||
		now.Sub(n.at) >= market.HeartbeatGrace(market.HeartbeatInterval)/2:
		return seenWrite
	case seq != n.seq+1:
		return seenCheck
	}
	c.absorbLocked(tokenID, n, seq, now)
	if now.Sub(n.written) >= telemetryEvery {
		c.pending[tokenID].Devices = devices()
		n.written = now
	}
	return seenAbsorbed
}

// node returns what is known of a node.
func (c *seenCache) node(tokenID int64) (seenNode, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[tokenID]
	if n == nil {
		return seenNode{}, false
	}
	return *n, true
}

// absorbAfterGap absorbs a heartbeat after a gap the store showed no other
// replica filled, unless the node changed here meanwhile (its last seq is
// no longer prev).
func (c *seenCache) absorbAfterGap(tokenID, prev, seq int64, now time.Time) seenOutcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[tokenID]
	switch {
	case n == nil || n.seq != prev || market.SeqProblem(n.seq, seq, now) != "":
		return seenWrite
	case seq <= n.seq:
		return seenReplay
	}
	c.absorbLocked(tokenID, n, seq, now)
	return seenAbsorbed
}

// absorbLocked adds a heartbeat to the node's pending entry; c.mu is held.
func (c *seenCache) absorbLocked(tokenID int64, n *seenNode, seq int64, now time.Time) {
	n.seq, n.at = seq, now
	p := c.pending[tokenID]
	if p == nil {
		if len(c.pending) == 0 {
			c.since = time.Now()
		}
		p = &store.HeartbeatSeen{TokenID: tokenID, OfferID: n.offerID, Node: n.node, RunID: n.runID}
		c.pending[tokenID] = p
	}
	p.Seq, p.At = seq, now
	p.Count++
}

// due takes the pending batch when its oldest entry has waited
// heartbeatFlushEvery and no other caller is writing one; the caller
// writes it and calls flushed.
func (c *seenCache) due(wall time.Time) []store.HeartbeatSeen {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flushing || len(c.pending) == 0 || wall.Sub(c.since) < heartbeatFlushEvery {
		return nil
	}
	c.flushing = true
	return c.takeLocked()
}

// takeAll takes every pending entry; the caller writes them and calls
// flushed.
func (c *seenCache) takeAll() []store.HeartbeatSeen {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return nil
	}
	c.flushing = true
	return c.takeLocked()
}

func (c *seenCache) takeLocked() []store.HeartbeatSeen {
	out := make([]store.HeartbeatSeen, 0, len(c.pending))
	for _, p := range c.pending {
		out = append(out, *p)
	}
	clear(c.pending)
	return out
}

// flushed ends a batch's write.
func (c *seenCache) flushed() {
	c.mu.Lock()
	c.flushing = false
	c.mu.Unlock()
}

// takeNode takes one node's pending entry, nil when none.
func (c *seenCache) takeNode(tokenID int64) *store.HeartbeatSeen {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pending[tokenID]
	delete(c.pending, tokenID)
	return p
}

// remember notes the heartbeat just written for a node.
func (c *seenCache) remember(tokenID int64, n seenNode) {
	c.mu.Lock()
	c.nodes[tokenID] = &n
	c.mu.Unlock()
}

// seed notes the store's last heartbeat of a node (storedSeen) unless one
// was written or absorbed here meanwhile.
func (c *seenCache) seed(tokenID int64, n seenNode) {
	c.mu.Lock()
	if c.nodes[tokenID] == nil {
		c.nodes[tokenID] = &n
	}
	c.mu.Unlock()
}

// forget drops what is known of a node: its next heartbeat is compared
// with the store's again.
func (c *seenCache) forget(tokenID int64) {
	c.mu.Lock()
	delete(c.nodes, tokenID)
	c.mu.Unlock()
}

// RecordInstalled records the agent's report that the buyer's keys are in
// place on the token's node for a piece (store.RecordInstalled).
func (s *Service) RecordInstalled(ctx context.Context, tok store.HostToken, pieceID int64, conn market.Connection) (store.PieceAccess, error) {
	s.agent.counts.reports.Add(1)
	a, err := s.db.RecordInstalled(ctx, tok.ID, pieceID, conn, s.now())
	s.agent.cache.dropOffers([]int64{tok.OfferID})
	return a, err
}

// RecordRemoved records the agent's confirmation that the buyer's keys
// are gone from the token's node (store.RecordRemoved).
func (s *Service) RecordRemoved(ctx context.Context, tok store.HostToken, pieceID int64, removedAt time.Time) (store.PieceAccess, error) {
	s.agent.counts.reports.Add(1)
	a, err := s.db.RecordRemoved(ctx, tok.ID, pieceID, removedAt, s.now())
	s.agent.cache.dropOffers([]int64{tok.OfferID})
	return a, err
}

// RecordRemoveFailed records that the agent could not end a piece's
// access on the token's node (store.RecordRemoveFailed).
func (s *Service) RecordRemoveFailed(ctx context.Context, tok store.HostToken, pieceID int64, msg string) error {
	s.agent.counts.reports.Add(1)
	return s.db.RecordRemoveFailed(ctx, tok.ID, pieceID, msg, s.now())
}

// RecordAcceptance records the acceptance test of a piece on the token's
// node (store.RecordAcceptance).
func (s *Service) RecordAcceptance(ctx context.Context, tok store.HostToken, pieceID int64, res market.AcceptanceResult) (store.AcceptanceRecord, error) {
	s.agent.counts.reports.Add(1)
	rec, err := s.db.RecordAcceptance(ctx, tok.ID, pieceID, res, s.now())
	s.agent.cache.dropOffers([]int64{tok.OfferID})
	return rec, err
}

// NodeAssignments are a node's assignments at a moment and their version.
type NodeAssignments struct {
	At          time.Time
	Assignments []store.Assignment
	Version     string
}

// Assignments returns the token's node's assignments now (from memory
// when nothing about the node changed since they were last read:
// agentcache.go).
func (s *Service) Assignments(ctx context.Context, tok store.HostToken) (NodeAssignments, error) {
	na, _, err := s.nodeAssignments(ctx, tok, s.now())
	return na, err
}

// WaitAssignments is the long-poll of docs/agent.md: it returns the token's
// node's assignments as soon as their version differs from known, or after
// wait with changed false. It wakes when a change is committed to the
// node's offer — a payment, a cancellation (wakeAgents, in this process),
// or any change heard on the change feed from another replica (Follow) —
// and when a piece on the node starts or ends, and reads the assignments
// again then.
func (s *Service) WaitAssignments(ctx context.Context, tok store.HostToken, known string, wait time.Duration) (na NodeAssignments, changed bool, err error) {
	deadline := time.Now().Add(wait)
	for {
		// Subscribed before reading, so a change committed after the read
		// wakes it.
		woken, cancel := s.agent.hub.subscribe(tok.OfferID)
		now := s.now()
		var next time.Time
		na, next, err = s.nodeAssignments(ctx, tok, now)
		if err != nil {
			cancel()
			return NodeAssignments{}, false, err
		}
		left := time.Until(deadline)
		if na.Version != known || left <= 0 {
			cancel()
			return na, na.Version != known, nil
		}
		d, last := left, true
		if !next.IsZero() && next.Sub(now) < left {
			// Just past the boundary, so the piece has started or ended
			// when read.
			d, last = next.Sub(now)+10*time.Millisecond, false
		}
		t := time.NewTimer(d)
		select {
		case <-woken:
		case <-t.C:
			if last {
				cancel()
				return na, false, nil
			}
		case <-ctx.Done():
			t.Stop()
			cancel()
			return NodeAssignments{}, false, ctx.Err()
		}
		t.Stop()
		cancel()
	}
}

// assignmentsVersion names a list of assignments: a digest of everything
// the agent is told.
func assignmentsVersion(as []store.Assignment) string {
	b, _ := json.Marshal(as)
	sum := sha256.Sum256(b)
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// wakeAgents wakes the long-polls of the nodes of a reservation's offers
// after a change to it committed here (a payment, a cancellation). Other
// replicas hear it on the change feed (Follow). It reads the reservation
// only when some agent waits.
func (s *Service) wakeAgents(ctx context.Context, reservationID int64) {
	if !s.agent.hub.any() {
		return
	}
	r, err := s.db.FindReservation(ctx, reservationID)
	if err != nil {
		s.log.Warn("agents not woken; they hear of the change at their next heartbeat", "reservation_id", reservationID, "err", err)
		return
	}
	s.wakeAgentsOf(r)
}

// wakeAgentsOf is wakeAgents with the reservation at hand.
func (s *Service) wakeAgentsOf(r market.Reservation) {
	for _, p := range r.Pieces {
		s.agent.hub.wake(p.OfferID)
	}
}

// agentHub holds the long-polls waiting, by offer.
type agentHub struct {
	mu      sync.Mutex
	waiters map[int64]map[chan struct{}]struct{}
	count   int
}

// subscribe returns a channel that is closed at the offer's next change,
// and the function that stops waiting on it.
func (h *agentHub) subscribe(offerID int64) (<-chan struct{}, func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	if h.waiters[offerID] == nil {
		h.waiters[offerID] = map[chan struct{}]struct{}{}
	}
	h.waiters[offerID][ch] = struct{}{}
	h.count++
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		if _, ok := h.waiters[offerID][ch]; ok {
			delete(h.waiters[offerID], ch)
			h.count--
			if len(h.waiters[offerID]) == 0 {
				delete(h.waiters, offerID)
			}
		}
		h.mu.Unlock()
	}
}

// wake wakes every long-poll waiting on the offer.
func (h *agentHub) wake(offerID int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.waiters[offerID] {
		close(ch)
		h.count--
	}
	delete(h.waiters, offerID)
}

// wakeAll wakes every long-poll (the change feed rejoined: changes may
// have been missed).
func (h *agentHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, ws := range h.waiters {
		for ch := range ws {
			close(ch)
		}
		delete(h.waiters, id)
	}
	h.count = 0
}

// any reports whether some long-poll waits.
func (h *agentHub) any() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.count > 0
}

// AgentsWaiting is how many long-polls wait now (for the operators'
// metrics and the load tool).
func (s *Service) AgentsWaiting() int {
	s.agent.hub.mu.Lock()
	defer s.agent.hub.mu.Unlock()
	return s.agent.hub.count
}
