package web

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
	"github.com/gpumarket/gpumarket/store"
	"github.com/gpumarket/gpumarket/views"
)

// Templates (docs/runtime.md): a buyer saves a runtime under a name,
// public or private, and picks one on the request form.

// readTemplateForm reads the template form into the values to redisplay;
// the secrets' textarea is never redisplayed.
func readTemplateForm(c echo.Context) views.TemplateFormValues {
	return views.TemplateFormValues{
		Name: c.FormValue("name"), Description: c.FormValue("description"), Public: c.FormValue("public") != "",
		Image: strings.TrimSpace(c.FormValue("runtime.image")), Launch: c.FormValue("runtime.launch"),
		OnStart: c.FormValue("runtime.on_start"), Ports: c.FormValue("runtime.ports"), Env: c.FormValue("runtime.env"),
		MinShmMB: strings.TrimSpace(c.FormValue("runtime.min_shm_mb")),
	}
}

// templateFromForm is the template the form describes: the runtime read
// as the request form reads it, and secrets as NAME=value lines (a NAME
// alone keeps the value saved before).
func templateFromForm(v views.TemplateFormValues, secrets string) (market.Template, market.Problems) {
	p := market.Problems{}
	rt := runtimeFromValues(p, views.RequestFormValues{Image: v.Image, Launch: v.Launch, OnStart: v.OnStart, Ports: v.Ports, Env: v.Env, MinShmMB: v.MinShmMB})
	if msg := market.TextProblem(secrets, true); msg != "" {
		// Said next to the secrets, whose values are never shown back.
		p.Add("secrets", msg)
		secrets = ""
	}
	for _, line := range strings.Split(strings.ReplaceAll(secrets, "\r\n", "\n"), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		name, value, _ := strings.Cut(line, "=")
		rt.Env = append(rt.Env, market.EnvVar{Name: strings.TrimSpace(name), Value: value, Secret: true})
	}
	return market.Template{Name: v.Name, Description: v.Description, Public: v.Public, Runtime: rt}, p
}

func (h *Handler) templatesPage(c echo.Context, status int, form views.TemplateFormValues, errs map[string]string) error {
	return h.templatesPageEditing(c, status, form, errs, views.TemplatesView{})
}

// templatesPageEditing is the templates page; edit names the template the
// form edits (EditURL, EditName), if any.
func (h *Handler) templatesPageEditing(c echo.Context, status int, form views.TemplateFormValues, errs map[string]string, edit views.TemplatesView) error {
	u := currentUser(c)
	ts, err := h.db.ListTemplates(c.Request().Context(), u.ID)
	if err != nil {
		return err
	}
	v := views.TemplatesView{CSRF: h.csrfToken(c), Form: form, Errors: errs, EditURL: edit.EditURL, EditName: edit.EditName}
	for _, t := range ts {
		var secrets []string
		for _, e := range t.Runtime.Env {
			if e.Secret {
				secrets = append(secrets, e.Name)
			}
		}
		use := defaultRequestValues(h.now())
		use.RuntimeTemplate = strconv.FormatInt(t.ID, 10)
		row := views.TemplateRow{ID: strconv.FormatInt(t.ID, 10), Name: t.Name, Description: t.Description, Image: t.Runtime.Image,
			Launch: string(t.Runtime.Launch), Ports: market.FormatPorts(t.Runtime.Ports), Author: t.AuthorName,
			UsedBy: strconv.Itoa(t.UsedBy), Public: t.Public, Secrets: strings.Join(secrets, ", "),
			UseURL: "/requests?" + requestQuery(use), Mine: t.AuthorID == u.ID,
			DeleteURL: fmt.Sprintf("/templates/%d/delete", t.ID), EditURL: fmt.Sprintf("/templates/%d/edit#template-form", t.ID)}
		v.Rows = append(v.Rows, row)
	}
	return render(c, status, views.Templates(h.page(c, "Environment templates"), v))
}

func (h *Handler) handleTemplates(c echo.Context) error {
	return h.templatesPage(c, http.StatusOK, views.TemplateFormValues{Launch: string(market.LaunchSSH)}, nil)
}

