package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// observationBody is a buyer's report of n devices named name.
func observationBody(pieceID int64, n int, name string, mib int64, tflops float64) string {
	devices := make([]string, n)
	for i := range devices {
		devices[i] = fmt.Sprintf(`{"name":%q,"memory_mib":%d}`, name, mib)
	}
	return fmt.Sprintf(`{"piece_id":%d,"devices":[%s],"benchmark":{"kind":"matmul_fp16","tflops":%g,"seconds":10}}`,
		pieceID, strings.Join(devices, ","), tflops)
}

// providerContradictions reads the provider's count of contradicting
// buyer reports on /admin/providers.
func providerContradictions(t *testing.T, admin *client, providerID int64) string {
	t.Helper()
	page := admin.get("/admin/providers").body
	m := regexp.MustCompile(fmt.Sprintf(`data-provider-id="%d"[\s\S]*?data-testid="provider-contradictions">([^<]*)<`, providerID)).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no contradictions column for provider %d", providerID)
	}
	return m[1]
}

// TestObservationBuyerMachineAgainstAgent: the buyer's machine reports
// what it sees through the API (only the reservation's buyer, with a write
// token, during the rental, strictly decoded); a report that agrees makes
// no flag, one that contradicts the agent (fewer devices, another model)
// shows on the reservation page, the admin's dispute page, the admins'
// providers page and the offer page.
func TestObservationBuyerMachineAgainstAgent(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("observe-host@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("observe-buyer@example.com", false)
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked offer %d, want %d", p.OfferID, o.ID)
	}
	resPath := fmt.Sprintf("/reservations/%d", r.ID)
	apiPath := fmt.Sprintf("/api/v1/reservations/%d/observations", r.ID)
	write := buyer.createToken("observe", "write")
	readOnly := buyer.createToken("observe-ro", "read")
	other := app.client()
	other.signUp("observe-other@example.com", false)
	otherWrite := other.createToken("other", "write")
	good := observationBody(p.ID, p.Devices, "NVIDIA H100 80GB HBM3", 81559, 850)

	// Before the rental starts there is nothing to observe.
	if res := app.apiCall(http.MethodPost, apiPath, write, good); res.status != http.StatusConflict {
		t.Errorf("before the start: %d %s", res.status, res.body)
	}
	mustContain(t, buyer.get(resPath).body, `data-testid="observation-closed"`)

	token := createHostToken(t, prov, o.ID, 0)
	app.tick(p.Start)
	app.beat(token, heartbeatBody(1, 8))
	perDevice := make([]float64, 8)
	for i := range perDevice {
		perDevice[i] = 900
	}
	if res := app.agentPost(token, fmt.Sprintf("/agent/v1/assignments/%d/acceptance", p.ID),
		map[string]any{"metric": "bf16_tflops", "per_device": perDevice, "duration_seconds": 30, "error": ""}); res.status != http.StatusOK {
		t.Fatalf("acceptance: %d %s", res.status, res.body)
	}

	// The page offers the script, which reads the token from the
	// environment and never holds one.
	page := buyer.get(resPath).body
	mustContain(t, page, `data-testid="observation-script"`, "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader,nounits",
		"GPUMARKET_TOKEN", apiPath, `data-testid="observation-form"`, `<label for="f-report">`)
	mustNotContain(t, page, write, readOnly)

	// Only the buyer, with a write token.
	if res := app.apiCall(http.MethodPost, apiPath, otherWrite, good); res.status != http.StatusNotFound {
		t.Errorf("another user's token: %d %s", res.status, res.body)
	}
	if res := app.apiCall(http.MethodPost, apiPath, readOnly, good); res.status != http.StatusForbidden {
		t.Errorf("read token: %d %s", res.status, res.body)
	}
	if res := app.apiCall(http.MethodPost, apiPath, "", good); res.status != http.StatusUnauthorized {
		t.Errorf("no token: %d %s", res.status, res.body)
	}
	// Strict decoding: every refusal names what was wrong.
	bad := []struct{ name, body, want string }{
		{"unknown field", `{"piece_id":1,"devices":[],"colour":"red"}`, "colour"},
		{"trailing data", good + `{}`, "trailing data"},
		{"wrong type", fmt.Sprintf(`{"piece_id":%d,"devices":[{"name":"x","memory_mib":"lots"}]}`, p.ID), "memory_mib"},
		{"no devices", fmt.Sprintf(`{"piece_id":%d,"devices":[]}`, p.ID), "devices"},
		{"bad benchmark", fmt.Sprintf(`{"piece_id":%d,"devices":[{"name":"x","memory_mib":1}],"benchmark":{"kind":"matmul_fp16","tflops":-3,"seconds":10}}`, p.ID), "benchmark.tflops"},
		{"another piece", observationBody(p.ID+1000, 1, "NVIDIA H100 80GB HBM3", 81559, 850), "piece_id"},
	}
	for _, b := range bad {
		res := app.apiCall(http.MethodPost, apiPath, write, b.body)
		if (res.status != http.StatusBadRequest && res.status != http.StatusUnprocessableEntity && res.status != http.StatusNotFound) ||
			!strings.Contains(res.body, b.want) {
			t.Errorf("%s: %d %s, want a refusal naming %s", b.name, res.status, res.body, b.want)
		}
	}

	// A report that agrees with the agent makes no flag.
	type result struct {
		Mismatch bool     `json:"mismatch"`
		Reasons  []string `json:"reasons"`
		Agent    string   `json:"agent"`
	}
	res := app.apiCall(http.MethodPost, apiPath, write, good)
	var ok result
	if res.status != http.StatusCreated || json.Unmarshal([]byte(res.body), &ok) != nil || ok.Mismatch || len(ok.Reasons) != 0 ||
		!strings.Contains(ok.Agent, "900 TFLOPS") {
		t.Fatalf("matching report: %d %s", res.status, res.body)
	}
	page = buyer.get(resPath).body
	mustContain(t, page, `data-testid="observation-match"`, "Your machine reported")
	mustNotContain(t, page, `data-testid="observation-mismatch"`)
	admin := app.adminClient("observe-admin@example.com")
	if n := providerContradictions(t, admin, prov.userID()); n != "0" {
		t.Errorf("contradictions after a matching report: %q, want 0", n)
	}
	mustNotContain(t, buyer.get(fmt.Sprintf("/offers/%d", o.ID)).body, `data-testid="offer-contradictions"`)

	// Fewer devices, and another model: a red flag with a reason for each.
	res = app.apiCall(http.MethodPost, apiPath, write, observationBody(p.ID, 2, "NVIDIA A10", 23028, 100))
	var flag result
	if res.status != http.StatusCreated || json.Unmarshal([]byte(res.body), &flag) != nil || !flag.Mismatch {
		t.Fatalf("mismatching report: %d %s", res.status, res.body)
	}
	joined := strings.Join(flag.Reasons, "\n")
	for _, want := range []string{fmt.Sprintf("your machine sees 2 devices; the piece holds %d", p.Devices), `device 0 is "NVIDIA A10", not the listed NVIDIA H100 80GB SXM`,
		"your benchmark measured 100 TFLOPS; the provider's agent reported 900 TFLOPS per device"} {
		if !strings.Contains(joined, want) {
			t.Errorf("reasons %q lack %q", flag.Reasons, want)
		}
	}
	page = buyer.get(resPath).body
	mustContain(t, page, `data-testid="observation-mismatch"`, "Your machine reported", "NVIDIA A10", "the provider&#39;s agent reported",
		"the piece holds")
	if n := providerContradictions(t, admin, prov.userID()); n != "1" {
		t.Errorf("contradictions: %q, want 1", n)
	}
	mustContain(t, buyer.get(fmt.Sprintf("/offers/%d", o.ID)).body, `data-testid="offer-contradictions"`,
		"1 buyer report in 90 days contradicted the provider&#39;s agent")

	// The admin's dispute page shows it as evidence.
	d := buyer.post(resPath+"/disputes/new", resPath+"/disputes", url.Values{"reason": {"not_as_listed"},
		"statement": {"nvidia-smi shows two A10s, not eight H100s."}})
	if d.status != http.StatusSeeOther {
		t.Fatalf("open dispute: %d\n%s", d.status, d.body)
	}
	id := regexp.MustCompile(`\d+$`).FindString(d.location)
	dp := admin.get("/admin/disputes/" + id).body
	mustContain(t, dp, `data-testid="dispute-observations"`, "The buyer's machine reported", "NVIDIA A10", `data-testid="observation-mismatch"`,
		`data-testid="observation-match"`)
	mustContain(t, admin.get("/admin"+resPath).body, `data-testid="dispute-observations"`, "NVIDIA A10")
}

