package web

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
)

// The templates API (docs/runtime.md): list the templates the token's
// owner may use, create, edit and delete their own. Secrets' values are
// accepted, never returned.

// apiRuntime is a runtime in the API, as in the portable request JSON.
type apiRuntime struct {
	Image    string      `json:"image"`
	Launch   string      `json:"launch"`
	OnStart  string      `json:"on_start,omitempty"`
	Ports    []int       `json:"ports,omitempty"`
	Env      []apiEnvVar `json:"env,omitempty"`
	MinShmMB int         `json:"min_shm_mb,omitempty"`
}

// apiEnvVar is one environment variable; a secret's value is write-only.
type apiEnvVar struct {
	Name   string `json:"name"`
	Value  string `json:"value,omitempty"`
	Secret bool   `json:"secret,omitempty"`
}

// apiTemplateBody creates or replaces a template.
type apiTemplateBody struct {
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Public      bool       `json:"public"`
	Runtime     apiRuntime `json:"runtime"`
}

type apiTemplate struct {
	ID          int64      `json:"id"`
	Name        string     `json:"name"`
	Description string     `json:"description"`
	Public      bool       `json:"public"`
	Author      string     `json:"author"`
	Mine        bool       `json:"mine"`
	UsedBy      int        `json:"used_by"`
	Runtime     apiRuntime `json:"runtime"`
	CreatedAt   time.Time  `json:"created_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

func (b apiTemplateBody) template() market.Template {
	rt := market.Runtime{Image: b.Runtime.Image, Launch: market.LaunchMode(b.Runtime.Launch), OnStart: b.Runtime.OnStart,
		Ports: b.Runtime.Ports, MinShmMB: b.Runtime.MinShmMB}
	for _, e := range b.Runtime.Env {
		rt.Env = append(rt.Env, market.EnvVar{Name: e.Name, Value: e.Value, Secret: e.Secret})
	}
	return market.Template{Name: b.Name, Description: b.Description, Public: b.Public, Runtime: rt}
}

func toAPITemplate(t store.Template, userID int64) apiTemplate {
	rt := t.Runtime.WithoutSecrets()
	out := apiTemplate{ID: t.ID, Name: t.Name, Description: t.Description, Public: t.Public, Author: t.AuthorName,
		Mine: t.AuthorID == userID, UsedBy: t.UsedBy, CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt,
		Runtime: apiRuntime{Image: rt.Image, Launch: string(rt.Launch), OnStart: rt.OnStart, Ports: rt.Ports, MinShmMB: rt.MinShmMB}}
	for _, e := range rt.Env {
		out.Runtime.Env = append(out.Runtime.Env, apiEnvVar{Name: e.Name, Value: e.Value, Secret: e.Secret})
	}
	return out
}

func (h *Handler) handleAPITemplates(c echo.Context) error {
	u := currentUser(c)
	ts, err := h.db.ListTemplates(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	out := struct {
		Templates []apiTemplate `json:"templates"`
	}{Templates: []apiTemplate{}}
	for _, t := range ts {
		out.Templates = append(out.Templates, toAPITemplate(t, u.ID))
	}
	return writeJSON(c, http.StatusOK, out)
}

func (h *Handler) handleAPITemplateCreate(c echo.Context) error {
	var body apiTemplateBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	u := currentUser(c)
	t, err := h.wf.SaveTemplate(c.Request().Context(), u.ID, body.template())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusCreated, toAPITemplate(t, u.ID))
}

func (h *Handler) handleAPITemplateUpdate(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	var body apiTemplateBody
	if err := decodeBody(c, &body); err != nil {
		return err
	}
	u := currentUser(c)
	t, err := h.wf.UpdateTemplate(c.Request().Context(), u.ID, id, body.template())
	if err != nil {
		return err
	}
	return writeJSON(c, http.StatusOK, toAPITemplate(t, u.ID))
}

func (h *Handler) handleAPITemplateDelete(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.DeleteTemplate(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
