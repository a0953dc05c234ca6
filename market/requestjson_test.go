package market

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const goodRequestJSON = `{
  "version": 1,
  "workload": {"kind": "batch", "devices": 16, "min_piece_devices": 4, "hours": 12,
               "checkpoint_mins": 30, "restart_mins": 5, "dataset_gb": 200, "data_region": "eu-north-se"},
  "constraints": {"families": ["H100", "A100"], "countries": ["SE", "FI"], "max_price_cents": 350,
                  "deadline": "2025-12-05T00:00:00Z", "allow_interruption": true},
  "preferences": {"cost_weight": 70, "carbon_weight": 30},
  "limit": 5
}`

func TestDecodeRequestJSON(t *testing.T) {
	r, err := DecodeRequestJSON([]byte(goodRequestJSON))
	if err != nil {
		t.Fatal(err)
	}
	want := Request{
		Workload: Workload{Kind: WorkBatch, Devices: 16, MinPieceDevices: 4, Hours: 12, CheckpointMins: 30,
			RestartMins: 5, DatasetGB: 200, DataRegionID: "eu-north-se"},
		Constraints: Constraints{Families: []string{"H100", "A100"}, Countries: []string{"SE", "FI"},
			MaxPricePerDeviceHour: 350, Deadline: time.Date(2025, 12, 5, 0, 0, 0, 0, time.UTC), AllowInterruption: true},
		Preferences: Preferences{CostWeight: 70, CarbonWeight: 30},
		Limit:       5,
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", r, want)
	}
	out, err := EncodeRequestJSON(r)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeRequestJSON(out)
	if err != nil || !reflect.DeepEqual(back, r) {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, back, r)
	}
}

func TestDecodeRequestJSONRejects(t *testing.T) {
	tests := []struct {
		name, doc, field, msg string
	}{
		{"unknown top-level", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1},"colour":"red"}`, "colour", "Unknown field"},
		{"unknown nested", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1,"gpus":4}}`, "gpus", "Unknown field"},
		{"wrong type", `{"version":1,"workload":{"kind":"batch","devices":"eight","hours":1}}`, "workload.devices", "whole number"},
		{"fraction", `{"version":1,"workload":{"kind":"batch","devices":1.5,"hours":1}}`, "workload.devices", "whole number"},
		{"overflow", `{"version":1,"workload":{"kind":"batch","devices":1e40,"hours":1}}`, "workload.devices", "out of range"},
		{"version", `{"version":2,"workload":{"kind":"batch","devices":1,"hours":1}}`, "version", "only version"},
		{"missing version", `{"workload":{"kind":"batch","devices":1,"hours":1}}`, "version", "only version"},
		{"bad time", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1},"constraints":{"deadline":"tomorrow"}}`, "constraints.deadline", "RFC 3339"},
		{"range devices", `{"version":1,"workload":{"kind":"batch","devices":0,"hours":1}}`, "workload.devices", "between 1"},
		{"range price", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1},"constraints":{"max_price_cents":-5}}`, "constraints.max_price_cents", "between"},
		{"range weight", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1},"preferences":{"cost_weight":101}}`, "preferences.cost_weight", "between 0 and 100"},
		{"kind", `{"version":1,"workload":{"kind":"mining","devices":1,"hours":1}}`, "workload.kind", "training, batch or inference"},
		{"unknown region", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1},"constraints":{"regions":["mars-1"]}}`, "constraints.regions", "mars-1"},
		{"trailing", `{"version":1,"workload":{"kind":"batch","devices":1,"hours":1}} {}`, "document", "after the closing brace"},
		{"syntax", `{"version":1,`, "document", "Not"},
		{"not object", `[1,2]`, "document", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRequestJSON([]byte(tt.doc))
			if ErrorCode(err) != CodeInvalid {
				t.Fatalf("code %q, want invalid (err %v)", ErrorCode(err), err)
			}
			msg, ok := FieldErrors(err)[tt.field]
			if !ok {
				t.Fatalf("no message for field %q: %v", tt.field, err)
			}
			if !strings.Contains(msg, tt.msg) {
				t.Fatalf("field %q message %q does not contain %q", tt.field, msg, tt.msg)
			}
		})
	}
}