func (h *Handler) handleTemplateSave(c echo.Context) error {
	form := readTemplateForm(c)
	t, errs := templateFromForm(form, c.FormValue("secrets"))
	if len(errs) == 0 {
		_, err := h.wf.SaveTemplate(c.Request().Context(), currentUser(c).ID, t)
		if market.ErrorCode(err) == market.CodeInvalid {
			errs = market.FieldErrors(err)
		} else if err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return h.templatesPage(c, http.StatusUnprocessableEntity, form, errs)
	}
	h.setFlash(c, "ok", fmt.Sprintf("Saved the template “%s”.", strings.TrimSpace(form.Name)))
	return c.Redirect(http.StatusSeeOther, "/templates")
}

func (h *Handler) handleTemplateDelete(c echo.Context) error {
	id, err := pathID(c)
	if err != nil {
		return err
	}
	if err := h.wf.DeleteTemplate(c.Request().Context(), currentUser(c).ID, id); err != nil {
		return err
	}
	h.setFlash(c, "ok", "Deleted the template; reservations booked with it keep their environment.")
	return c.Redirect(http.StatusSeeOther, "/templates")
}

// ownTemplate is the signed-in author's template at the path's id;
// another user's, public or not, is not found.
func (h *Handler) ownTemplate(c echo.Context) (store.Template, error) {
	id, err := pathID(c)
	if err != nil {
		return store.Template{}, err
	}
	u := currentUser(c)
	t, err := h.db.FindTemplateForUse(c.Request().Context(), u.ID, id)
	if err != nil {
		return store.Template{}, err
	}
	if t.AuthorID != u.ID {
		return store.Template{}, market.Errorf(market.CodeNotFound, "That template could not be found.")
	}
	return t, nil
}

func (h *Handler) handleTemplateEdit(c echo.Context) error {
	t, err := h.ownTemplate(c)
	if err != nil {
		return err
	}
	var rv views.RequestFormValues
	runtimeValues(&rv, t.Runtime)
	form := views.TemplateFormValues{Name: t.Name, Description: t.Description, Public: t.Public, Image: rv.Image, Launch: rv.Launch,
		OnStart: rv.OnStart, Ports: rv.Ports, Env: rv.Env, MinShmMB: rv.MinShmMB}
	var names []string
	for _, e := range t.Runtime.Env {
		if e.Secret {
			names = append(names, e.Name)
		}
	}
	form.SecretNames = strings.Join(names, "\n")
	return h.templatesPageEditing(c, http.StatusOK, form, nil, views.TemplatesView{EditURL: fmt.Sprintf("/templates/%d", t.ID), EditName: t.Name})
}

func (h *Handler) handleTemplateUpdate(c echo.Context) error {
	old, err := h.ownTemplate(c)
	if err != nil {
		return err
	}
	form := readTemplateForm(c)
	form.SecretNames = c.FormValue("secrets")
	t, errs := templateFromForm(form, c.FormValue("secrets"))
	if len(errs) == 0 {
		_, err := h.wf.UpdateTemplate(c.Request().Context(), currentUser(c).ID, old.ID, t)
		if market.ErrorCode(err) == market.CodeInvalid {
			errs = market.FieldErrors(err)
		} else if err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		// Secrets typed with values are not shown back: only their names.
		form.SecretNames = secretNames(form.SecretNames)
		return h.templatesPageEditing(c, http.StatusUnprocessableEntity, form, errs,
			views.TemplatesView{EditURL: fmt.Sprintf("/templates/%d", old.ID), EditName: old.Name})
	}
	h.setFlash(c, "ok", fmt.Sprintf("Saved the template “%s”; reservations booked with it before keep their environment.", strings.TrimSpace(form.Name)))
	return c.Redirect(http.StatusSeeOther, "/templates")
}

// secretNames is the secrets textarea with every value removed.
func secretNames(text string) string {
	var names []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n") {
		if name, _, _ := strings.Cut(line, "="); strings.TrimSpace(name) != "" {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return strings.Join(names, "\n")
}
