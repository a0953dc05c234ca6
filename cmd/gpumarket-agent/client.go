package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
)

// agentVersion is reported in every heartbeat and as the User-Agent.
const agentVersion = "1.0.0"

// tokenEnv holds the host token when -token-file is not given; it is
// never passed on to the provider's commands.
const tokenEnv = "GPUMARKET_AGENT_TOKEN"

// The messages of the agent protocol (docs/agent.md), defined once in
// agentapi for the server and the agent, under the agent's names.
type (
	heartbeatRequest  = agentapi.Heartbeat
	heartbeatResponse = agentapi.HeartbeatResponse
	// assignmentsResponse answers the long-poll of the assignments.
	assignmentsResponse = agentapi.Assignments
	// assignment is a piece placed on this node that the agent must act
	// on: only data (keys, times, ids), never a command.
	assignment = agentapi.Assignment
	// connection is how the buyer reaches the node, reported once the keys
	// are in place.
	connection       = agentapi.Connection
	installedReport  = agentapi.Installed
	removedReport    = agentapi.Removed
	acceptanceReport = agentapi.Acceptance
)

// Assignment states.
const (
	stateInstall = agentapi.StateInstall
	stateRemove  = agentapi.StateRemove
	statePrepare = agentapi.StatePrepare
)

// errUnauthorized is the server refusing the host token (revoked, unknown,
// or its provider suspended): nothing the agent does will help, so it stops.
var errUnauthorized = errors.New("the marketplace refused the host token (revoked, replaced by a newer one, or unknown); " +
	"create a new one on the hosts page (/provider/hosts) and restart the agent with it")

// httpError is a response other than 2xx, with the server's message.
type httpError struct {
	Status  int
	Message string
	// RetryAfter is the server's Retry-After (whole seconds), on a 429 or
	// 503: when it asks to be called again; zero when it did not say.
	RetryAfter time.Duration
}

func (e *httpError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("server answered %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// requestTimeout bounds one call to the server.
const requestTimeout = 30 * time.Second

// maxResponse bounds a response body the agent reads.
const maxResponse = 1 << 20

// client calls the marketplace's /agent/v1 endpoints with the host token.
type client struct {
	base      *url.URL
	token     string
	userAgent string
	http      *http.Client
}

func newClient(base *url.URL, token string) *client {
	return &client{
		base:      base,
		token:     token,
		userAgent: "gpumarket-agent/" + agentVersion,
		http:      &http.Client{Timeout: requestTimeout},
	}
}

// heartbeat sends one heartbeat.
func (c *client) heartbeat(ctx context.Context, hb heartbeatRequest) (heartbeatResponse, error) {
	if hb.Devices == nil {
		hb.Devices = []device{}
	}
	var resp heartbeatResponse
	err := c.post(ctx, agentapi.PathHeartbeat, hb, &resp)
	return resp, err
}

// errNoPush is a server that does not hold long-polls of the assignments
// (an older one answers 404 or 405): the agent relies on its heartbeats.
var errNoPush = errors.New("the server does not offer the long-poll of assignments")

// assignments holds the long-poll of the node's assignments open for up to
// wait seconds, or until they differ from the version known. Unlike the
// other calls it ends with ctx: nothing is under way on the server.
func (c *client) assignments(ctx context.Context, known string, wait int) (assignmentsResponse, error) {
	q := url.Values{}
	q.Set(agentapi.QueryWait, strconv.Itoa(wait))
	q.Set(agentapi.QueryKnown, known)
	u := c.base.JoinPath(agentapi.PathAssignments)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return assignmentsResponse{}, err
	}
	var out assignmentsResponse
	err = c.do(req, agentapi.PathAssignments, &out)
	var he *httpError
	if errors.As(err, &he) && (he.Status == http.StatusNotFound || he.Status == http.StatusMethodNotAllowed) {
		return out, fmt.Errorf("%w (%v)", errNoPush, err)
	}
	return out, err
}

// installed reports that a piece's keys are in place.
func (c *client) installed(ctx context.Context, piece int64, r installedReport) error {
	return c.post(ctx, agentapi.AssignmentPath(piece, agentapi.ReportInstalled), r, nil)
}

// removed reports that a piece's keys are gone.
func (c *client) removed(ctx context.Context, piece int64, r removedReport) error {
	return c.post(ctx, agentapi.AssignmentPath(piece, agentapi.ReportRemoved), r, nil)
}

// removeFailed reports that the piece's access could not be ended.
func (c *client) removeFailed(ctx context.Context, piece int64, msg string) error {
	return c.post(ctx, agentapi.AssignmentPath(piece, agentapi.ReportRemoveFailed), agentapi.RemoveFailed{Message: msg}, nil)
}

// container reports where a piece's container stands (container mode).
func (c *client) container(ctx context.Context, piece int64, r agentapi.ContainerReport) error {
	return c.post(ctx, agentapi.AssignmentPath(piece, agentapi.ReportContainer), r, nil)
}

// acceptance reports a piece's acceptance result.
func (c *client) acceptance(ctx context.Context, piece int64, r acceptanceReport) error {
	if r.PerDevice == nil {
		r.PerDevice = []float64{}
	}
	return c.post(ctx, agentapi.AssignmentPath(piece, agentapi.ReportAcceptance), r, nil)
}

// post sends in as JSON to path and decodes a 2xx answer into out (unless
// nil). A 401 or 403 is errUnauthorized; any other failure is an
// *httpError or the transport's error, which a retry may cure.
func (c *client) post(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.JoinPath(path).String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req, path, out)
}

