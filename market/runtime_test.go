package market

import (
	"bytes"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestValidateRuntime(t *testing.T) {
	long := strings.Repeat("x", MaxOnStartBytes+1)
	cases := []struct {
		name  string
		rt    Runtime
		field string // "" = valid
		want  string // part of the message
	}{
		{"none", Runtime{}, "", ""},
		{"plain", Runtime{Image: "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", Launch: LaunchSSH}, "", ""},
		{"digest", Runtime{Image: "ghcr.io/org/img@sha256:" + strings.Repeat("a", 64)}, "", ""},
		{"registry port", Runtime{Image: "localhost:5000/train:v1", Launch: LaunchEntrypoint}, "", ""},
		{"upper case path", Runtime{Image: "docker.io/NVIDIA/cuda"}, "runtime.image", "not an image reference"},
		{"spaces", Runtime{Image: "ubuntu 22.04"}, "runtime.image", "not an image reference"},
		{"upper case first part", Runtime{Image: "UPPER/case"}, "runtime.image", "not an image reference"},
		{"registry with upper case", Runtime{Image: "Registry.Example.com/team/img:1"}, "", ""},
		{"missing image", Runtime{Ports: []int{8080}}, "runtime.image", "Name the image"},
		{"bad launch", Runtime{Image: "ubuntu", Launch: "vnc"}, "runtime.launch", "ssh, jupyter or entrypoint"},
		{"oversized script", Runtime{Image: "ubuntu", OnStart: long}, "runtime.on_start", "keep it under 16,384"},
		{"script with entrypoint", Runtime{Image: "ubuntu", Launch: LaunchEntrypoint, OnStart: "echo hi"}, "runtime.on_start", "own command"},
		{"reserved 22", Runtime{Image: "ubuntu", Ports: []int{8080, 22}}, "runtime.ports", "Port 22 is reserved"},
		{"reserved 8888", Runtime{Image: "ubuntu", Ports: []int{8888}}, "runtime.ports", "Port 8888 is reserved"},
		{"port range", Runtime{Image: "ubuntu", Ports: []int{70000}}, "runtime.ports", "70000 is not a port"},
		{"port twice", Runtime{Image: "ubuntu", Ports: []int{6006, 6006}}, "runtime.ports", "twice"},
		{"env name", Runtime{Image: "ubuntu", Env: []EnvVar{{Name: "1BAD", Value: "x"}}}, "runtime.env", `"1BAD" is not a variable name`},
		{"env dash", Runtime{Image: "ubuntu", Env: []EnvVar{{Name: "MY-VAR", Value: "x"}}}, "runtime.env", "not a variable name"},
		{"nvidia env", Runtime{Image: "ubuntu", Env: []EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}, "runtime.env", "agent's to set"},
		{"env twice", Runtime{Image: "ubuntu", Env: []EnvVar{{Name: "A", Value: "1"}, {Name: "A", Value: "2"}}}, "runtime.env", "A is set twice"},
		{"shm", Runtime{Image: "ubuntu", MinShmMB: -1}, "runtime.min_shm_mb", "between 0 and"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rt := c.rt
			err := ValidateRuntime(&rt)
			if c.field == "" {
				if err != nil {
					t.Fatalf("want valid, got %v (%v)", err, FieldErrors(err))
				}
				if !rt.IsZero() && rt.Launch == "" {
					t.Fatalf("launch not defaulted")
				}
				return
			}
			msg := FieldErrors(err)[c.field]
			if !strings.Contains(msg, c.want) {
				t.Fatalf("field %s: got %q (all %v), want %q", c.field, msg, FieldErrors(err), c.want)
			}
		})
	}
}

// A secret's value is in none of: the portable JSON, %v, structured logs,
// the runtime without secrets; it is in the stored form the agent gets.
func TestRuntimeSecretsNeverShown(t *testing.T) {
	const secret = "hf_SECRETVALUE123"
	req := oneDeviceJob(WorkBatch)
	req.Runtime = Runtime{Image: "docker.io/pytorch/pytorch:2.3.1", Launch: LaunchJupyter, Ports: []int{6006},
		Env: []EnvVar{{Name: "HF_TOKEN", Value: secret, Secret: true}, {Name: "MODE", Value: "train"}}, MinShmMB: 8192, TemplateID: 7}
	if err := ValidateRequest(&req); err != nil {
		t.Fatal(err)
	}
	doc, err := EncodeRequestJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(doc, []byte(secret)) {
		t.Fatalf("secret in portable JSON:\n%s", doc)
	}
	if !bytes.Contains(doc, []byte(`"HF_TOKEN"`)) || !bytes.Contains(doc, []byte(`"train"`)) {
		t.Fatalf("names or plain values missing:\n%s", doc)
	}
	back, err := DecodeRequestJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	if got := back.Runtime.MissingSecrets(); len(got) != 1 || got[0] != "HF_TOKEN" {
		t.Fatalf("missing secrets %v", got)
	}
	if back.Runtime.Image != req.Runtime.Image || back.Runtime.Launch != LaunchJupyter || FormatPorts(back.Runtime.Ports) != "6006" ||
		back.Runtime.MinShmMB != 8192 || back.Runtime.TemplateID != 7 || back.Runtime.Env[1].Value != "train" {
		t.Fatalf("round trip: %+v", back.Runtime)
	}
	filled := back.Runtime.FillSecrets(req.Runtime)
	if filled.Env[0].Value != secret || back.Runtime.Env[0].Value != "" {
		t.Fatalf("fill: %v / original changed %v", filled.Env, back.Runtime.Env)
	}
	if s := fmt.Sprintf("%v %+v", req.Runtime, req.Runtime); strings.Contains(s, secret) {
		t.Fatalf("secret in %%v: %s", s)
	}
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "env", req.Runtime.Env[0])
	if strings.Contains(logs.String(), secret) || !strings.Contains(logs.String(), "HF_TOKEN") {
		t.Fatalf("log: %s", logs.String())
	}
	stored, err := EncodeRuntimeStored(req.Runtime)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRuntimeStored(stored)
	if err != nil || got.Env[0].Value != secret {
		t.Fatalf("stored form lost the secret: %v %v", got.Env, err)
	}
}

