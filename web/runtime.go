package web

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// runtimeAccess fills the reservation's environment (no secrets: the
// store removes their values) and returns its containers by piece and
// node; a reservation without a runtime has none.
func (h *Handler) runtimeAccess(ctx context.Context, buyerID int64, r market.Reservation, v *views.ReservationAccessView) (map[[2]int64]store.PieceContainer, error) {
	rt, err := h.db.FindReservationRuntime(ctx, buyerID, r.ID)
	if market.ErrorCode(err) == market.CodeNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v.Image, v.Launch = rt.Image, string(rt.Launch)
	cs, err := h.db.ListReservationContainers(ctx, buyerID, r.ID)
	if err != nil {
		return nil, err
	}
	out := map[[2]int64]store.PieceContainer{}
	for _, c := range cs {
		out[[2]int64{c.PieceID, int64(c.Node)}] = c
	}
	return out, nil
}

// containerRow shows a node's container on its access row: "waiting" until
// its agent reports.
func containerRow(row *views.AccessRow, c store.PieceContainer) {
	if c.Phase == "" {
		return
	}
	row.Container, row.ContainerMessage = c.Phase.Label(), c.Message
	if c.Phase == market.PhasePulling && c.Progress > 0 {
		row.Container = fmt.Sprintf("%s %d %%", c.Phase.Label(), c.Progress)
	}
	var ports []string
	for _, m := range c.Ports {
		ports = append(ports, fmt.Sprintf("%d → %d", m.Container, m.Host))
	}
	row.Ports = strings.Join(ports, ", ")
}

// runtimeFromValues reads the request form's runtime fieldset; what
// cannot be parsed is added to p by field name.
func runtimeFromValues(p market.Problems, v views.RequestFormValues) market.Runtime {
	rt := market.Runtime{Image: v.Image, Launch: market.LaunchMode(v.Launch), OnStart: strings.ReplaceAll(v.OnStart, "\r\n", "\n")}
	if v.Image == "" && v.RuntimeTemplate == "" {
		return market.Runtime{}
	}
	if v.RuntimeTemplate != "" {
		id, err := strconv.ParseInt(v.RuntimeTemplate, 10, 64)
		if err != nil || id < 1 {
			p.Add("runtime.template", "Choose a template from the list.")
		}
		rt.TemplateID = id
	}
	ports, err := market.ParsePorts(v.Ports)
	if err != nil {
		p.Add("runtime.ports", "Write ports as numbers separated by commas, e.g. 6006, 8080 ("+err.Error()+").")
	}
	rt.Ports = ports
	for _, line := range strings.Split(strings.ReplaceAll(v.Env, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			p.Add("runtime.env", fmt.Sprintf("Write one NAME=value a line (%q has no =).", strings.TrimSpace(line)))
			continue
		}
		rt.Env = append(rt.Env, market.EnvVar{Name: strings.TrimSpace(name), Value: value})
	}
	if v.MinShmMB != "" {
		n, err := strconv.Atoi(v.MinShmMB)
		if err != nil {
			p.Add("runtime.min_shm_mb", "Enter a whole number of MB.")
		}
		rt.MinShmMB = n
	}
	return rt
}

// runtimeValues puts a request's runtime back in the form: the secrets'
// values never (their names stay with the template or the API request).
func runtimeValues(v *views.RequestFormValues, rt market.Runtime) {
	if rt.IsZero() {
		return
	}
	v.Image, v.Launch, v.OnStart, v.Ports = rt.Image, string(rt.Launch), rt.OnStart, market.FormatPorts(rt.Ports)
	if rt.TemplateID != 0 {
		v.RuntimeTemplate = strconv.FormatInt(rt.TemplateID, 10)
	}
	if rt.MinShmMB > 0 {
		v.MinShmMB = strconv.Itoa(rt.MinShmMB)
	}
	var lines []string
	for _, e := range rt.Env {
		if !e.Secret {
			lines = append(lines, e.Name+"="+e.Value)
		}
	}
	v.Env = strings.Join(lines, "\n")
}

// withTemplate fills the runtime fieldset from the chosen template when the
// buyer picked one and has not named an image: "pick a template" is one
// step. A template the buyer may not use is left for validation to name.
func (h *Handler) withTemplate(c echo.Context, v views.RequestFormValues) views.RequestFormValues {
	u := currentUser(c)
	if v.RuntimeTemplate == "" || v.Image != "" || u == nil {
		return v
	}
	id, err := strconv.ParseInt(v.RuntimeTemplate, 10, 64)
	if err != nil {
		return v
	}
	t, err := h.db.FindTemplateForUse(c.Request().Context(), u.ID, id)
	if err != nil {
		return v
	}
	runtimeValues(&v, t.Runtime)
	v.RuntimeTemplate = strconv.FormatInt(id, 10)
	return v
}

// runtimeOptions are the template choices of the request form: public
// templates and the buyer's own.
func (h *Handler) runtimeOptions(c echo.Context) []views.Option {
	opts := []views.Option{{Value: "", Label: "None (or type an image below)"}}
	u := currentUser(c)
	if u == nil {
		return opts
	}
	ts, err := h.db.ListTemplates(c.Request().Context(), u.ID)
	if err != nil {
		logger(c).Warn("templates not listed", "err", err)
		return opts
	}
	for _, t := range ts {
		opts = append(opts, views.Option{Value: strconv.FormatInt(t.ID, 10), Label: fmt.Sprintf("%s — %s (by %s, used %d times)", t.Name, t.Runtime.Image, t.AuthorName, t.UsedBy)})
	}
	return opts
}
