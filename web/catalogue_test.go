package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
)

var cardIDRe = regexp.MustCompile(`data-testid="offer-card" data-offer-id="(\d+)"`)

func cardIDs(body string) []string {
	var ids []string
	for _, m := range cardIDRe.FindAllStringSubmatch(body, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// TestCatalogueQueryIsTheForm: a query and the filter form that mean the
// same find the same offers; the form's filter is shown as a query; the
// two combine.
func TestCatalogueQueryIsTheForm(t *testing.T) {
	app := newTestApp(t)
	h100va := app.listedOffer("nvidia-h100-80gb-sxm", 8, 2, "us-east-va", 219)
	h100se := app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "eu-north-se", 259)
	h100pcie := app.listedOffer("nvidia-h100-80gb-pcie", 4, 1, "us-west-or", 199)
	a100 := app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "us-east-va", 149)
	c := app.client()

	cases := []struct {
		form, query, sort string
		want              []int64
	}{
		{"family=H100&max_price=2.50", "family=H100 price<=2.50", "", []int64{h100pcie.ID, h100va.ID}},
		{"min_devices=9", "devices>=9", "", []int64{h100va.ID}},
		{"country=US&min_memory=80", "country=US memory>=80GB", "", []int64{a100.ID, h100pcie.ID, h100va.ID}},
		{"network=100", "network>=100Gbps", "", []int64{h100va.ID}},
		{"model=nvidia-h100-80gb-sxm&sort=price_desc", "model=h100-80gb-sxm", "price_desc", []int64{h100se.ID, h100va.ID}},
	}
	for _, tc := range cases {
		form := c.get("/?" + tc.form)
		query := c.get("/?" + url.Values{"q": {tc.query}, "sort": {tc.sort}}.Encode())
		want := make([]string, len(tc.want))
		for i, id := range tc.want {
			want[i] = itoa(id)
		}
		if form.status != http.StatusOK || query.status != http.StatusOK || !slices.Equal(cardIDs(form.body), want) || !slices.Equal(cardIDs(query.body), want) {
			t.Errorf("form %s: %d %v; query %s: %d %v; want %v", tc.form, form.status, cardIDs(form.body), tc.query, query.status, cardIDs(query.body), want)
		}
	}

	// The form's filter written as a query, with a link that runs it.
	r := c.get("/?family=RTX+4090&max_price=2.50")
	mustContain(t, r.body, `data-testid="form-query"`, `<code>family=&#34;RTX 4090&#34; price&lt;=2.50</code>`,
		`href="/?q=family%3D%22RTX+4090%22+price%3C%3D2.50"`)
	// The query box carries the form's fields and the form carries the query, so they combine.
	r = c.get("/?family=H100&q=" + url.QueryEscape("country!=US"))
	if ids := cardIDs(r.body); !slices.Equal(ids, []string{itoa(h100se.ID)}) {
		t.Errorf("family=H100 with the query country!=US: %v", ids)
	}
	mustContain(t, r.body, `<input type="hidden" name="q" value="country!=US">`, `<input type="hidden" name="family" value="H100">`,
		`value="country!=US"`)
}

// TestCatalogueSaysWhatIsWrong: a bad query, an unknown filter value or
// an unknown sort is a 422 that says what is wrong next to the input and
// shows no offers, rather than "No offers" or another order.
func TestCatalogueSaysWhatIsWrong(t *testing.T) {
	app := newTestApp(t)
	app.listedOffer("nvidia-h100-80gb-sxm", 8, 1, "us-east-va", 219)
	c := app.client()

	cases := []struct {
		path, field, message string
	}{
		{"/?q=" + url.QueryEscape("devices>=8 famly=H100"), "q", "At character 12, “famly”: expected a field name: model, family,"},
		{"/?q=" + url.QueryEscape("memory>=80GiB"), "q", "At character 9, “80GiB”: expected an amount of memory, e.g. 80 or 80GB."},
		{"/?q=" + url.QueryEscape("family in (H100"), "q", "At character 16, the end of the query: expected “,” and another value, or “)”"},
		{"/?family=Z9000", "family", "Expected a family: B200, H200, H100"},
		{"/?model=nvidia-h900", "model", "Expected a model, e.g. h100-80gb-sxm"},
		{"/?region=mars", "region", "Expected a region id such as us-west-or"},
		{"/?country=XX", "country", "Expected a country code: AU, CA, DE"},
		{"/?interruptible=maybe", "interruptible", "Expected yes or no, not “maybe”."},
		{"/?network=fast", "network", "Expected a speed, e.g. 400 or 400Gbps, not “fast”."},
		{"/?min_devices=-1", "min_devices", "Expected a number of devices, e.g. 8, not “-1”."},
		{"/?sort=cheapest", "sort", "There is no order “cheapest”: choose one from the list"},
		{"/?model=nvidia-a100-80gb-sxm&family=H100", "family", "Expected a value that fits the conditions before it: together they leave no model"},
	}
	for _, tc := range cases {
		r := c.get(tc.path)
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: status %d, want 422", tc.path, r.status)
			continue
		}
		mustContain(t, r.body, `data-testid="error-`+tc.field+`"`, htmlEscape(tc.message), `data-testid="filter-not-applied"`, "Filter not applied")
		if ids := cardIDs(r.body); len(ids) != 0 {
			t.Errorf("%s: shows offers %v beside the mistake", tc.path, ids)
		}
		mustNotContain(t, r.body, "No offers match this filter")
	}
}

func htmlEscape(s string) string {
	return strings.NewReplacer(`"`, "&#34;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// TestAPIOffersQuery: the API takes the same query as q= and names the
// token of a bad one.
func TestAPIOffersQuery(t *testing.T) {
	app := newTestApp(t)
	va := app.listedOffer("nvidia-h100-80gb-sxm", 8, 2, "us-east-va", 219)
	app.listedOffer("nvidia-a100-80gb-sxm", 8, 1, "us-east-va", 149)
	c := app.client()
	c.signUp("bot@example.com", false)
	tok := c.createToken("search", "read")

	r := app.apiCall("GET", "/api/v1/offers?q="+url.QueryEscape("num_gpus>=8 gpu_name=H100 dph<2.5"), tok, "")
	var list struct {
		Offers []struct {
			ID int64 `json:"id"`
		} `json:"offers"`
		Total int `json:"total"`
	}
	if err := json.Unmarshal([]byte(r.body), &list); err != nil || r.status != http.StatusOK || list.Total != 1 || len(list.Offers) != 1 || list.Offers[0].ID != va.ID {
		t.Fatalf("query search: %d %s (%v)", r.status, r.body, err)
	}

	r = app.apiCall("GET", "/api/v1/offers?q="+url.QueryEscape("gpus>=8 gpu_name=H100 dph<two"), tok, "")
	var e apiErrorBody
	if err := json.Unmarshal([]byte(r.body), &e); err != nil {
		t.Fatal(err)
	}
	want := "At character 27, “two”: expected a price in dollars per device-hour, e.g. 2.50 or $2.50."
	if r.status != http.StatusBadRequest || e.Error.Code != "invalid" || e.Error.Fields["q"] != want || e.Error.Message != "q: "+want {
		t.Errorf("bad query: %d %s", r.status, r.body)
	}
	r = app.apiCall("GET", "/api/v1/offers?sort=cheapest", tok, "")
	if r.status != http.StatusBadRequest || !strings.Contains(r.body, `"sort":"There is no order “cheapest”`) {
		t.Errorf("bad sort: %d %s", r.status, r.body)
	}
}
