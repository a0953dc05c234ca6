package web

import (
	"bytes"
	"context"
	"database/sql"
	"go/ast"
	"go/parser"
	"go/token"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpumarket/gpumarket/market"
)

// TestEveryRouteRefusesUnstorableText walks the route table and sends every
// route text that SQLite would keep and PostgreSQL refuses — a NUL and a
// byte that is not UTF-8 — in each query parameter, form field and JSON
// field its handler reads (found in the handler's source and the helpers
// it calls) and a few common ones, signed in as an admin who is also a
// provider with a write token and the session's CSRF token, so neither
// authorisation nor CSRF hides the handler. No answer may be a 5xx (on
// PostgreSQL the database refuses such text with an error: a 500), a page
// refused at the boundary answers the site's page (400) naming the field,
// and on SQLite no row may hold a NUL or bytes that are not UTF-8 at the
// end. Run it on both engines (GPUMARKET_TEST_DB=postgres).
func TestEveryRouteRefusesUnstorableText(t *testing.T) {
	app := newTestApp(t)
	reads := handlerReads(t)
	n := 0
	signIn := func() *client {
		n++
		c := app.client()
		c.signUp("walker"+strconv.Itoa(n)+"@example.com", true)
		if err := app.makeAdmin(context.Background(), c.userID(), true); err != nil {
			t.Fatal(err)
		}
		return c
	}
	admin := signIn()
	tok := admin.createToken("walker", "write")
	csrf := admin.csrf("/account")
	last, sent := "", 0
	still := func() {
		if r := admin.get("/account"); r.status != http.StatusOK { // a route logged the walker out
			t.Errorf("%s signed the walker out (/account: %d → %s): a refusal must keep the session", last, r.status, r.location)
			admin = signIn()
			csrf = admin.csrf("/account")
		}
	}
	common := []string{"q", "name", "note", "page", "id", "next", "email"}
	bad := map[string]string{"NUL": "a\x00b", "not UTF-8": "a\xffb"}
	paramRe := regexp.MustCompile(`:[a-z_]+|\*`)
	check := func(what string, r response) {
		t.Helper()
		if r.status >= 500 {
			t.Errorf("%s: status %d\n%.600s", what, r.status, r.body)
		}
	}
	send := func(method, path, contentType, body string, bearer bool) response {
		t.Helper()
		req, err := http.NewRequest(method, app.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if bearer {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		last = method + " " + path + " " + body
		sent++
		resp, err := admin.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return read(t, resp)
	}
	routes := app.echo.Routes()
	sort.Slice(routes, func(i, j int) bool { // the routes that log out or lock the account last
		return !strings.Contains(routes[i].Path, "logout") && strings.Contains(routes[j].Path, "logout")
	})
	// The routes outside the page, API and agent groups read no query
	// string or path parameter into the store (the health check, the
	// embedded files, the icon's redirect; the processor's webhook is
	// verified by its signature before anything is read), and have no
	// session an error page could keep.
	ungrouped := map[string]bool{"/healthz": true, "/favicon.ico": true, "/webhooks/stripe": true}
	walked := 0
	for _, rt := range routes {
		if rt.Method == "echo_route_not_found" || rt.Method == "" || strings.HasPrefix(rt.Path, "/static") {
			continue
		}
		walked++
		path := paramRe.ReplaceAllString(rt.Path, "1")
		names := append(append([]string{}, reads[handlerName(rt.Name)]...), common...)
		api := strings.HasPrefix(rt.Path, "/api/") || strings.HasPrefix(rt.Path, "/agent/")
		for kind, v := range bad {
			// The query string, name by name.
			for _, name := range names {
				q := url.Values{name: {v}}
				r := send(rt.Method, path+"?"+q.Encode(), "", "", api)
				check(rt.Method+" "+rt.Path+" with "+kind+" in query "+name, r)
				if _, own := queriesCheckingTheirText[rt.Method+" "+rt.Path][name]; own {
					// its handler checks it: the form again, the message next to the field
					if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="error-`+name+`"`) {
						t.Errorf("%s %s with %s in query %s: status %d, want 422 with the message next to the field", rt.Method, rt.Path, kind, name, r.status)
					}
				} else if !api && ungrouped[rt.Path] {
					// no session, no store: see ungrouped
				} else if !api && r.status != http.StatusBadRequest {
					t.Errorf("%s %s with %s in query %s: status %d, want 400 at the boundary", rt.Method, rt.Path, kind, name, r.status)
				} else if !api && (!strings.Contains(r.body, `data-testid="error-page"`) || !strings.Contains(r.body, `action="/logout"`)) {
					t.Errorf("%s %s with %s in query %s: not the site's error page, signed in\n%.600s", rt.Method, rt.Path, kind, name, r.body)
				} else if !api && !strings.Contains(r.body, strconv.Quote(name)) && !strings.Contains(r.body, "&#34;"+name+"&#34;") {
					t.Errorf("%s %s with %s in query %s: the page does not name the parameter\n%.600s", rt.Method, rt.Path, kind, name, r.body)
				}
				still()
			}
			// A path parameter.
			if strings.Contains(rt.Path, ":") {
				p := paramRe.ReplaceAllString(rt.Path, url.PathEscape(v))
				check(rt.Method+" "+rt.Path+" with "+kind+" in a path parameter", send(rt.Method, p, "", "", api))
				still()
			}
			if rt.Method == http.MethodGet || rt.Method == http.MethodHead {
				continue
			}
			// The body, field by field: a form for a page, JSON for the API.
			for _, name := range names {
				if api {
					body := `{"` + name + `":` + jsonString(v) + `}`
					check(rt.Method+" "+rt.Path+" with "+kind+" in JSON "+name, send(rt.Method, path, "application/json", body, true))
					continue
				}
				form := url.Values{"_csrf": {csrf}, name: {v}}
				r := send(rt.Method, path, "application/x-www-form-urlencoded", form.Encode(), false)
				check(rt.Method+" "+rt.Path+" with "+kind+" in form field "+name, r)
				if !formsCheckingTheirText[rt.Method+" "+rt.Path] && !ungrouped[rt.Path] &&
					(r.status != http.StatusBadRequest || !strings.Contains(r.body, "&#34;"+name+"&#34;")) {
					t.Errorf("%s %s with %s in form field %s: status %d, want 400 naming the field", rt.Method, rt.Path, kind, name, r.status)
				}
				still()
			}
		}
	}
	if walked < 100 {
		t.Fatalf("walked %d routes: the route table was not read", walked)
	}
	t.Logf("walked %d routes with %d requests", walked, sent)

	// The forms that check their own fields, each field with a NUL or a
	// byte that is not UTF-8 in an otherwise correct form: the page again
	// with the message next to the field (422). The log-in form has one
	// message, at its top. A fresh app, so the sign-up throttle has not
	// counted the walker's accounts.
	fresh := newBillingApp(t)
	figure := regexp.MustCompile(`^(figure_.+)_(value|basis|method)$`)
	provider := fresh.client()
	provider.signUp("provider@example.com", true)
	offer := strconv.FormatInt(provider.createOffer(validOfferForm()), 10)
	sshKey := publicKeyLine(t, "ed25519")
	templateForm := func() url.Values {
		return url.Values{"name": {"Train"}, "description": {"my image"}, "runtime.image": {"docker.io/pytorch/pytorch:2.3.1"},
			"runtime.launch": {"ssh"}, "runtime.on_start": {"echo hi"}, "runtime.ports": {"6006"}, "runtime.env": {"MODE=train"},
			"runtime.min_shm_mb": {"1024"}, "secrets": {"HF_TOKEN=x"}}
	}
	if r := provider.post("/templates", "/templates", templateForm()); r.status != http.StatusSeeOther {
		t.Fatalf("save a template: status %d\n%.600s", r.status, r.body)
	}
	template := regexp.MustCompile(`data-testid="template-row" data-id="(\d+)"`).FindStringSubmatch(provider.get("/templates").body)[1]
	// A paid booking, for the forms of a reservation (its messages).
	host := fresh.client()
	host.signUp("host@example.com", true)
	fresh.manualOffer(host.userID(), testInstructions)
	fresh.connectPayouts(host)
	buyer := fresh.client()
	buyer.signUp("buyer@example.com", false)
	res := fresh.bookAndPay(buyer)
	booked := strconv.FormatInt(res.ID, 10)
	piece := res.Pieces[0]
	fresh.tick(piece.Start.Add(2 * time.Hour)) // it runs: incidents may be reported
	incidentForm := func() url.Values {
		return url.Values{"piece": {strconv.FormatInt(piece.ID, 10)}, "kind": {string(market.IncidentKinds[0])},
			"start": {piece.Start.Format(formTimeLayout)}, "end": {piece.Start.Add(time.Hour).Format(formTimeLayout)},
			"devices_affected": {"1"}, "degradation": {""}, "note": {"nvidia-smi:\n\tno devices"}}
	}
	opened := buyer.post("/reservations/"+booked, "/reservations/"+booked+"/disputes", url.Values{"reason": {"not_as_listed"}, "statement": {"A100s."}})
	if opened.status != http.StatusSeeOther {
		t.Fatalf("open a dispute: status %d\n%.600s", opened.status, opened.body)
	}
	dispute := opened.location // /disputes/N
	own := map[string]struct {
		from   string
		form   func() url.Values
		testid func(field string) string
		to     string  // where the form is sent, if not the route itself
		by     *client // who sends it, if not the provider
	}{
		"POST /signup": {"/signup", func() url.Values {
			return url.Values{"email": {"new@example.com"}, "password": {testPassword}, "display_name": {"New"}, "organisation": {"Org"}, "is_buyer": {"1"}}
		}, func(f string) string { return "error-" + f }, "", nil},
		"POST /login": {"/login", func() url.Values { return url.Values{"email": {"someone@example.com"}, "password": {testPassword}} },
			func(string) string { return "form-message" }, "", nil},
		"POST /provider/offers": {"/provider/offers/new", validOfferForm, func(f string) string { return "error-" + figure.ReplaceAllString(f, "$1") }, "", nil},
		"POST /account/tokens": {"/account", func() url.Values { return url.Values{"token_name": {"t"}, "token_scope": {"read"}} },
			func(f string) string { return "error-" + f }, "", nil},
		"POST /provider/offers/:id": {"/provider/offers/" + offer + "/edit", validOfferForm,
			func(f string) string { return "error-" + figure.ReplaceAllString(f, "$1") }, "/provider/offers/" + offer, nil},
		"POST /account/ssh-keys": {"/account", func() url.Values { return url.Values{"public_key": {sshKey}} },
			func(f string) string { return "error-" + f }, "", nil},
		"POST /templates": {"/templates", templateForm, func(f string) string { return "error-" + f }, "", nil},
		"POST /templates/:id": {"/templates/" + template + "/edit", templateForm, func(f string) string { return "error-" + f },
			"/templates/" + template, nil},
		"POST /reservations/:id/messages": {"/reservations/" + booked, func() url.Values { return url.Values{"body": {"Hello,\n\tthere"}} },
			func(f string) string { return "error-" + f }, "/reservations/" + booked + "/messages", buyer},
		"POST /reservations/:id/disputes": {"/reservations/" + booked,
			func() url.Values {
				return url.Values{"reason": {"not_as_listed"}, "statement": {"Not H100s:\n\tA100s."}}
			},
			func(f string) string { return "error-" + f }, "/reservations/" + booked + "/disputes", buyer},
		"POST /reservations/:id/incidents": {"/reservations/" + booked + "/incidents/new", incidentForm,
			func(f string) string { return "error-" + f }, "/reservations/" + booked + "/incidents", buyer},
		"POST /provider/bookings/:id/incidents": {"/provider/bookings/" + booked + "/incidents/new", incidentForm,
			func(f string) string { return "error-" + f }, "/provider/bookings/" + booked + "/incidents", host},
		"POST /disputes/:id/statements": {dispute, func() url.Values { return url.Values{"statement": {"More:\n\tthe log."}} },
			func(f string) string { return "error-" + f }, dispute + "/statements", buyer},
		"POST /reservations/:id/work": {"/reservations/" + booked, func() url.Values {
			return url.Values{"offer": {strconv.FormatInt(piece.OfferID, 10)}, "metric": {"tokens_per_sec"}, "latency_percentile": {"95"},
				"workload": {"Llama 3.1 8B, vLLM"}, "value": {"3600"}, "observed_minutes": {"60"}, "lost_minutes": {"0"}, "note": {"fine"}}
		}, func(f string) string { return "error-" + f }, "/reservations/" + booked + "/work", buyer},
		"POST /reservations/:id/observations": {"/reservations/" + booked, func() url.Values { return url.Values{"report": {"{}"}} },
			func(f string) string { return "error-" + f }, "/reservations/" + booked + "/observations", buyer},
		"GET /requests": {"/requests", builderForm, func(f string) string { return "error-" + f }, "", buyer},
	}
	if len(own) != len(formsCheckingTheirText) {
		t.Fatalf("formsCheckingTheirText has %d forms, this test checks %d", len(formsCheckingTheirText), len(own))
	}
	handlers := map[string]string{}
	for _, rt := range app.echo.Routes() { // the same table as fresh's
		handlers[rt.Method+" "+rt.Path] = handlerName(rt.Name)
	}
	for route, o := range own {
		if !formsCheckingTheirText[route] {
			t.Fatalf("%s is not in formsCheckingTheirText", route)
		}
		if strings.HasPrefix(route, "GET ") {
			// A GET form: each field its handler checks, in an otherwise
			// correct query, comes back next to the field.
			fields := queriesCheckingTheirText[route]
			if len(fields) == 0 {
				t.Fatalf("%s is a GET form without the query parameters its handler checks (queriesCheckingTheirText)", route)
			}
			for field := range fields {
				if _, ok := o.form()[field]; !ok {
					t.Errorf("%s: the baseline query lacks %s", route, field)
				}
				for kind, v := range bad {
					q := o.form()
					q.Set(field, v)
					r := o.by.get(strings.TrimPrefix(route, "GET ") + "?" + q.Encode())
					if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="`+o.testid(field)+`"`) {
						t.Errorf("%s with %s in %s: status %d, want 422 with the message next to the field", route, kind, field, r.status)
					}
				}
			}
			continue
		}
		to := o.to
		if to == "" {
			to = strings.TrimPrefix(route, "POST ")
		}
		for field := range o.form() {
			if field == "password" || strings.HasPrefix(field, "is_") {
				continue // hashed, or a checkbox: never stored as text
			}
			for kind, v := range bad {
				c := provider
				if o.by != nil {
					c = o.by
				}
				if route == "POST /signup" || route == "POST /login" {
					c = fresh.client()
				}
				form := o.form()
				form.Set(field, v)
				r := c.post(o.from, to, form)
				if r.status != http.StatusUnprocessableEntity || !strings.Contains(r.body, `data-testid="`+o.testid(field)+`"`) {
					t.Errorf("%s with %s in %s: status %d, want 422 with the message next to the field", route, kind, field, r.status)
				}
			}
		}
		// The other names its handler reads, each in an otherwise correct
		// form: whatever the answer, not a 5xx and nothing stored (below).
		for _, field := range reads[handlers[route]] {
			if _, ok := o.form()[field]; ok || field == "_csrf" {
				continue
			}
			for kind, v := range bad {
				c := provider
				if o.by != nil {
					c = o.by
				}
				if route == "POST /signup" || route == "POST /login" {
					c = fresh.client()
				}
				form := o.form()
				form.Set(field, v)
				check(route+" with "+kind+" in "+field+" of a correct form", c.post(o.from, to, form))
			}
		}
	}
	// A pasted report that is not text is said as such, not as the JSON
	// decoder's complaint.
	if r := buyer.post("/reservations/"+booked, "/reservations/"+booked+"/observations", url.Values{"report": {`{"devices": "a` + "\x00" + `"}`}}); r.status != http.StatusUnprocessableEntity ||
		!strings.Contains(r.body, "control character U+0000") {
		t.Errorf("a NUL in a pasted observation: status %d, want 422 naming U+0000\n%.800s", r.status, r.body)
	}
	if fresh.sqlite != "" {
		for _, row := range unstorableRows(t, fresh.sqlite) {
			t.Errorf("stored: %s", row)
		}
	}

	if app.sqlite != "" {
		for _, row := range unstorableRows(t, app.sqlite) {
			t.Errorf("stored: %s", row)
		}
	}
}

// jsonString is v as a JSON string literal, a NUL escaped and other bytes
// as they are (so a byte that is not UTF-8 reaches the server raw).
func jsonString(v string) string {
	return `"` + strings.ReplaceAll(v, "\x00", `\u0000`) + `"`
}

// handlerName is the method's name in a route's handler name
// ("…web.(*Handler).handleAdminAudit-fm" → "handleAdminAudit").
func handlerName(full string) string {
	full = strings.TrimSuffix(full, "-fm")
	return full[strings.LastIndex(full, ".")+1:]
}

// handlerReads maps each function and method of the package to the names
// it reads from a request (string literals passed to QueryParam,
// FormValue, Param, FormFile, Get — as in q.Get("action") — and the
// fields of a JSON struct it decodes are left to the common names),
// including what the package's functions it calls read, three calls deep.
func handlerReads(t *testing.T) map[string][]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	decls := map[string]*ast.FuncDecl{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, "_templ.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		af, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				decls[fd.Name.Name] = fd
			}
		}
	}
	readers := map[string]bool{"QueryParam": true, "FormValue": true, "Param": true, "FormFile": true, "Get": true}
	var collect func(name string, depth int, seen map[string]bool, into map[string]bool)
	collect = func(name string, depth int, seen map[string]bool, into map[string]bool) {
		fd := decls[name]
		if fd == nil || seen[name] || depth > 3 {
			return
		}
		seen[name] = true
		ast.Inspect(fd.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var callee string
			switch f := call.Fun.(type) {
			case *ast.Ident:
				callee = f.Name
			case *ast.SelectorExpr:
				callee = f.Sel.Name
			}
			if readers[callee] && len(call.Args) == 1 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil && s != "" && !strings.ContainsAny(s, " -") {
						into[s] = true
					}
				}
			}
			collect(callee, depth+1, seen, into)
			return true
		})
	}
	out := map[string][]string{}
	for name := range decls {
		into := map[string]bool{}
		collect(name, 0, map[string]bool{}, into)
		for s := range into {
			out[name] = append(out[name], s)
		}
		sort.Strings(out[name])
	}
	if len(out["handleAdminAudit"]) == 0 {
		t.Fatal("found no names the audit page reads: the source scan is broken")
	}
	return out
}