func TestOfferJSONRoundTrip(t *testing.T) {
	o := benchOffer(42, 3)
	o.Title = "8× H100 in Oregon"
	o.Figures = []Figure{{Kind: FigureRelThroughput, Value: 3100, Basis: FigureEstimated, Method: "MLPerf GPT-3 175B, batch 2048"}}
	o.Access, o.AccessInstructions = AccessManual, "Send your public key in the messages;\nI add it within the hour."
	data, err := EncodeOfferJSON(o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeOfferJSON(data, o.AvailableFrom)
	if err != nil {
		t.Fatal(err)
	}
	want := o
	want.ID, want.ProviderID, want.Review, want.State = 0, 0, ReviewPending, OfferActive
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip\n%+v\nwant\n%+v", got, want)
	}

	bad := strings.Replace(string(data), `"price_cents": `, `"price_cents": -`, 1)
	_, err = DecodeOfferJSON([]byte(bad), o.AvailableFrom)
	if _, ok := FieldErrors(err)["price_cents"]; !ok || ErrorCode(err) != CodeInvalid {
		t.Fatalf("negative price: %v", err)
	}
	bad = strings.Replace(string(data), `"nodes"`, `"node_count"`, 1)
	_, err = DecodeOfferJSON([]byte(bad), o.AvailableFrom)
	if _, ok := FieldErrors(err)["node_count"]; !ok {
		t.Fatalf("unknown field: %v", err)
	}
}

// The acceptance period travels with the offer: written always, kept when
// read (0 is no period), the default when a document leaves it out, and
// validated like the form's.
func TestOfferJSONRejectMinutes(t *testing.T) {
	o := benchOffer(42, 3)
	o.RejectMinutes = 45
	data, err := EncodeOfferJSON(o)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"reject_minutes": 45`) {
		t.Fatalf("reject_minutes not written:\n%s", data)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	delete(doc, "reject_minutes")
	absent, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		doc   string
		want  int
		field string // a field error expected instead
	}{
		{name: "kept", doc: string(data), want: 45},
		{name: "none", doc: strings.Replace(string(data), `"reject_minutes": 45`, `"reject_minutes": 0`, 1), want: 0},
		{name: "absent is the default", doc: string(absent), want: 30},
		{name: "over a day", doc: strings.Replace(string(data), `"reject_minutes": 45`, `"reject_minutes": 1441`, 1), field: "reject_minutes"},
		{name: "negative", doc: strings.Replace(string(data), `"reject_minutes": 45`, `"reject_minutes": -1`, 1), field: "reject_minutes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeOfferJSON([]byte(tt.doc), o.AvailableFrom)
			if tt.field != "" {
				if _, ok := FieldErrors(err)[tt.field]; !ok || ErrorCode(err) != CodeInvalid {
					t.Fatalf("want a %q field error, got %v", tt.field, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.RejectMinutes != tt.want {
				t.Fatalf("RejectMinutes = %d, want %d", got.RejectMinutes, tt.want)
			}
		})
	}
}

// FuzzDecodeRequestJSON: the decoder never panics, fails only with an
// invalid *Error naming a field, and what it accepts round-trips.
func FuzzDecodeRequestJSON(f *testing.F) {
	f.Add([]byte(goodRequestJSON))
	f.Add([]byte(`{"version":1,"workload":{"kind":"training","devices":8,"work_device_hours":5000,"work_model":"nvidia-h100-80gb-sxm"}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequestJSON(data)
		if err != nil {
			if ErrorCode(err) != CodeInvalid || len(FieldErrors(err)) == 0 {
				t.Fatalf("error without a field: %v", err)
			}
			return
		}
		out, err := EncodeRequestJSON(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeRequestJSON(out)
		if err != nil {
			t.Fatalf("re-decoding our own output: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("round trip differs\n%+v\n%+v", back, r)
		}
	})
}
