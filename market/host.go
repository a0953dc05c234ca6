package market

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The provider agent (docs/agent.md) reports each node of an offer to the
// marketplace with heartbeats. These are the rules about what it reports.

// Timings of the agent protocol, kept together.
const (
	// HeartbeatInterval is how often the agent is asked to send a
	// heartbeat (the response's interval_seconds).
	HeartbeatInterval = 10 * time.Second
	// MinHeartbeatGrace is the least time without heartbeats that counts as
	// a missed host; see HeartbeatGrace.
	MinHeartbeatGrace = 60 * time.Second
	// RemovalDeadline is how long after a rental ends the agent has to
	// confirm that the buyer's keys are gone before the provider and the
	// admins are shown the missing confirmation.
	RemovalDeadline = 10 * time.Minute
	// MaxHeartbeatDevices bounds the devices one heartbeat may report.
	MaxHeartbeatDevices = 64
	// MemoryToleranceBP is how far a device's reported memory may be from
	// the listing's before the hardware differs (5 %).
	MemoryToleranceBP = 500
	// AcceptanceToleranceBP is how far below the guaranteed figure an
	// acceptance result may be on a device before it is underperformance
	// (10 %).
	AcceptanceToleranceBP = 1000
)

// HeartbeatGrace is how long a node may go without a heartbeat before it
// counts as down: three intervals, and at least MinHeartbeatGrace.
func HeartbeatGrace(interval time.Duration) time.Duration {
	return max(3*interval, MinHeartbeatGrace)
}

// HostDevice is one accelerator as the agent's probe reported it. Healthy
// is the probe's judgement (present, no uncorrected ECC errors, required
// fields readable).
type HostDevice struct {
	Index          int     `json:"index"`
	UUID           string  `json:"uuid"`
	Name           string  `json:"name"`
	MemoryMiB      int64   `json:"memory_mib"`
	TemperatureC   int     `json:"temperature_c"`
	UtilizationPct int     `json:"utilization_pct"`
	ECCUncorrected int64   `json:"ecc_uncorrected"`
	PowerW         float64 `json:"power_w"`
	Healthy        bool    `json:"healthy"`
}

// Heartbeat is one report of a node's agent. Seq increases by one per
// heartbeat and survives agent restarts; a heartbeat whose Seq is not above
// the highest seen changes nothing.
type Heartbeat struct {
	Seq          int64
	SentAt       time.Time
	AgentVersion string
	Probe        string
	Devices      []HostDevice
	Error        string // the probe's failure, if any
	// Isolation is how the agent keeps renters of pieces without a
	// container apart; "" when it does not say.
	Isolation Isolation
}

// Isolation is how a node's agent keeps the renters of pieces without a
// container apart (docs/agent.md, "Which mode isolates what").
type Isolation string

// Isolation modes an agent reports.
const (
	// IsolationRentalUsers: each rental is its own Unix user, its keys in
	// a root-owned file, the user and its processes removed at the end.
	IsolationRentalUsers Isolation = "rental_users"
	// IsolationSharedUser: every renter of the node is the same Unix user;
	// buyers are told "shared host user".
	IsolationSharedUser Isolation = "shared_user"
	// IsolationProviderHooks: the provider's own install and remove hooks.
	IsolationProviderHooks Isolation = "provider_hooks"
)

// Label is the isolation as the hosts page says it.
func (i Isolation) Label() string {
	switch i {
	case IsolationRentalUsers:
		return "a Unix user per rental"
	case IsolationSharedUser:
		return "shared host user"
	case IsolationProviderHooks:
		return "the provider's own hooks"
	}
	return "not reported"
}

// HealthyDevices counts the devices the probe judged healthy.
func (hb Heartbeat) HealthyDevices() int {
	n := 0
	for _, d := range hb.Devices {
		if d.Healthy {
			n++
		}
	}
	return n
}

