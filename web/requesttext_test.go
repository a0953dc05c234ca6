package web

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// builderForm is a correct query of the request builder with every field
// its handler checks for text (requestTextFields) filled in.
func builderForm() url.Values {
	q := trainingQuery()
	for k, v := range map[string]string{
		"runtime.image": "docker.io/pytorch/pytorch:2.3.1", "runtime.launch": "ssh",
		"runtime.on_start": "pip install -r req.txt\n\techo ready", "runtime.ports": "6006", "runtime.env": "MODE=train\nSEED=1",
		"runtime.min_shm_mb": "1024", "workload.min_piece_devices": "8", "workload.work_device_hours": "",
		"workload.dataset_gb": "500", "constraints.min_memory_gb": "80", "constraints.max_price": "9.50",
		"constraints.budget": "5000", "constraints.min_reliability": "90", "constraints.max_carbon_g_per_kwh": "900",
		"constraints.min_driver_version": "535", "constraints.min_cuda_version": "12.2",
		"preferences.carbon_weight": "0", "preferences.reliability_weight": "0", "preferences.start_weight": "0",
		"preferences.providers_weight": "0", "preferences.preferred_weight": "0", "replacement.max_premium": "0.50",
	} {
		q.Set(k, v)
	}
	return q
}

// TestBuilderSaysUnstorableTextNextToTheField: an escape pasted into the
// builder's on-start script (a GET form) comes back as the builder with
// 422, the message next to that field and the rest of the input kept;
// a NUL in a parameter the builder does not check itself is still
// refused at the boundary (400, the site's error page naming it), so the
// exemption opens no hole.
func TestBuilderSaysUnstorableTextNextToTheField(t *testing.T) {
	app := newTestApp(t)
	c := app.client()
	c.signUp("builder@example.com", false)
	if r := c.get("/requests?" + builderForm().Encode()); r.status != http.StatusOK {
		t.Fatalf("the baseline query: status %d, want 200\n%.1500s", r.status, r.body)
	}
	q := builderForm()
	q.Set("runtime.on_start", "echo \x1b[31mred")
	r := c.get("/requests?" + q.Encode())
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("ESC in runtime.on_start: status %d, want 422\n%.1500s", r.status, r.body)
	}
	msg := `<span class="error" data-testid="error-runtime.on_start">Remove the invisible control character U+001B`
	if !strings.Contains(r.body, msg) {
		t.Errorf("ESC in runtime.on_start: the message is not next to the field\n%.3000s", r.body)
	}
	if n := strings.Count(r.body, `class="error"`); n != 1 {
		t.Errorf("ESC in runtime.on_start: %d field messages, want only the on-start script's", n)
	}
	for _, kept := range []string{
		`value="docker.io/pytorch/pytorch:2.3.1"`, `value="6006"`, `value="9.50"`, `value="12.2"`, `>MODE=train` + "\n" + `SEED=1</textarea>`,
	} {
		if !strings.Contains(r.body, kept) {
			t.Errorf("ESC in runtime.on_start: the input %s was not kept", kept)
		}
	}
	if strings.Contains(r.body, `data-testid="error-page"`) {
		t.Errorf("ESC in runtime.on_start: the boundary's error page, not the builder")
	}
	for _, name := range []string{"zzz", "constraints.require_agent", "workload.kind"} {
		q := builderForm()
		q.Set(name, "a\x00b")
		r := c.get("/requests?" + q.Encode())
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `data-testid="error-page"`) ||
			!strings.Contains(r.body, "&#34;"+name+"&#34;") || !strings.Contains(r.body, "U+0000") {
			t.Errorf("NUL in %s, which the builder does not check itself: status %d, want 400 at the boundary naming it\n%.800s", name, r.status, r.body)
		}
	}
	for route := range queriesCheckingTheirText {
		if !formsCheckingTheirText[route] {
			t.Errorf("%s checks its query's text but is not in formsCheckingTheirText (the walker's baseline)", route)
		}
	}
}
