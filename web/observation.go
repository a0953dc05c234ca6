package web

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// apiObservation is what the buyer's machine reports for a piece (the
// script on the reservation page, docs/agent.md).
type apiObservation struct {
	PieceID   int64               `json:"piece_id"`
	Devices   []apiObservedDevice `json:"devices"`
	Benchmark *apiBenchmark       `json:"benchmark"`
}

type apiObservedDevice struct {
	Name      string `json:"name"`
	MemoryMiB int64  `json:"memory_mib"`
}

type apiBenchmark struct {
	Kind    string  `json:"kind"`
	TFLOPS  float64 `json:"tflops"`
	Seconds int     `json:"seconds"`
}

// apiObservationResult is the stored observation and how it compares.
type apiObservationResult struct {
	ID       int64    `json:"id"`
	PieceID  int64    `json:"piece_id"`
	Node     int      `json:"node"`
	Mismatch bool     `json:"mismatch"`
	Reasons  []string `json:"reasons"`
	Observed string   `json:"observed"`
	Agent    string   `json:"agent"`
}

// parseObservation decodes a report strictly (unknown fields and trailing
// data refused) and checks it (market.NewObservation).
func parseObservation(data []byte) (market.Observation, error) {
	var body apiObservation
	if err := decodeStrict(data, &body); err != nil {
		return market.Observation{}, err
	}
	devices := make([]market.ObservedDevice, len(body.Devices))
	for i, d := range body.Devices {
		devices[i] = market.ObservedDevice{Name: d.Name, MemoryMiB: d.MemoryMiB}
	}
	var b apiBenchmark
	if body.Benchmark != nil {
		b = *body.Benchmark
	}
	return market.NewObservation(body.PieceID, devices, b.Kind, b.TFLOPS, b.Seconds)
}

// handleAPIObservation records what the buyer's machine sees on a piece of
// the token owner's running rental, compared with the agent's report.
func (h *Handler) handleAPIObservation(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	data, err := readBody(c)
	if err != nil {
		return err
	}
	obs, err := parseObservation(data)
	if err != nil {
		return err
	}
	rec, err := h.wf.RecordObservation(c.Request().Context(), currentUser(c).ID, id, obs)
	if err != nil {
		return err
	}
	reasons := rec.Reasons
	if reasons == nil {
		reasons = []string{}
	}
	return writeJSON(c, http.StatusCreated, apiObservationResult{ID: rec.ID, PieceID: rec.Observation.PieceID, Node: rec.Node,
		Mismatch: rec.Mismatch(), Reasons: reasons, Observed: market.ObservationSummary(rec.Observation), Agent: rec.AgentSummary})
}

// handleObservation records the report pasted into the reservation page's
// form; a bad one re-renders the form with 422 and the message by it.
func (h *Handler) handleObservation(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	u := currentUser(c)
	r, err := h.db.FindBuyerReservation(ctx, u.ID, id)
	if err != nil {
		return err
	}
	value := c.FormValue("report")
	obs, err := parseObservation([]byte(strings.TrimSpace(value)))
	if msg := market.TextProblem(value, true); msg != "" {
		// Said as such, not as the JSON decoder's complaint.
		err = market.Errorf(market.CodeInvalid, "%s", msg)
	}
	if err == nil {
		_, err = h.wf.RecordObservation(ctx, u.ID, r.ID, obs)
		if err == nil {
			h.setFlash(c, "ok", "Thank you: your machine's report is recorded beside the provider's agent's.")
			return c.Redirect(http.StatusSeeOther, fmt.Sprintf("/reservations/%d#observations", r.ID))
		}
	}
	switch market.ErrorCode(err) {
	case market.CodeInvalid, market.CodeNotFound, market.CodeConflict:
	default:
		return err
	}
	v, verr := h.observationPanel(ctx, r, value, observationError(err))
	if verr != nil {
		return verr
	}
	return render(c, http.StatusUnprocessableEntity, views.ObservationPage(h.page(c, fmt.Sprintf("Reservation #%d: what your machine sees", r.ID)),
		fmt.Sprintf("/reservations/%d", r.ID), v))
}

