package web

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/gpumarket/gpumarket/views"
)

// openAPIDocument is the JSON API's contract, OpenAPI 3.1: every /api/v1
// route, its scope, body, answers and errors. TestOpenAPIMatchesRoutes
// holds it to the route table both ways, and the API tests validate their
// answers against it (openapi_test.go).
//
//go:embed openapi.json
var openAPIDocument []byte

// handleOpenAPI serves the contract as it is in the repository.
func (h *Handler) handleOpenAPI(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.JSONBlob(http.StatusOK, openAPIDocument)
}

// handleAPIReference renders the contract as a page.
func (h *Handler) handleAPIReference(c echo.Context) error {
	v, err := apiReferenceView(openAPIDocument)
	if err != nil {
		return err
	}
	return render(c, http.StatusOK, views.APIReference(h.page(c, "API reference"), v))
}

// oaDoc is the part of an OpenAPI document the reference page shows.
type oaDoc struct {
	Info struct {
		Description string `json:"description"`
	} `json:"info"`
	Tags       []struct{ Name string } `json:"tags"`
	Paths      map[string]map[string]oaOperation
	Components struct {
		Responses map[string]oaResponse `json:"responses"`
	} `json:"components"`
}

type oaOperation struct {
	OperationID string                `json:"operationId"`
	Summary     string                `json:"summary"`
	Description string                `json:"description"`
	Tags        []string              `json:"tags"`
	Security    []map[string][]string `json:"security"`
	Parameters  []struct {
		Ref  string `json:"$ref"`
		Name string `json:"name"`
		In   string `json:"in"`
	} `json:"parameters"`
	RequestBody *struct {
		Required bool                   `json:"required"`
		Content  map[string]oaMediaType `json:"content"`
	} `json:"requestBody"`
	Responses map[string]oaResponse `json:"responses"`
}

type oaResponse struct {
	Ref         string                 `json:"$ref"`
	Description string                 `json:"description"`
	Content     map[string]oaMediaType `json:"content"`
}

type oaMediaType struct {
	Schema struct {
		Ref string `json:"$ref"`
	} `json:"schema"`
}

// oaMethods are the HTTP methods a path item may hold, in reading order.
var oaMethods = []string{"get", "put", "post", "delete", "patch"}

// apiReferenceView turns the document into the page's model, grouped by
// tag in the document's order, each group's routes by path then method.
func apiReferenceView(doc []byte) (views.APIReferenceView, error) {
	var d oaDoc
	if err := json.Unmarshal(doc, &d); err != nil {
		return views.APIReferenceView{}, fmt.Errorf("web: read openapi.json: %w", err)
	}
	v := views.APIReferenceView{Intro: plainText(d.Info.Description)}
	groups := map[string][]views.APIOperationView{}
	paths := make([]string, 0, len(d.Paths))
	for p := range d.Paths {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		for _, m := range oaMethods {
			o, ok := d.Paths[p][m]
			if !ok {
				continue
			}
			ov := views.APIOperationView{ID: o.OperationID, Method: strings.ToUpper(m), Path: "/api/v1" + p, Summary: o.Summary, Description: plainText(o.Description)}
			var scopes []string
			for _, s := range o.Security {
				for _, sc := range s["token"] {
					scopes = append(scopes, sc)
				}
			}
			ov.Scope = strings.Join(scopes, ", ")
			if ov.Scope == "" {
				ov.Scope = "none (public)"
			}
			var params []string
			for _, pa := range o.Parameters {
				if pa.Ref != "" {
					params = append(params, schemaName(pa.Ref)+" (path)")
					continue
				}
				params = append(params, pa.Name+" ("+pa.In+")")
			}
			ov.Parameters = strings.Join(params, ", ")
			if o.RequestBody != nil {
				ov.Body = schemaName(o.RequestBody.Content["application/json"].Schema.Ref)
				if !o.RequestBody.Required {
					ov.Body += " (optional)"
				}
			}
			codes := make([]string, 0, len(o.Responses))
			for code := range o.Responses {
				codes = append(codes, code)
			}
			sort.Strings(codes) // "default" sorts after the numbers
			for _, code := range codes {
				r := o.Responses[code]
				if r.Ref != "" {
					r = d.Components.Responses[schemaName(r.Ref)]
				}
				ov.Responses = append(ov.Responses, views.APIResponseView{Status: code, Description: r.Description,
					Schema: schemaName(r.Content["application/json"].Schema.Ref)})
			}
			tag := "other"
			if len(o.Tags) > 0 {
				tag = o.Tags[0]
			}
			groups[tag] = append(groups[tag], ov)
		}
	}
	for _, t := range d.Tags {
		if ops := groups[t.Name]; len(ops) > 0 {
			v.Groups = append(v.Groups, views.APIGroupView{Name: strings.ToUpper(t.Name[:1]) + t.Name[1:], Operations: ops})
		}
	}
	return v, nil
}

// schemaName is the last part of a "#/components/…/Name" reference.
func schemaName(ref string) string {
	return ref[strings.LastIndex(ref, "/")+1:]
}

// plainText is a description without its Markdown code marks, for the page.
func plainText(s string) string { return strings.ReplaceAll(s, "`", "") }