// A request with a runtime uses only offers that run containers with CDI,
// and the explanation counts the others like any other constraint.
func TestMatchRuntimeIsHardConstraint(t *testing.T) {
	acc := "nvidia-h100-80gb-sxm"
	podman := plainOffer(1, acc, "us-east-va", 8, 300)
	podman.Containers = ContainerSupport{Engine: EnginePodman, CDI: true}
	noCDI := plainOffer(2, acc, "us-east-va", 8, 200)
	noCDI.Containers = ContainerSupport{Engine: EngineDocker}
	bare1 := plainOffer(3, acc, "us-east-va", 8, 100)
	bare2 := plainOffer(4, acc, "us-east-va", 8, 150)
	cands := []Candidate{{Offer: podman}, {Offer: noCDI}, {Offer: bare1}, {Offer: bare2}}

	req := oneDeviceJob(WorkTraining)
	res, err := Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Quotes) != 4 {
		t.Fatalf("without a runtime every offer is quoted: %d", len(res.Quotes))
	}
	req.Runtime = Runtime{Image: "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04"}
	res, err = Match(cands, nil, req, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := quotedOffers(res); !sameIDs(got, []int64{1}) {
		t.Fatalf("quoted %v, want only the podman+CDI offer", got)
	}
	if s := res.Explanation.Summary(); !strings.Contains(s, "3 do not run containers") {
		t.Fatalf("summary %q", s)
	}
	var found bool
	for _, el := range res.Explanation.Eliminated {
		if el.Constraint == ConstraintContainer && el.Count == 3 {
			found = true
		}
	}
	if !found {
		t.Fatalf("eliminated %+v", res.Explanation.Eliminated)
	}
}

func TestValidateOfferContainers(t *testing.T) {
	o := plainOffer(1, "nvidia-h100-80gb-sxm", "us-east-va", 8, 300)
	o.Review, o.State = "", ""
	o.Containers = ContainerSupport{CDI: true}
	err := ValidateOffer(&o, t0)
	if msg := FieldErrors(err)["container_engine"]; !strings.Contains(msg, "Choose the engine") {
		t.Fatalf("got %q", msg)
	}
	o.Containers = ContainerSupport{Engine: "lxc"}
	if msg := FieldErrors(ValidateOffer(&o, t0))["container_engine"]; !strings.Contains(msg, "podman, docker") {
		t.Fatalf("got %q", msg)
	}
	o.Containers = ContainerSupport{Engine: EngineDocker, CDI: true, MaxImageGB: 50, ImageCache: true}
	if msg := FieldErrors(ValidateOffer(&o, t0))["container_engine"]; msg != "" {
		t.Fatalf("got %q", msg)
	}
	doc, err := EncodeOfferJSON(o)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeOfferJSON(doc, t0)
	if err != nil {
		t.Fatalf("%v %v", err, FieldErrors(err))
	}
	if back.Containers != o.Containers {
		t.Fatalf("round trip %+v", back.Containers)
	}
}

// DeviceIndices against a brute-force check on random bookings that keep
// within a node's devices at every instant: every piece gets exactly its
// count, and no two pieces overlapping in time share an index.
func TestDeviceIndicesNeverShared(t *testing.T) {
	rng := rand.New(rand.NewPCG(25, 1))
	for trial := 0; trial < 500; trial++ {
		dpn := 1 + rng.IntN(8)
		var ps []NodePiece
		used := make([]int, 48) // devices held per hour
		for id := int64(1); id <= 20; id++ {
			start, hours, n := rng.IntN(40), 1+rng.IntN(8), 1+rng.IntN(dpn)
			ok := true
			for h := start; h < start+hours; h++ {
				if used[h]+n > dpn {
					ok = false
				}
			}
			if !ok {
				continue
			}
			for h := start; h < start+hours; h++ {
				used[h] += n
			}
			ps = append(ps, NodePiece{PieceID: id, Devices: n, Start: t0.Add(time.Duration(start) * time.Hour), End: t0.Add(time.Duration(start+hours) * time.Hour)})
		}
		got := DeviceIndices(ps, dpn)
		for _, a := range ps {
			if len(got[a.PieceID]) != a.Devices {
				t.Fatalf("trial %d: piece %d got %v, want %d devices", trial, a.PieceID, got[a.PieceID], a.Devices)
			}
			for _, b := range ps {
				if a.PieceID >= b.PieceID || !a.Start.Before(b.End) || !b.Start.Before(a.End) {
					continue
				}
				for _, x := range got[a.PieceID] {
					for _, y := range got[b.PieceID] {
						if x == y || x < 0 || x >= dpn {
							t.Fatalf("trial %d: pieces %d and %d overlap and share device %d", trial, a.PieceID, b.PieceID, x)
						}
					}
				}
			}
		}
	}
}