// observationError is the form's message for a refused report: the
// message and each field's problem.
func observationError(err error) string {
	msg := market.ErrorMessage(err)
	fields := market.FieldErrors(err)
	if len(fields) == 0 {
		return msg
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, k+": "+fields[k])
	}
	return "The report was not accepted: " + strings.Join(parts, " ")
}

// observationPanel builds the reservation page's section: the reports so
// far beside the agent's, and while the rental runs the script and form.
func (h *Handler) observationPanel(ctx context.Context, r market.Reservation, value, errMsg string) (views.ObservationPanelView, error) {
	v := views.ObservationPanelView{Value: value, Error: errMsg, APIURL: h.cfg.BaseURL + fmt.Sprintf("/api/v1/reservations/%d/observations", r.ID)}
	recs, err := h.db.ListReservationObservations(ctx, r.ID)
	if err != nil {
		return v, err
	}
	v.Reports = observationRows(recs)
	now := h.now()
	for _, p := range r.Pieces {
		if market.ObservationOpen(r, p, now) {
			v.Scripts = append(v.Scripts, views.ObservationScript{Piece: fmt.Sprintf("piece %d", p.ID), Text: observationScript(v.APIURL, p.ID)})
		}
	}
	if len(v.Scripts) > 0 {
		v.Action = fmt.Sprintf("/reservations/%d/observations", r.ID)
	} else {
		v.Closed = "Your machine can report what it sees while the rental runs."
	}
	return v, nil
}

func observationRows(recs []store.ObservationRecord) []views.ObservationRow {
	rows := make([]views.ObservationRow, 0, len(recs))
	for _, o := range recs {
		rows = append(rows, views.ObservationRow{When: formatTime(o.CreatedAt), Piece: fmt.Sprintf("piece %d, node %d", o.Observation.PieceID, o.Node),
			Buyer: market.ObservationSummary(o.Observation), Agent: o.AgentSummary, Mismatch: o.Mismatch(), Reasons: o.Reasons})
	}
	return rows
}

// observationScript is the script the buyer runs on the rented machine:
// it lists the devices with nvidia-smi, runs a short matrix multiplication
// when python3 and torch are there, prints the report and posts it with
// the token in GPUMARKET_TOKEN (never on the page).
func observationScript(url string, pieceID int64) string {
	return fmt.Sprintf(`#!/usr/bin/env bash
# What this machine sees, for piece %[2]d. Run it on the rented machine.
# To post the report yourself:  export GPUMARKET_TOKEN=<a write API token>
# Without a token it only prints the report: paste it into the form below.
set -eu
devices=$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits |
  awk -F', *' '{ gsub(/"/, "", $1); printf "%%s{\"name\":\"%%s\",\"memory_mib\":%%d}", (NR > 1 ? "," : ""), $1, $2 }')
bench=""
if command -v python3 >/dev/null 2>&1; then
  bench=$(python3 - <<'PY' 2>/dev/null || true
import json, time
import torch
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.float16)
b = torch.randn(n, n, device="cuda", dtype=torch.float16)
for _ in range(3):
    a @ b
torch.cuda.synchronize()
t0, k = time.time(), 0
while time.time() - t0 < 10:
    a @ b
    k += 1
    if k %% 20 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
s = time.time() - t0
print(json.dumps({"kind": "matmul_fp16", "tflops": round(2 * n**3 * k / s / 1e12, 1), "seconds": max(1, round(s))}))
PY
)
fi
report="{\"piece_id\":%[2]d,\"devices\":[$devices]${bench:+,\"benchmark\":$bench}}"
echo "$report"
if [ -n "${GPUMARKET_TOKEN:-}" ]; then
  curl -sS -X POST -H "Authorization: Bearer $GPUMARKET_TOKEN" -H "Content-Type: application/json" \
    --data "$report" %[1]s
  echo
fi
`, url, pieceID)
}
