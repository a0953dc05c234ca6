// Package agentapi is the provider agent's protocol (docs/agent.md): the
// paths under /agent/v1 and the JSON messages, defined once for the
// server (web) and the agent (cmd/gpumarket-agent). It holds no logic.
package agentapi

import (
	"strconv"
	"time"

	"github.com/gpumarket/gpumarket/market"
)

// Paths, relative to the marketplace's base URL.
const (
	// PathHeartbeat is POST's path for a Heartbeat.
	PathHeartbeat = "agent/v1/heartbeat"
	// PathAssignments is GET's path for the long-poll of the node's
	// assignments (Assignments): the server holds it open until they differ
	// from the version the agent names (QueryKnown) or QueryWait seconds
	// pass. A server without it answers 404 or 405: the agent then relies on
	// its heartbeats alone.
	PathAssignments = "agent/v1/assignments"
	// QueryWait is the long-poll's wait in whole seconds (1 to
	// MaxWaitSeconds; more is cut to it); QueryKnown the Version the agent
	// last acted on ("" : answer at once).
	QueryWait  = "wait"
	QueryKnown = "known"
	// MaxWaitSeconds bounds a long-poll's wait, below the server's write
	// timeout and its shutdown grace.
	MaxWaitSeconds = 15
	// ReportInstalled, ReportRemoved and ReportAcceptance name an
	// assignment's reports (AssignmentPath).
	ReportInstalled  = "installed"
	ReportRemoved    = "removed"
	ReportAcceptance = "acceptance"
	// ReportContainer names a container mode report (ContainerReport).
	ReportContainer = "container"
	// ReportRemoveFailed names the report that the agent could not end a
	// piece's access (RemoveFailed).
	ReportRemoveFailed = "remove_failed"
)

// AssignmentPath is the path of a report on a piece: "agent/v1/assignments/31/installed".
func AssignmentPath(pieceID int64, report string) string {
	return "agent/v1/assignments/" + strconv.FormatInt(pieceID, 10) + "/" + report
}

// Heartbeat is POST /agent/v1/heartbeat's body.
type Heartbeat struct {
	Seq          int64               `json:"seq"`
	SentAt       time.Time           `json:"sent_at"`
	AgentVersion string              `json:"agent_version"`
	Probe        string              `json:"probe"`
	Devices      []market.HostDevice `json:"devices"`
	Error        string              `json:"error"`
	// Isolation is how the agent keeps renters of pieces without a
	// container apart (market.Isolation: rental_users, shared_user,
	// provider_hooks); absent from an older agent.
	Isolation string `json:"isolation,omitempty"`
}

// HeartbeatResponse answers a heartbeat: whether it was accepted (not a
// replay), the server's clock, the interval to keep and the assignments
// the agent must act on now.
type HeartbeatResponse struct {
	Accepted        bool         `json:"accepted"`
	ServerTime      time.Time    `json:"server_time"`
	IntervalSeconds int          `json:"interval_seconds"`
	Assignments     []Assignment `json:"assignments"`
	// Version names the assignments answered (a digest; an agent compares
	// it only for equality) and Push that the server holds long-polls of
	// PathAssignments. Both are absent from an older server.
	Version string `json:"version,omitempty"`
	Push    bool   `json:"push,omitempty"`
}

// Assignments answers GET /agent/v1/assignments: the node's assignments,
// as a heartbeat's answer carries them, and their Version. Changed is
// false when the wait ended with the assignments still at the version the
// agent named (then they are the same list it has).
type Assignments struct {
	ServerTime  time.Time    `json:"server_time"`
	Version     string       `json:"version"`
	Changed     bool         `json:"changed"`
	Assignments []Assignment `json:"assignments"`
}