// ValidateHeartbeat checks a heartbeat as the agent sent it and returns an
// invalid *Error naming each bad field. It trims the strings and replaces
// control characters, since they are shown on pages.
func ValidateHeartbeat(hb *Heartbeat) error {
	p := Problems{}
	if hb.Seq < 1 {
		p.Add("seq", "seq must be a positive integer that increases by one per heartbeat.")
	}
	hb.AgentVersion = cleanText(hb.AgentVersion)
	hb.Probe = cleanText(hb.Probe)
	hb.Error = cleanText(hb.Error)
	switch hb.Isolation {
	case IsolationRentalUsers, IsolationSharedUser, IsolationProviderHooks:
	default:
		// A mode this server does not know (a newer agent) is not reported,
		// rather than a heartbeat refused.
		hb.Isolation = ""
	}
	if utf8.RuneCountInString(hb.AgentVersion) > 64 {
		p.Add("agent_version", "agent_version is at most 64 characters.")
	}
	if utf8.RuneCountInString(hb.Probe) > 32 {
		p.Add("probe", "probe is at most 32 characters.")
	}
	if utf8.RuneCountInString(hb.Error) > 1000 {
		p.Add("error", "error is at most 1000 characters.")
	}
	if len(hb.Devices) > MaxHeartbeatDevices {
		p.Add("devices", fmt.Sprintf("A heartbeat reports at most %d devices.", MaxHeartbeatDevices))
	}
	for i := range hb.Devices {
		d := &hb.Devices[i]
		d.Name, d.UUID = cleanText(d.Name), cleanText(d.UUID)
		switch {
		case d.Index < 0 || d.Index >= 1024:
			p.Add("devices", fmt.Sprintf("Device %d: index must be between 0 and 1023.", i))
		case utf8.RuneCountInString(d.Name) > 128 || utf8.RuneCountInString(d.UUID) > 128:
			p.Add("devices", fmt.Sprintf("Device %d: name and uuid are at most 128 characters.", i))
		case d.MemoryMiB < 0 || d.MemoryMiB > 16<<20:
			p.Add("devices", fmt.Sprintf("Device %d: memory_mib is out of range.", i))
		case d.UtilizationPct < 0 || d.UtilizationPct > 100:
			p.Add("devices", fmt.Sprintf("Device %d: utilization_pct must be between 0 and 100.", i))
		case d.ECCUncorrected < 0 || d.PowerW < 0 || math.IsNaN(d.PowerW) || math.IsInf(d.PowerW, 0) || d.PowerW > 100_000:
			p.Add("devices", fmt.Sprintf("Device %d: ecc_uncorrected and power_w must be non-negative numbers.", i))
		}
	}
	return p.Err()
}

// cleanText trims s and replaces control characters with spaces.
func cleanText(s string) string {
	return strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s))
}

// maxDifferences bounds the messages HardwareDifferences returns.
const maxDifferences = 4

// HardwareDifferences compares the devices a node reports with the offer:
// the device count per node, the accelerator model by name (the model's
// family as a word of the name — "H100" in "NVIDIA H100 80GB HBM3" — and,
// for a family sold as SXM and PCIe, "PCIe" in the name exactly when the
// listing is PCIe) and the memory within MemoryToleranceBP, read as GiB or
// as GB (vendors and nvidia-smi disagree). Memory not reported is not
// compared. It returns what differs, for the admins, or nil when the node
// matches.
func HardwareDifferences(o Offer, devices []HostDevice) []string {
	var out []string
	add := func(format string, args ...any) {
		out = append(out, fmt.Sprintf(format, args...))
	}
	if len(devices) != o.DevicesPerNode {
		add("reports %d devices; the listing has %d per node", len(devices), o.DevicesPerNode)
	}
	acc, ok := FindAccelerator(o.AcceleratorID)
	if !ok {
		return out
	}
	for _, d := range devices {
		if len(out) >= maxDifferences {
			break
		}
		if !d.Healthy && d.Name == "" {
			// A device that fell off the bus reports no name: it is a
			// fewer-devices incident (counted above and by the SLA
			// checks), not hardware that differs from the listing.
			continue
		}
		if !NameMatchesAccelerator(d.Name, acc) {
			name := d.Name
			if name == "" {
				name = "no name"
			}
			add("device %d is %q, not %s %s", d.Index, name, acc.Vendor, acc.Name)
			continue
		}
		if d.MemoryMiB > 0 && !memoryMatches(d.MemoryMiB, o.MemoryGB) {
			add("device %d has %s MiB of memory; the listing has %d GB", d.Index, FormatInt(d.MemoryMiB), o.MemoryGB)
		}
	}
	return out
}

