package web

import (
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/market"
)

// Text at the boundary. SQLite keeps a NUL byte or bytes that are not
// UTF-8 and PostgreSQL refuses them (a 500 where SQLite answered 200, and a
// database migrate-db cannot copy), so no request's text reaches a handler
// unless market.TextProblem accepts it: refuseUnstorableURL checks the
// path parameters and the query string of every page, API and agent route
// (web/routes.go: on the pages after the session is loaded, so the error
// page keeps the visitor signed in), refuseUnstorableForm the form fields
// (urlencoded and multipart) of every page, and refuseUnstorableText the
// query strings, forms and JSON bodies of the API and the agent. The few
// routes outside those groups (the health check, the embedded files, the
// icon, the processor's signed webhook) read no text into the store.
//
// JSON carried inside a form field or an uploaded file (a pasted
// observation, an uploaded request) is decoded by its handler after the
// boundary; the strings in it are the domain's to check (market).

// refuseUnstorableURL refuses a request whose path parameters
// or query string (names and values) hold text market.TextProblem refuses
// (line breaks and tabs are kept in values, as a textarea of a GET form
// sends them). The query parameters a GET form's handler checks itself
// (queriesCheckingTheirText) are left to it; every other parameter, and
// every parameter's name, is still checked here. A page answers 400 with the site's error page naming the
// parameter, an API or agent request its JSON error naming it; nothing
// runs.
func refuseUnstorableURL(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for i, name := range c.ParamNames() {
			if i >= len(c.ParamValues()) {
				break
			}
			v := c.ParamValues()[i]
			if u, err := url.PathUnescape(v); err == nil {
				v = u
			}
			if msg := market.TextProblem(v, false); msg != "" {
				return unstorableText(c, "address", name, msg)
			}
		}
		own := queriesCheckingTheirText[c.Request().Method+" "+c.Path()]
		if k, msg := valuesTextProblem(c.Request().URL.Query(), own); msg != "" {
			return unstorableText(c, "address", k, msg)
		}
		return next(c)
	}
}

// refuseUnstorableForm refuses a page's form (urlencoded or multipart)
// any of whose fields (names and values; line breaks and tabs are kept in
// values, as a textarea sends them) holds text market.TextProblem refuses,
// with the site's error page (400) naming the field; nothing runs. A
// browser sends a form as UTF-8 and a person cannot type a NUL, so this
// answers crafted requests and pasted control characters; the forms whose
// handler checks each field it reads and re-renders the page with the
// message next to the field (422) are left to it (formsCheckingTheirText).
// An uploaded file's content is the handler's to read (it is not a field);
// its file name is checked.
func refuseUnstorableForm(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Method == http.MethodGet || req.Method == http.MethodHead || req.Body == nil ||
			formsCheckingTheirText[req.Method+" "+c.Path()] {
			return next(c)
		}
		ct, _, _ := mime.ParseMediaType(req.Header.Get(echo.HeaderContentType))
		var fields url.Values
		switch ct {
		case echo.MIMEApplicationForm:
			if err := req.ParseForm(); err != nil {
				return next(c) // the handler reports what it cannot read
			}
			fields = req.PostForm
		case echo.MIMEMultipartForm:
			if err := req.ParseMultipartForm(multipartMemory); err != nil {
				return next(c)
			}
			fields = url.Values(req.MultipartForm.Value)
			for k, fhs := range req.MultipartForm.File {
				for _, fh := range fhs {
					if msg := market.TextProblem(fh.Filename, false); msg != "" {
						return unstorableText(c, "form", k, msg)
					}
				}
			}
		default:
			return next(c)
		}
		if k, msg := valuesTextProblem(fields, nil); msg != "" {
			return unstorableText(c, "form", k, msg)
		}
		return next(c)
	}
}

// valuesTextProblem finds the first query parameter or form field whose
// name, or any value, market.TextProblem refuses (line breaks and tabs
// are kept in values, as a textarea sends them), with its message; the
// values of the names skip holds (whatever it maps them to) are left to
// their handler.
func valuesTextProblem(vals url.Values, skip map[string]bool) (field, msg string) {
	for k, vs := range vals {
		if msg := market.TextProblem(k, false); msg != "" {
			return k, msg
		}
		if _, ok := skip[k]; ok {
			continue
		}
		for _, v := range vs {
			if msg := market.TextProblem(v, true); msg != "" {
				return k, msg
			}
		}
	}
	return "", ""
}