// unstorableRows lists the rows of the SQLite file at path any of whose
// text values holds a NUL or bytes that are not UTF-8.
func unstorableRows(t *testing.T, path string) []string {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	var found []string
	for _, tb := range tables {
		rs, err := db.Query(`SELECT rowid, * FROM "` + tb + `"`)
		if err != nil {
			rs, err = db.Query(`SELECT 0, * FROM "` + tb + `"`) // WITHOUT ROWID
			if err != nil {
				t.Fatal(err)
			}
		}
		cols, _ := rs.Columns()
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		for rs.Next() {
			if err := rs.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				if s, ok := v.(string); ok && (strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s)) {
					found = append(found, tb+" row "+strconv.Quote(strings.TrimSpace(toString(vals[0])))+" column "+cols[i]+": "+strconv.Quote(s))
				}
			}
		}
		rs.Close()
	}
	return found
}

func toString(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case string:
		return x
	}
	return ""
}

// TestMultipartFormsRefuseUnstorableText: a multipart page form (the
// request upload) with a NUL in a field, or bytes that are not UTF-8 in
// an uploaded file's name, is refused at the boundary with the page (400)
// naming the field, as an urlencoded one is; a correct upload still goes
// through.
func TestMultipartFormsRefuseUnstorableText(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	exported := c.get("/requests/export?" + trainingQuery().Encode()).body
	upload := func(field, value, filename string) response {
		t.Helper()
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		mw.WriteField("_csrf", c.csrf("/requests"))
		if field != "" {
			mw.WriteField(field, value)
		}
		fw, _ := mw.CreateFormFile("request_file", filename)
		fw.Write([]byte(exported))
		mw.Close()
		resp, err := c.http.Post(app.srv.URL+"/requests/upload", mw.FormDataContentType(), &buf)
		if err != nil {
			t.Fatal(err)
		}
		return read(t, resp)
	}
	if r := upload("note", "a\x00b", "req.json"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "&#34;note&#34;") ||
		!strings.Contains(r.body, "U+0000") {
		t.Errorf("NUL in a multipart field: status %d\n%.800s", r.status, r.body)
	}
	if r := upload("", "", "req\xff.json"); r.status != http.StatusBadRequest || !strings.Contains(r.body, "&#34;request_file&#34;") ||
		!strings.Contains(r.body, "not valid UTF-8") {
		t.Errorf("a file name that is not UTF-8: status %d\n%.800s", r.status, r.body)
	}
	if r := upload("note", "fine\nlines\tand tabs", "req.json"); r.status != http.StatusSeeOther {
		t.Errorf("a correct upload with line breaks in a field: status %d\n%.800s", r.status, r.body)
	}
}