// NameMatchesAccelerator reports whether a device name as a probe reports
// it names the accelerator (see HardwareDifferences).
func NameMatchesAccelerator(name string, acc Accelerator) bool {
	words := nameWords(name)
	family := nameWords(acc.Family)
	found := false
	for i := 0; i+len(family) <= len(words) && !found; i++ {
		found = true
		for j, f := range family {
			if words[i+j] != f {
				found = false
				break
			}
		}
	}
	if !found || len(family) == 0 {
		return false
	}
	if !familyHasFormFactors(acc.Family) {
		return true
	}
	pcie := false
	for _, w := range words {
		pcie = pcie || w == "PCIE"
	}
	return pcie == strings.EqualFold(acc.FormFactor, "PCIe")
}

func nameWords(s string) []string {
	return strings.FieldsFunc(strings.ToUpper(s), func(r rune) bool {
		return r == ' ' || r == '-' || r == '_' || r == '/' || r == ','
	})
}

// familyHasFormFactors reports whether the catalogue lists the family in
// more than one form factor (an H100 SXM and an H100 PCIe).
func familyHasFormFactors(family string) bool {
	seen := ""
	for _, a := range accelerators {
		if a.Family != family {
			continue
		}
		if seen != "" && seen != a.FormFactor {
			return true
		}
		seen = a.FormFactor
	}
	return false
}

// memoryMatches reports whether mib is within MemoryToleranceBP of gb, read
// as GiB or as GB.
func memoryMatches(mib int64, gb int) bool {
	within := func(have, want int64) bool {
		diff := have - want
		if diff < 0 {
			diff = -diff
		}
		return diff*10000 <= want*MemoryToleranceBP
	}
	bytes := mib << 20
	return within(bytes, int64(gb)<<30) || within(bytes, int64(gb)*1_000_000_000)
}

// HardwareDiffersMessage is the admins' red flag text for a node whose
// devices differ from the listing.
func HardwareDiffersMessage(node int, diffs []string) string {
	return fmt.Sprintf("Node %d %s.", node, strings.Join(diffs, "; "))
}

// DevicesOnNode is how many of the piece's devices are held on node.
func (p ReservationPiece) DevicesOnNode(node int) int {
	n := 0
	for _, s := range p.Nodes {
		if s.Node == node {
			n += s.Devices
		}
	}
	return n
}

// AccessState is what a node's agent must do for a piece placed on it.
type AccessState string

// Access states sent to the agent as an assignment's state.
const (
	AccessNone    AccessState = ""        // nothing to do
	AccessInstall AccessState = "install" // the rental runs: install the buyer's keys
	AccessRemove  AccessState = "remove"  // the rental is over and keys were installed: remove them
)

// AccessStateOf says what the agent must do for a piece at now: install
// while the reservation is confirmed or active and the piece runs
// ([Start, End)); remove once it no longer runs if the keys were installed
// and their removal is not yet confirmed; otherwise nothing.
func AccessStateOf(state ReservationState, p ReservationPiece, installed, removed bool, now time.Time) AccessState {
	running := (state == ReservationConfirmed || state == ReservationActive) && !now.Before(p.Start) && now.Before(p.End)
	switch {
	case running:
		return AccessInstall
	case installed && !removed:
		return AccessRemove
	}
	return AccessNone
}