// TestObservationForm: people without the API paste the script's output;
// a bad report re-renders the form with 422, the text kept and the message
// by it; another user's reservation is not found.
func TestObservationForm(t *testing.T) {
	app := newBillingApp(t)
	prov := app.client()
	prov.signUp("observe-form-host@example.com", true)
	o := app.ownOffer(prov.userID())
	buyer := app.client()
	buyer.signUp("observe-form-buyer@example.com", false)
	r := app.bookAndPay(buyer)
	p := r.Pieces[0]
	if p.OfferID != o.ID {
		t.Fatalf("booked offer %d, want %d", p.OfferID, o.ID)
	}
	app.tick(p.Start)
	resPath := fmt.Sprintf("/reservations/%d", r.ID)

	res := buyer.post(resPath, resPath+"/observations", url.Values{"report": {`{"piece_id":1,"devices":[],"gpus":3}`}})
	if res.status != http.StatusUnprocessableEntity {
		t.Fatalf("bad report: %d\n%s", res.status, res.body)
	}
	mustContain(t, res.body, `data-testid="error-report"`, "gpus", "&#34;gpus&#34;:3")

	stranger := app.client()
	stranger.signUp("observe-form-stranger@example.com", false)
	report := observationBody(p.ID, 1, "NVIDIA A100 80GB PCIe", 81920, 0)
	report = strings.Replace(report, `,"benchmark":{"kind":"matmul_fp16","tflops":0,"seconds":10}`, "", 1)
	if res := stranger.post("/account", resPath+"/observations", url.Values{"report": {report}}); res.status != http.StatusNotFound {
		t.Errorf("another user's reservation: %d", res.status)
	}
	res = buyer.post(resPath, resPath+"/observations", url.Values{"report": {report}})
	if res.status != http.StatusSeeOther || res.location != resPath+"#observations" {
		t.Fatalf("report: %d → %q\n%s", res.status, res.location, res.body)
	}
	mustContain(t, buyer.get(resPath).body, `data-testid="observation-mismatch"`, "NVIDIA A100 80GB PCIe", "not the listed NVIDIA H100 80GB SXM")
}

// TestObservationScriptBuildsReport runs the page's script with a stand-in
// nvidia-smi and no token: it prints a report the API accepts as it is.
func TestObservationScriptBuildsReport(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	fake := "#!/bin/sh\nprintf 'NVIDIA H100 80GB HBM3, 81559\\nNVIDIA H100 80GB HBM3, 81559\\n'\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "observe.sh")
	if err := os.WriteFile(script, []byte(observationScript("http://127.0.0.1:1/api/v1/reservations/5/observations", 31)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, script)
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "GPUMARKET_TOKEN="}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("script: %v\n%s", err, out)
	}
	obs, err := parseObservation(bytes.TrimSpace(out))
	if err != nil {
		t.Fatalf("report %s: %v", out, err)
	}
	if obs.PieceID != 31 || len(obs.Devices) != 2 || obs.Devices[1].Name != "NVIDIA H100 80GB HBM3" || obs.Devices[1].MemoryMiB != 81559 {
		t.Fatalf("report %s read as %+v", out, obs)
	}
}
