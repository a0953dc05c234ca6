package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpumarket/gpumarket/agentapi"
	"github.com/gpumarket/gpumarket/market"
)

func testAssignment() assignment {
	return assignment{ReservationID: 7, PieceID: 31, Devices: 2, DeviceIndices: []int{2, 3},
		Start: time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), End: time.Date(2026, 12, 2, 11, 0, 0, 0, time.UTC),
		Runtime: &agentapi.Runtime{Image: "docker.io/pytorch/pytorch:2.3.1", Launch: "ssh", Ports: []int{6006}, MinShmMB: 8192,
			Env: []agentapi.EnvVar{{Name: "HF_TOKEN", Value: "hf_secret"}, {Name: "MODE", Value: "train"}}}}
}

// The command lines the agent runs, for podman and docker: the same run
// flags (CDI devices, limits, ports, env by name only), and the
// differences in asking about and removing a container.
func TestEngineCommandLines(t *testing.T) {
	opts := runOptions{publishAddr: "0.0.0.0", cdiKind: "nvidia.com/gpu", cpusPerDevice: 8, memGBPerDev: 64, pidsLimit: 4096,
		extraRunArgs: []string{"--ulimit", "nofile=1024:1024"}}
	run := []string{"run", "--detach", "--name", "gpumarket-piece-31", "--label", "gpumarket.piece=31", "--label", "gpumarket.reservation=7",
		"--hostname", "gpumarket-piece-31", "--device", "nvidia.com/gpu=2", "--device", "nvidia.com/gpu=3", "--shm-size", "8192m",
		"--cpus", "16", "--memory", "128g", "--pids-limit", "4096", "--publish", "0.0.0.0::22", "--publish", "0.0.0.0::6006",
		"--env", "HF_TOKEN", "--env", "MODE", "--volume", "/var/lib/c/piece-31:/etc/gpumarket:ro", "--ulimit", "nofile=1024:1024",
		"--entrypoint", "/bin/sh", "docker.io/pytorch/pytorch:2.3.1", "/etc/gpumarket/start.sh"}
	cases := []struct {
		e                         engine
		exists, remove, img, pull []string
	}{
		{engine{kind: "podman", argv: []string{"podman", "--runtime", "runc"}},
			[]string{"podman", "--runtime", "runc", "container", "exists", "gpumarket-piece-31"},
			[]string{"podman", "--runtime", "runc", "rm", "--force", "--volumes", "--ignore", "--time", "10", "gpumarket-piece-31"},
			[]string{"podman", "--runtime", "runc", "image", "exists", "docker.io/pytorch/pytorch:2.3.1"},
			[]string{"podman", "--runtime", "runc", "pull", "docker.io/pytorch/pytorch:2.3.1"}},
		{engine{kind: "docker", argv: []string{"docker"}},
			[]string{"docker", "container", "inspect", "--format", "{{.Id}}", "gpumarket-piece-31"},
			[]string{"docker", "rm", "--force", "--volumes", "gpumarket-piece-31"},
			[]string{"docker", "image", "inspect", "--format", "{{.Id}}", "docker.io/pytorch/pytorch:2.3.1"},
			[]string{"docker", "pull", "docker.io/pytorch/pytorch:2.3.1"}},
	}
	as := testAssignment()
	for _, c := range cases {
		if got, want := c.e.run(opts, as, "/var/lib/c/piece-31"), append(append([]string{}, c.e.argv...), run...); !reflect.DeepEqual(got, want) {
			t.Errorf("%s run:\n got %q\nwant %q", c.e.kind, got, want)
		}
		for _, pair := range [][2][]string{{c.e.exists("gpumarket-piece-31"), c.exists}, {c.e.remove("gpumarket-piece-31"), c.remove},
			{c.e.imageExists(as.Runtime.Image), c.img}, {c.e.pull(as.Runtime.Image), c.pull}} {
			if !reflect.DeepEqual(pair[0], pair[1]) {
				t.Errorf("%s: got %q, want %q", c.e.kind, pair[0], pair[1])
			}
		}
		if s := strings.Join(c.e.run(opts, as, "/d"), " "); strings.Contains(s, "hf_secret") || strings.Contains(s, "train") {
			t.Errorf("%s: an environment value is on the command line: %s", c.e.kind, s)
		}
	}
	env := strings.Join(runEnv(as.Runtime), "\n")
	if !strings.Contains(env, "HF_TOKEN=hf_secret") || !strings.Contains(env, "MODE=train") {
		t.Errorf("the engine's environment lacks the runtime's variables")
	}
	as.Runtime.Launch = "entrypoint"
	if got := cases[0].e.run(opts, as, "/d"); got[len(got)-1] != as.Runtime.Image || strings.Contains(strings.Join(got, " "), "--entrypoint") {
		t.Errorf("entrypoint mode runs the image's own command: %q", got)
	}
}

// parsePorts on what the engines print: podman 4.3.1 here (recorded from
// a real container) and docker, which lists IPv4 and IPv6 bindings.
func TestParsePorts(t *testing.T) {
	cases := []struct {
		name string
		out  string
		want []market.PortMapping
	}{
		{"podman", "22/tcp -> 127.0.0.1:40235\n", []market.PortMapping{{Container: 22, Host: 40235}}},
		{"podman two", "22/tcp -> 0.0.0.0:41001\n6006/tcp -> 0.0.0.0:41002\n", []market.PortMapping{{Container: 22, Host: 41001}, {Container: 6006, Host: 41002}}},
		{"docker", "22/tcp -> 0.0.0.0:32768\n22/tcp -> [::]:32768\n8888/tcp -> 0.0.0.0:32769\n8888/tcp -> [::]:32769\n",
			[]market.PortMapping{{Container: 22, Host: 32768}, {Container: 8888, Host: 32769}}},
		{"udp skipped", "53/udp -> 0.0.0.0:5353\n", nil},
	}
	for _, c := range cases {
		got, err := parsePorts([]byte(c.out))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %v %v, want %v", c.name, got, err, c.want)
		}
	}
	if _, err := parsePorts([]byte("garbage\n")); err == nil {
		t.Error("garbage parsed")
	}
}

func TestStartScript(t *testing.T) {
	ssh := startScript(market.LaunchSSH)
	for _, want := range []string{"/etc/gpumarket/on-start.sh", "ssh-keygen -A", "AuthorizedKeysFile=/etc/gpumarket/authorized_keys", "PasswordAuthentication=no"} {
		if !strings.Contains(ssh, want) {
			t.Errorf("ssh start script lacks %q:\n%s", want, ssh)
		}
	}
	if j := startScript(market.LaunchJupyter); !strings.Contains(j, "jupyter lab") || !strings.Contains(j, "jupyter-token") || strings.Contains(j, "sshd") {
		t.Errorf("jupyter start script:\n%s", j)
	}
}
