package market

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// AccessPrepare is the assignment state before a piece with a runtime
// starts: the agent pulls the image so the container starts on time
// (docs/agent.md, container mode).
const AccessPrepare AccessState = "prepare"

// PrepareLead is how long before a piece's start its agent is asked to
// prepare (pull the image).
const PrepareLead = 30 * time.Minute

// Prepares reports whether a piece of a reservation in state is to be
// prepared at now: paid, starting within PrepareLead.
func Prepares(state ReservationState, p ReservationPiece, now time.Time) bool {
	return (state == ReservationConfirmed || state == ReservationActive) && now.Before(p.Start) && !now.Before(p.Start.Add(-PrepareLead))
}

// ContainerPhase is where a piece's container stands on a node, as its
// agent reports it.
type ContainerPhase string

// Container phases.
const (
	PhasePulling      ContainerPhase = "pulling"       // the image is being pulled
	PhasePulled       ContainerPhase = "pulled"        // the image is in place, the container not yet started
	PhaseReady        ContainerPhase = "ready"         // the container runs, ports published
	PhaseFailed       ContainerPhase = "failed"        // pull or start failed: the buyer cannot use the node
	PhaseRemoved      ContainerPhase = "removed"       // stopped and removed at the end
	PhaseRemoveFailed ContainerPhase = "remove_failed" // removal failed: the provider must clean up
)

// Label is the phase as the buyer reads it.
func (p ContainerPhase) Label() string {
	switch p {
	case PhasePulling:
		return "pulling image…"
	case PhasePulled:
		return "image pulled, starting at the start time"
	case PhaseReady:
		return "ready"
	case PhaseFailed:
		return "failed"
	case PhaseRemoved:
		return "removed"
	case PhaseRemoveFailed:
		return "removal failed"
	}
	return string(p)
}

// PortMapping is a container port published on a host port.
type PortMapping struct {
	Container int `json:"container"`
	Host      int `json:"host"`
}

// ContainerReport is what an agent reports of a piece's container.
type ContainerReport struct {
	Phase    ContainerPhase
	Message  string // what failed, or progress in words; never a secret
	Progress int    // pulling: percent 0..100
	Ports    []PortMapping
}

// MaxContainerMessage bounds a report's message.
const MaxContainerMessage = 500

// ValidateContainerReport checks an agent's report, naming each bad field.
func ValidateContainerReport(r *ContainerReport) error {
	p := Problems{}
	switch r.Phase {
	case PhasePulling, PhasePulled, PhaseReady, PhaseFailed, PhaseRemoved, PhaseRemoveFailed:
	default:
		p.Add("phase", "Report pulling, pulled, ready, failed, removed or remove_failed.")
	}
	r.Message = strings.TrimSpace(r.Message)
	if len(r.Message) > MaxContainerMessage {
		r.Message = r.Message[:MaxContainerMessage]
	}
	textField(p, "message", r.Message, true)
	if r.Progress < 0 || r.Progress > 100 {
		p.Add("progress", "Progress is a percentage, 0 to 100.")
	}
	if len(r.Ports) > MaxRuntimePorts+1 {
		p.Add("ports", "Too many ports.")
	}
	for _, m := range r.Ports {
		if m.Container < 1 || m.Container > 65535 || m.Host < 1 || m.Host > 65535 {
			p.Add("ports", "Ports are between 1 and 65535.")
		}
	}
	return p.Err()
}

// ContainerFailureNote is the incident note of a container that could not
// be pulled or started: the reason and that the time is not charged.
func ContainerFailureNote(node int, msg string) string {
	if msg == "" {
		msg = "no reason given"
	}
	return fmt.Sprintf("The buyer's container could not be made ready on node %d (%s); the time it was not usable is not charged.", node, msg)
}

// NodePiece is a piece's share of one node over its rental, for device
// index assignment.
type NodePiece struct {
	PieceID    int64
	Devices    int
	Start, End time.Time
}

// DeviceIndices gives each piece on a node the indices of the devices it
// holds (0 .. devicesPerNode-1), so two pieces on one node never share a
// device: pieces in order of start (then id) take the lowest indices not
// held by a piece still running at their start. Booking keeps the devices
// in use at every instant within the node's, so this never runs out
// (interval colouring in start order is exact); a piece that would is
// given none. The rule depends only on the pieces, so the server computes
// the same indices on every heartbeat; a piece booked later that starts
// earlier than a piece not yet started may change that one's indices, but
// never a running piece's (bookings start in the future).
func DeviceIndices(pieces []NodePiece, devicesPerNode int) map[int64][]int {
	ps := append([]NodePiece(nil), pieces...)
	sort.Slice(ps, func(i, j int) bool {
		if !ps[i].Start.Equal(ps[j].Start) {
			return ps[i].Start.Before(ps[j].Start)
		}
		return ps[i].PieceID < ps[j].PieceID
	})
	holder := make([]int, devicesPerNode) // index of ps holding each device, -1 free
	for i := range holder {
		holder[i] = -1
	}
	out := make(map[int64][]int, len(ps))
	for i, p := range ps {
		for d, h := range holder {
			if h >= 0 && !ps[h].End.After(p.Start) {
				holder[d] = -1
			}
		}
		var got []int
		for d := 0; d < devicesPerNode && len(got) < p.Devices; d++ {
			if holder[d] < 0 {
				got = append(got, d)
			}
		}
		if len(got) < p.Devices {
			out[p.PieceID] = nil
			continue
		}
		for _, d := range got {
			holder[d] = i
		}
		out[p.PieceID] = got
	}
	return out
}