// Assignment is a piece placed on the token's node that the agent must act
// on: only data (keys, times, ids), never a command.
type Assignment struct {
	ReservationID int64     `json:"reservation_id"`
	PieceID       int64     `json:"piece_id"`
	Devices       int       `json:"devices"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	SSHUser       string    `json:"ssh_user"`
	SSHKeys       []string  `json:"ssh_keys"`
	Acceptance    bool      `json:"acceptance"`
	State         string    `json:"state"`
	// DeviceIndices are the node's devices the piece holds (0-based): a
	// container gets these and no others (CDI nvidia.com/gpu=<index>).
	DeviceIndices []int `json:"device_indices,omitempty"`
	// Runtime is the buyer's container, sent in the prepare and install
	// states; absent: the host's own environment (authorized_keys mode).
	Runtime *Runtime `json:"runtime,omitempty"`
	// Reported is set while the state is install and the server already
	// holds the agent's installed report: an agent whose own record agrees
	// need not report it again. Absent from an older server.
	Reported bool `json:"reported,omitempty"`
}

// Runtime is the buyer's container for a piece (market.Runtime): the
// environment's secrets included, for the container only; an agent never
// logs or stores them.
type Runtime struct {
	Image    string   `json:"image"`
	Launch   string   `json:"launch"`
	OnStart  string   `json:"on_start,omitempty"`
	Ports    []int    `json:"ports,omitempty"`
	Env      []EnvVar `json:"env,omitempty"`
	MinShmMB int      `json:"min_shm_mb,omitempty"`
}

// EnvVar is one environment variable of a Runtime.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// NewRuntime is rt as sent to an agent, or nil for none.
func NewRuntime(rt market.Runtime) *Runtime {
	if rt.IsZero() {
		return nil
	}
	out := &Runtime{Image: rt.Image, Launch: string(rt.Launch), OnStart: rt.OnStart, Ports: rt.Ports, MinShmMB: rt.MinShmMB}
	for _, e := range rt.Env {
		out.Env = append(out.Env, EnvVar{Name: e.Name, Value: e.Value})
	}
	return out
}

// StatePrepare asks the agent to get a piece's container ready before its
// start: pull the image (container mode).
const StatePrepare = "prepare"

// ContainerReport is POST /agent/v1/assignments/{piece_id}/container's
// body: where the piece's container stands (market.ContainerPhase:
// pulling, pulled, ready, failed, removed, remove_failed), a message (what
// failed; never a secret), pull progress in percent and, once ready, the
// host ports its container ports are published on.
type ContainerReport struct {
	Phase    string               `json:"phase"`
	Message  string               `json:"message,omitempty"`
	Progress int                  `json:"progress,omitempty"`
	Ports    []market.PortMapping `json:"ports,omitempty"`
}

// Assignment states.
const (
	StateInstall = "install"
	StateRemove  = "remove"
)

// Connection is how the buyer reaches the node, reported once the keys are
// in place.
type Connection struct {
	Host string `json:"host"`
	Port int    `json:"port"`
	User string `json:"user"`
}

// Installed is POST /agent/v1/assignments/{piece_id}/installed's body.
type Installed struct {
	Connection
	InstalledAt time.Time `json:"installed_at"`
}

// Removed is POST /agent/v1/assignments/{piece_id}/removed's body.
type Removed struct {
	RemovedAt time.Time `json:"removed_at"`
}

// RemoveFailed is POST /agent/v1/assignments/{piece_id}/remove_failed's
// body: what failed when the agent tried to end the piece's access (its
// keys, or with -rental-users its user and processes); never a secret.
type RemoveFailed struct {
	Message string `json:"message"`
}

// Acceptance is POST /agent/v1/assignments/{piece_id}/acceptance's body:
// the measured figure per device of the piece (0 for a device that could
// not be measured), or what failed.
type Acceptance struct {
	Metric          string    `json:"metric"`
	PerDevice       []float64 `json:"per_device"`
	DurationSeconds int64     `json:"duration_seconds"`
	Error           string    `json:"error"`
}