// do sends a request with the token and decodes a 2xx answer into out
// (unless nil), as post describes.
func (c *client) do(req *http.Request, path string, out any) error {
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", c.userAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s /%s: %w", req.Method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return fmt.Errorf("%s /%s: read the answer: %w", req.Method, path, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		if msg := errorMessage(b); msg != "" {
			return fmt.Errorf("%w (server: %s)", errUnauthorized, msg)
		}
		return errUnauthorized
	case resp.StatusCode < 200 || resp.StatusCode > 299:
		e := &httpError{Status: resp.StatusCode, Message: errorMessage(b)}
		if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs > 0 {
			e.RetryAfter = time.Duration(min(secs, 3600)) * time.Second
		}
		return fmt.Errorf("%s /%s: %w", req.Method, path, e)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s /%s: the answer is not the expected JSON: %w", req.Method, path, err)
	}
	return nil
}

// errorMessage reads the message of the marketplace's JSON error
// ({"error": {"message": …}}), or a short plain-text body.
func errorMessage(b []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
		return clip(e.Error.Message, 300)
	}
	if s := strings.TrimSpace(string(b)); s != "" && !strings.HasPrefix(s, "<") && !strings.HasPrefix(s, "{") {
		return firstLine(b)
	}
	return ""
}

// backoff is the wait between retries while the server cannot be reached:
// it doubles from min to max and starts over after a success.
type backoff struct {
	min, max time.Duration
	next     time.Duration
}

// wait returns how long to wait before the next attempt.
func (b *backoff) wait() time.Duration {
	if b.next < b.min {
		b.next = b.min
	}
	d := b.next
	b.next = min(2*b.next, b.max)
	return d
}

// reset starts over after a success.
func (b *backoff) reset() { b.next = 0 }

// retryAfter is the wait the server asked for in a refusal's Retry-After
// (a 429 when its database writer is behind, docs/agent.md), plus a random
// share of it up to as much again, so that agents refused together do not
// come back together; false when the error asks for no particular wait.
func retryAfter(err error, jitter func(time.Duration) time.Duration) (time.Duration, bool) {
	var he *httpError
	if !errors.As(err, &he) || he.RetryAfter <= 0 {
		return 0, false
	}
	return he.RetryAfter + jitter(he.RetryAfter), true
}

// checkServerURL accepts https URLs, and http for a server on this machine
// (tests, a local demo): the host token must not cross a network in clear.
func checkServerURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("-server is required: the marketplace's URL, e.g. https://gpumarket.example")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("-server %q is not a URL such as https://gpumarket.example", raw)
	}
	switch u.Scheme {
	case "https":
	case "http":
		host := u.Hostname()
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("-server %q: use https:// (plain http is accepted only for a server on this machine, "+
				"since the host token would cross the network in clear)", raw)
		}
	default:
		return nil, fmt.Errorf("-server %q: use https://", raw)
	}
	return u, nil
}