// multipartMemory is how much of a multipart form is held in memory while
// its fields are checked (the rest goes to temporary files, as the
// handler's own c.FormFile would do); the body limit bounds the whole.
const multipartMemory = 32 << 20

// formsCheckingTheirText are the page forms ("METHOD /route") whose handler
// checks every text field it reads with market.TextProblem (or stricter)
// and re-renders its page with the message next to the field and 422, as
// a person who pasted a control character expects; refuseUnstorableForm
// leaves their fields to them (TestEveryRouteRefusesUnstorableText checks
// each field they read).
var formsCheckingTheirText = map[string]bool{
	"POST /signup":                          true,
	"POST /login":                           true,
	"POST /provider/offers":                 true,
	"POST /account/tokens":                  true,
	"POST /provider/offers/:id":             true,
	"POST /account/ssh-keys":                true,
	"POST /templates":                       true,
	"POST /templates/:id":                   true,
	"POST /reservations/:id/messages":       true,
	"POST /reservations/:id/disputes":       true,
	"POST /reservations/:id/incidents":      true,
	"POST /provider/bookings/:id/incidents": true,
	"POST /disputes/:id/statements":         true,
	"POST /reservations/:id/work":           true,
	"POST /reservations/:id/observations":   true,
	"GET /requests":                         true, // a GET form: its query (queriesCheckingTheirText)
}

// queriesCheckingTheirText are the GET forms ("METHOD /route", each also in
// formsCheckingTheirText) whose handler checks the named query parameters
// with market.TextProblem (the value: true where the field is a textarea,
// so line breaks and tabs are kept) and re-renders the form with the
// message next to the field and 422. refuseUnstorableURL skips only those
// parameters' values: any other parameter of the route, and every name, is
// refused at the boundary as on every other page.
var queriesCheckingTheirText = map[string]map[string]bool{
	"GET /requests": requestTextFields,
}

// formLabels are the labels of the free-text fields of the page forms
// still refused at the boundary ("METHOD /route" → field → label, as the
// form shows it), so the error page names the field as the person saw it.
var formLabels = map[string]map[string]string{
	"POST /reservations/:id/reject":                         {"reason": "What was wrong (optional)"},
	"POST /provider/offers/:id/carbon":                      {"source": "Source", "hourly_g": "gCO2/kWh for each hour, 00:00 to 23:00 UTC"},
	"POST /provider/bookings/:id/incidents/:incident/notes": {"note": "Add a note for the buyer and the admins"},
}

// unstorableText is the error for text refused at the boundary: where
// ("address" or "form"), the parameter or field's name and why. An API or
// agent request gets its JSON error with the field (400, as
// refuseUnstorableText answers); a page the site's error page (400) that
// names the field and says what to do.
func unstorableText(c echo.Context, where, field, msg string) error {
	shown := fmt.Sprintf("%+q", field) // a name may itself hold the bad bytes
	fe := &market.Error{Code: market.CodeInvalid, Message: fmt.Sprintf("%s (in %s)", msg, shown), Fields: map[string]string{field: msg}}
	if p := c.Request().URL.Path; strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/agent/") {
		return fe
	}
	var page string
	if label := formLabels[c.Request().Method+" "+c.Path()][field]; where == "form" && label != "" {
		page = fmt.Sprintf("The form's field “%s” (%s) cannot be kept: %s Go back, correct that field and send the form again; nothing was changed.", label, shown, msg)
	} else if where == "form" {
		page = fmt.Sprintf("The form's field %s cannot be kept: %s Go back, correct that field and send the form again; nothing was changed.", shown, msg)
	} else {
		page = fmt.Sprintf("The address's parameter %s cannot be read: %s Correct the address (or go back and use the page's own links and forms); nothing was changed.", shown, msg)
	}
	return &echo.HTTPError{Code: http.StatusBadRequest, Message: page, Internal: &market.Error{Code: market.CodeInvalid, Message: page, Fields: fe.Fields}}
}