// TestBoundaryPageNamesTheFieldByItsLabel: each label formLabels knows is
// of a field its route's handler reads, and a form refused at the
// boundary names that field by its label (and its name).
func TestBoundaryPageNamesTheFieldByItsLabel(t *testing.T) {
	app := newTestApp(t)
	reads := handlerReads(t)
	handlers := map[string]string{}
	for _, rt := range app.echo.Routes() {
		handlers[rt.Method+" "+rt.Path] = handlerName(rt.Name)
	}
	for route, labels := range formLabels {
		h, ok := handlers[route]
		if !ok {
			t.Errorf("formLabels names %s, which is not a route", route)
			continue
		}
		if formsCheckingTheirText[route] {
			t.Errorf("formLabels names %s, whose handler checks its own text: the boundary never shows its labels", route)
		}
		for field := range labels {
			if !slices.Contains(reads[h], field) {
				t.Errorf("formLabels labels %s of %s, which %s does not read (it reads %v)", field, route, h, reads[h])
			}
		}
	}
	c := app.client()
	c.signUp("labels@example.com", false)
	r := c.post("/account", "/reservations/1/reject", url.Values{"reason": {"a\x00b"}})
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, "“What was wrong (optional)” (&#34;reason&#34;)") {
		t.Errorf("NUL in the rejection's reason: status %d, want 400 naming “What was wrong (optional)”\n%.800s", r.status, r.body)
	}
	if r := c.post("/account", "/reservations/1/reject", url.Values{"other": {"a\x00b"}}); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, "field &#34;other&#34; cannot") {
		t.Errorf("NUL in a field without a label: status %d, want 400 naming the field\n%.800s", r.status, r.body)
	}
}
