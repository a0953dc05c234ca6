package web

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpumarket/gpumarket/store"
)

// The contract (web/openapi.json) is held to the code three ways: it is a
// valid OpenAPI 3.1 document (kin-openapi's loader and validator, in its
// 3.1 mode); its paths are exactly the /api/v1 routes of the route table;
// and every answer the API tests get through apiCall is validated against
// it (openapi3filter, which validates 3.1 documents' schemas with JSON
// Schema 2020-12).

var contract struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

// loadContract loads and validates the embedded document once per run.
func loadContract(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	contract.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(openAPIDocument)
		if err != nil {
			contract.err = err
			return
		}
		if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
			contract.err = err
			return
		}
		contract.doc = doc
		contract.router, contract.err = gorillamux.NewRouter(doc)
	})
	if contract.err != nil {
		t.Fatalf("web/openapi.json: %v", contract.err)
	}
	return contract.doc, contract.router
}

func TestOpenAPIDocumentIsValidOpenAPI31(t *testing.T) {
	doc, _ := loadContract(t)
	if !doc.IsOpenAPI31OrLater() || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi: %q, want 3.1.0", doc.OpenAPI)
	}
	// The validator must run in its 3.1 mode: a 3.0-only form (a boolean
	// exclusiveMinimum) is refused in a copy of the document.
	broken := bytes.Replace(openAPIDocument, []byte(`"minimum": 1`), []byte(`"minimum": 1, "exclusiveMinimum": true`), 1)
	loader := openapi3.NewLoader()
	bd, err := loader.LoadFromData(broken)
	if err == nil {
		err = bd.Validate(loader.Context)
	}
	if err == nil {
		t.Fatal("a boolean exclusiveMinimum passed as OpenAPI 3.1")
	}
	// Every operation says which token scope it needs (or none, for the
	// document itself) and what each error answer carries.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.Security == nil {
				t.Errorf("%s %s: no security requirement", method, path)
			}
			if op.Summary == "" || op.Description == "" || op.OperationID == "" {
				t.Errorf("%s %s: summary, description and operationId are required", method, path)
			}
		}
	}
	// The schemas' examples (3.1's examples keyword, which the document's
	// validator leaves alone) match their schemas.
	examples := 0
	for name, ref := range doc.Components.Schemas {
		for _, ex := range ref.Value.Examples {
			examples++
			if err := ref.Value.VisitJSON(ex, openapi3.EnableJSONSchema2020()); err != nil {
				t.Errorf("example of %s: %v", name, err)
			}
		}
	}
	if examples < 10 {
		t.Errorf("only %d examples in the document", examples)
	}
	// A 400 is documented to name its field.
	v := doc.Components.Schemas["ValidationError"].Value
	if err := v.VisitJSON(map[string]any{"error": map[string]any{"code": "invalid", "message": "m"}}, openapi3.EnableJSONSchema2020()); err == nil {
		t.Fatal("a 400 without fields matches ValidationError")
	}
}

// apiRoutes is the set "METHOD /path" of the /api/v1 routes of the real
// route table, with :param written {param} as OpenAPI has it.
func apiRoutes(t *testing.T) map[string]bool {
	t.Helper()
	ctx := context.Background()
	db, err := store.Open(ctx, filepath.Join(t.TempDir(), "routes.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg := Config{BaseURL: "http://127.0.0.1", SessionKey: []byte(strings.Repeat("k", 32)), PasswordCost: bcrypt.MinCost, Now: func() time.Time { return testNow }}
	_, e, err := New(ctx, cfg, db, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`:([a-z_]+)`)
	out := map[string]bool{}
	for _, r := range e.Routes() {
		path, ok := strings.CutPrefix(r.Path, "/api/v1/")
		if !ok || strings.HasSuffix(path, "*") {
			continue
		}
		switch r.Method {
		case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch:
		default:
			continue // the group's not-found catch-alls
		}
		out[r.Method+" /"+param.ReplaceAllString(path, "{$1}")] = true
	}
	return out
}

// documented is the set "METHOD /path" the document describes.
func documented(doc *openapi3.T) map[string]bool {
	out := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			out[method+" "+path] = true
		}
	}
	return out
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, _ := loadContract(t)
	routes, described := apiRoutes(t), documented(doc)
	if len(routes) < 25 {
		t.Fatalf("only %d API routes found: the walk is broken", len(routes))
	}
	if missing, extra := setDiff(routes, described), setDiff(described, routes); len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("routes without a description in web/openapi.json: %v\ndescriptions of routes that do not exist: %v", missing, extra)
	}
}

// TestOpenAPIRouteCheckFails shows the check above can fail both ways:
// a route table with one more route, and a document with one more path.
func TestOpenAPIRouteCheckFails(t *testing.T) {
	doc, _ := loadContract(t)
	routes, described := apiRoutes(t), documented(doc)
	routes["GET /reservations/{id}/invoice"] = true
	if m := setDiff(routes, described); len(m) != 1 || m[0] != "GET /reservations/{id}/invoice" {
		t.Fatalf("an undocumented route was not found: %v", m)
	}
	delete(routes, "GET /reservations/{id}/invoice")
	delete(routes, "POST /reservations/{id}/pay")
	if x := setDiff(described, routes); len(x) != 1 || x[0] != "POST /reservations/{id}/pay" {
		t.Fatalf("a described route that does not exist was not found: %v", x)
	}
}

func setDiff(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// conformsToContract validates one answer of the API against the
// document: its status must be documented for the route (or fall under
// default) and its headers and body must match the schemas. Paths the
// document does not know (tests of unknown addresses) are skipped.
func (a *testApp) conformsToContract(req *http.Request, body []byte, resp *http.Response, respBody string) {
	a.t.Helper()
	_, router := loadContract(a.t)
	vreq, err := http.NewRequest(req.Method, "/api/v1"+strings.TrimPrefix(req.URL.Path, "/api/v1"), bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	vreq.URL.RawQuery = req.URL.RawQuery
	vreq.Header = req.Header.Clone()
	route, params, err := router.FindRoute(vreq)
	if err != nil {
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status:  resp.StatusCode,
		Header:  resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes([]byte(respBody))
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		a.t.Errorf("%s %s → %d does not match web/openapi.json: %v\nbody: %s", req.Method, req.URL.Path, resp.StatusCode, err, respBody)
	}
}

func TestOpenAPIServedAndReferencePage(t *testing.T) {
	app := newTestApp(t)
	r := app.client().get("/api/v1/openapi.json")
	if r.status != http.StatusOK || r.body != string(openAPIDocument) {
		t.Fatalf("openapi.json: %d, %d bytes", r.status, len(r.body))
	}
	r = app.client().get("/docs/api")
	if r.status != http.StatusOK {
		t.Fatalf("reference page: %d", r.status)
	}
	doc, _ := loadContract(t)
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			mustContain(t, r.body, `data-testid="api-op-`+op.OperationID+`"`, "<code>"+method+" /api/v1"+path+"</code>")
		}
	}
	mustContain(t, r.body, `href="/api/v1/openapi.json"`, "Token scope: <strong>write</strong>")
}
