package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestTemplatesAPI: create, list (public and own, secrets by name only),
// edit (a secret without a value keeps its value; a name in use is refused
// next to the field), delete; another user's template is not theirs to
// edit or delete, a read token writes nothing.
func TestTemplatesAPI(t *testing.T) {
	app := newTestApp(t)
	ada := app.client()
	ada.signUp("ada-api@example.com", false)
	write, read := ada.createToken("tpl", "write"), ada.createToken("look", "read")
	const secret = "hf_api_secret_value"
	body := `{"name":"Train","description":"mine","public":true,"runtime":{"image":"docker.io/pytorch/pytorch:2.3.1","launch":"ssh",
		"ports":[6006],"env":[{"name":"MODE","value":"train"},{"name":"HF_TOKEN","value":"` + secret + `","secret":true}]}}`
	if r := app.apiCall("POST", "/api/v1/templates", read, body); r.status != http.StatusForbidden {
		t.Fatalf("a read token creating: %d", r.status)
	}
	bad := app.apiCall("POST", "/api/v1/templates", write, `{"name":"Bad","runtime":{"image":"Not An Image","launch":"ssh"}}`)
	if bad.status != http.StatusBadRequest || !strings.Contains(bad.body, `"runtime.image"`) {
		t.Fatalf("an invalid template: %d %s", bad.status, bad.body)
	}
	r := app.apiCall("POST", "/api/v1/templates", write, body)
	if r.status != http.StatusCreated || strings.Contains(r.body, secret) {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created apiTemplate
	if err := json.Unmarshal([]byte(r.body), &created); err != nil || created.ID == 0 || created.Name != "Train" || !created.Public ||
		!created.Mine || created.Runtime.Image != "docker.io/pytorch/pytorch:2.3.1" || len(created.Runtime.Env) != 2 ||
		created.Runtime.Env[1].Name != "HF_TOKEN" || !created.Runtime.Env[1].Secret || created.Runtime.Env[1].Value != "" {
		t.Fatalf("created %+v %v", created, err)
	}
	if r := app.apiCall("POST", "/api/v1/templates", write, `{"name":"Other","runtime":{"image":"docker.io/library/busybox:1.36","launch":"entrypoint"}}`); r.status != http.StatusCreated {
		t.Fatalf("a second template: %d %s", r.status, r.body)
	}

	bob := app.client()
	bob.signUp("bob-api@example.com", false)
	bobWrite := bob.createToken("tpl", "write")
	var list struct{ Templates []apiTemplate }
	r = app.apiCall("GET", "/api/v1/templates", bob.createToken("look", "read"), "")
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || len(list.Templates) != 1 || list.Templates[0].ID != created.ID ||
		list.Templates[0].Mine || strings.Contains(r.body, secret) {
		t.Fatalf("bob's list (the public one only, not his): %s %v", r.body, err)
	}
	if r := app.apiCall("PUT", "/api/v1/templates/"+itoa(created.ID), bobWrite, body); r.status != http.StatusNotFound {
		t.Fatalf("bob editing ada's template: %d", r.status)
	}
	if r := app.apiCall("DELETE", "/api/v1/templates/"+itoa(created.ID), bobWrite, ""); r.status != http.StatusNotFound {
		t.Fatalf("bob deleting ada's template: %d", r.status)
	}

	// Renamed, made private, the secret sent by name alone: its value stays.
	edit := `{"name":"Train v2","description":"","public":false,"runtime":{"image":"docker.io/pytorch/pytorch:2.4.0","launch":"jupyter",
		"env":[{"name":"HF_TOKEN","secret":true}]}}`
	r = app.apiCall("PUT", "/api/v1/templates/"+itoa(created.ID), write, edit)
	var edited apiTemplate
	if err := json.Unmarshal([]byte(r.body), &edited); r.status != http.StatusOK || err != nil || edited.ID != created.ID ||
		edited.Name != "Train v2" || edited.Public || edited.Runtime.Launch != "jupyter" || len(edited.Runtime.Env) != 1 {
		t.Fatalf("edit: %d %s", r.status, r.body)
	}
	tpl, err := app.db.FindTemplateForUse(t.Context(), ada.userID(), created.ID)
	if err != nil || len(tpl.Runtime.Env) != 1 || tpl.Runtime.Env[0].Value != secret {
		t.Fatalf("the secret after an edit naming it without a value: %+v %v", tpl.Runtime.Env, err)
	}
	if r := app.apiCall("GET", "/api/v1/templates", bob.createToken("look2", "read"), ""); strings.Contains(r.body, "Train") {
		t.Fatalf("a template made private is still listed to others: %s", r.body)
	}
	clash := app.apiCall("PUT", "/api/v1/templates/"+itoa(created.ID), write, `{"name":"Other","runtime":{"image":"docker.io/library/busybox:1.36","launch":"ssh"}}`)
	if clash.status != http.StatusBadRequest || !strings.Contains(clash.body, "another template of that name") {
		t.Fatalf("renaming onto another template: %d %s", clash.status, clash.body)
	}

	if r := app.apiCall("DELETE", "/api/v1/templates/"+itoa(created.ID), write, ""); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if r := app.apiCall("DELETE", "/api/v1/templates/"+itoa(created.ID), write, ""); r.status != http.StatusNotFound {
		t.Fatalf("delete twice: %d", r.status)
	}
}

// TestTemplateEditForm: the author edits a template on its page: the form
// comes filled (secrets by name, no value), a bad field is refused next to
// it with 422 and no secret value shown back, a good edit is saved; another
// user cannot open the edit page.
func TestTemplateEditForm(t *testing.T) {
	app := newTestApp(t)
	ada := app.client()
	ada.signUp("ada-edit@example.com", false)
	const secret = "hf_form_secret"
	if r := ada.post("/templates", "/templates", url.Values{"name": {"Train"}, "runtime.image": {"docker.io/pytorch/pytorch:2.3.1"},
		"runtime.launch": {"ssh"}, "runtime.ports": {"6006"}, "runtime.env": {"MODE=train"}, "secrets": {"HF_TOKEN=" + secret}}); r.status != http.StatusSeeOther {
		t.Fatalf("save: %d", r.status)
	}
	list := ada.get("/templates").body
	id := regexp.MustCompile(`data-testid="template-row" data-id="(\d+)"`).FindStringSubmatch(list)[1]
	mustContain(t, list, `href="/templates/`+id+`/edit#template-form"`)
	editPath := "/templates/" + id + "/edit"
	page := ada.get(editPath)
	if page.status != http.StatusOK {
		t.Fatalf("edit page: %d", page.status)
	}
	mustContain(t, page.body, "Edit “Train”", `action="/templates/`+id+`"`, `value="docker.io/pytorch/pytorch:2.3.1"`, "MODE=train", ">HF_TOKEN</textarea>")
	mustNotContain(t, page.body, secret)

	bad := ada.post(editPath, "/templates/"+id, url.Values{"name": {"Train"}, "runtime.image": {"Not An Image"}, "runtime.launch": {"ssh"},
		"secrets": {"HF_TOKEN=typed_new_value"}})
	if bad.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad edit: %d", bad.status)
	}
	if got := errorText(bad.body, "runtime.image"); !strings.Contains(got, "not an image reference") {
		t.Errorf("error next to the image: %q", got)
	}
	mustContain(t, bad.body, `action="/templates/`+id+`"`)
	mustNotContain(t, bad.body, "typed_new_value")

	if r := ada.post(editPath, "/templates/"+id, url.Values{"name": {"Train two"}, "runtime.image": {"docker.io/pytorch/pytorch:2.4.0"},
		"runtime.launch": {"jupyter"}, "secrets": {"HF_TOKEN"}}); r.status != http.StatusSeeOther {
		t.Fatalf("edit: %d %s", r.status, r.body)
	}
	list = ada.get("/templates").body
	mustContain(t, list, "Train two", "docker.io/pytorch/pytorch:2.4.0", "Secrets: HF_TOKEN")
	mustNotContain(t, list, "<code>docker.io/pytorch/pytorch:2.3.1</code>")
	tpl, err := app.db.FindTemplateForUse(t.Context(), ada.userID(), int64(atoiT(t, id)))
	if err != nil || len(tpl.Runtime.Env) != 1 || tpl.Runtime.Env[0].Value != secret {
		t.Fatalf("the secret after the edit: %+v %v", tpl.Runtime.Env, err)
	}

	bob := app.client()
	bob.signUp("bob-edit@example.com", false)
	if r := bob.get(editPath); r.status != http.StatusNotFound {
		t.Errorf("another user's edit page: %d", r.status)
	}
}

func atoiT(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