// RemovalOverdue reports whether the removal of a piece's keys, installed
// and not confirmed removed, is past RemovalDeadline at now. The rental is
// over at its end, or when the reservation stopped (cancelled) earlier.
func RemovalOverdue(state ReservationState, p ReservationPiece, installed, removed bool, stoppedAt, now time.Time) bool {
	if !installed || removed {
		return false
	}
	over := p.End
	if state == ReservationCancelled && stoppedAt.Before(over) {
		over = stoppedAt
	}
	return !now.Before(over.Add(RemovalDeadline)) && AccessStateOf(state, p, installed, removed, now) == AccessRemove
}

// Connection is how the buyer reaches a node: what the agent reported once
// the keys were installed.
type Connection struct {
	Host string
	Port int
	User string
}

var sshUserRe = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}$`)

// ValidateConnection checks the connection details an agent reports and
// returns an invalid *Error naming each bad field. Host is a DNS name or
// an IP address; User a POSIX user name.
func ValidateConnection(c *Connection) error {
	p := Problems{}
	c.Host, c.User = strings.TrimSpace(c.Host), strings.TrimSpace(c.User)
	switch {
	case c.Host == "":
		p.Add("host", "host is required: the address the buyer connects to.")
	case net.ParseIP(c.Host) == nil && !validHostname(c.Host):
		p.Add("host", "host must be a DNS name or an IP address.")
	}
	if c.Port < 1 || c.Port > 65535 {
		p.Add("port", "port must be between 1 and 65535.")
	}
	if !sshUserRe.MatchString(c.User) {
		p.Add("user", "user must be a user name of lower-case letters, digits, '_', '-' or '.', at most 32 characters.")
	}
	return p.Err()
}

var hostLabelRe = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)

func validHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(s, "."), ".") {
		if !hostLabelRe.MatchString(l) {
			return false
		}
	}
	return true
}

// SSHCommand is the command line the buyer runs to connect.
func (c Connection) SSHCommand() string {
	if c.Port == 22 {
		return fmt.Sprintf("ssh %s@%s", c.User, c.Host)
	}
	return fmt.Sprintf("ssh -p %d %s@%s", c.Port, c.User, c.Host)
}

// MissingDevices is how many devices a piece lacks on a node that reports
// healthy devices when it holds held of them: the devices of a "fewer
// devices" incident measured by the agent (none when enough are healthy).
func MissingDevices(held, healthy int) int {
	return max(0, held-healthy)
}

// HostSilent reports whether a node whose last heartbeat was at last is
// down at now: silent for longer than the grace period.
func HostSilent(last, now time.Time) bool {
	return now.Sub(last) > HeartbeatGrace(HeartbeatInterval)
}

// SilenceOutage says whether a node's silence — no heartbeat after last
// until until — is a host failure of a piece on the node, and from when:
// the silence must pass the grace period (HostSilent), and do so before
// the piece ends, and the piece must have started by until. The outage
// starts at the last heartbeat, or at the piece's start if the node was
// already silent then.
func SilenceOutage(p ReservationPiece, last, until time.Time) (time.Time, bool) {
	detected := last.Add(HeartbeatGrace(HeartbeatInterval))
	if !HostSilent(last, until) || !detected.Before(p.End) || !p.Start.Before(until) {
		return time.Time{}, false
	}
	if last.Before(p.Start) {
		return p.Start, true
	}
	return last, true
}

// The market's own up-time (issue 23, docs/agent.md). A node's silence is
// the provider's fault only while the market was up and reachable: while
// the server is down, or restarting, no agent can reach it, and an agent
// that reconnects after the restart (after its retry backoff) did not fail.
const (
	// ServerBeatInterval is how often a server process records that it is
	// up (store.RecordServerBeat, from its background loop).
	ServerBeatInterval = 15 * time.Second
	// ServerUpSlack is how long after its last record a server process
	// still counts as up: a loop a little late is not the market down.
	ServerUpSlack = 2 * ServerBeatInterval
)

// ServerRun is one server process's up-time as it recorded it: from its
// start to the last time it recorded itself up (Seen).
type ServerRun struct {
	Start, Seen time.Time
}

// upIntervals merges the runs' intervals [Start, Seen+ServerUpSlack),
// sorted by start.
func upIntervals(runs []ServerRun) [][2]time.Time {
	rs := append([]ServerRun(nil), runs...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
	var out [][2]time.Time
	for _, r := range rs {
		end := r.Seen.Add(ServerUpSlack)
		if n := len(out); n > 0 && !r.Start.After(out[n-1][1]) {
			if end.After(out[n-1][1]) {
				out[n-1][1] = end
			}
			continue
		}
		out = append(out, [2]time.Time{r.Start, end})
	}
	return out
}

// MarketUpSince says since when the market had been up, without a break,
// at at: the start of the merged up-time (over every replica's runs) that
// holds at; at itself when the market was down at at. ok is false when no
// run is recorded at all (a server that does not record its up-time, as
// before issue 23): then nothing bounds a silence.
func MarketUpSince(runs []ServerRun, at time.Time) (time.Time, bool) {
	if len(runs) == 0 {
		return time.Time{}, false
	}
	for _, iv := range upIntervals(runs) {
		if !at.Before(iv[0]) && at.Before(iv[1]) {
			return iv[0], true
		}
	}
	return at, true
}

// MarketDownAfter says when the market went down after t: the end of the
// merged up-time that holds t. ok is false when no run is recorded, or t
// is in no up-time.
func MarketDownAfter(runs []ServerRun, t time.Time) (time.Time, bool) {
	for _, iv := range upIntervals(runs) {
		if !t.Before(iv[0]) && t.Before(iv[1]) {
			return iv[1], true
		}
	}
	return time.Time{}, false
}

// MarketSilence is SilenceOutage counted only while the market was up: a
// silence since last is measured from the later of last and the market's
// last coming up before until (MarketUpSince).
func MarketSilence(p ReservationPiece, runs []ServerRun, last, until time.Time) (time.Time, bool) {
	if since, ok := MarketUpSince(runs, until); ok && since.After(last) {
		last = since
	}
	return SilenceOutage(p, last, until)
}

// MaxSeqStep is how far one heartbeat's seq may jump above the highest
// seen with its token (issue 23): the agent adds one per heartbeat, so a
// bigger step is a bug or a forgery, which would otherwise lock the token
// out for good (every later seq would be "not above" it). A jump to the
// agent's fresh-state-file start — the current Unix time in milliseconds
// (docs/agent.md) — is always allowed, up to a day ahead of the server's
// clock.
const MaxSeqStep = 1_000_000

// SeqProblem returns why a heartbeat's seq, after the highest seen last,
// is refused at now, or "" when it may be recorded. A seq not above last
// is not a problem here: it is a replay, which changes nothing.
func SeqProblem(last, seq int64, now time.Time) string {
	limit := int64(math.MaxInt64)
	if last <= math.MaxInt64-MaxSeqStep {
		limit = last + MaxSeqStep
	}
	limit = max(limit, now.UnixMilli()+24*3600*1000)
	if seq > limit {
		return fmt.Sprintf("seq jumps too far: at most %d above the last one (%d), or a fresh start at the current Unix time in milliseconds. "+
			"Start the agent with a new state file.", MaxSeqStep, last)
	}
	return ""
}

// CleanRemoveError is an agent's account of a removal that failed, as
// pages show it: control characters replaced, trimmed, at most
// MaxContainerMessage runes.
func CleanRemoveError(msg string) string {
	msg = cleanText(msg)
	if r := []rune(msg); len(r) > MaxContainerMessage {
		msg = string(r[:MaxContainerMessage])
	}
	return msg
}
