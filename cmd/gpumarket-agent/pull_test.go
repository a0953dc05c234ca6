package main

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// podmanPullOutput is what podman 4.3 (Debian 12) printed here, without a
// terminal, pulling a one-layer image from a docker-archive (no registry is
// reachable); the second layer's lines are the same form, as podman prints
// one "Copying blob" per layer.
const podmanPullOutput = `Getting image source signatures
Copying blob sha256:70030d7b3694e0929bf1b8cf8ef28b4d836612f19a87a17790919e940b8c4526
Copying blob sha256:5a1b2c3d4e5f60718293a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5 skipped: already exists
Copying config sha256:608786b1a6cd0e98d40ce6236c922d638e9e2abfee532ba76b798724111a09c3
Writing manifest to image destination
Storing signatures
608786b1a6cd0e98d40ce6236c922d638e9e2abfee532ba76b798724111a09c3`

// dockerPullOutput is docker's documented non-terminal pull output (not
// run here: no Docker engine on these machines).
const dockerPullOutput = `2.3.1: Pulling from pytorch/pytorch
a1b2c3d4e5f6: Pulling fs layer
b2c3d4e5f6a1: Pulling fs layer
c3d4e5f6a1b2: Pulling fs layer
d4e5f6a1b2c3: Already exists
a1b2c3d4e5f6: Downloading
a1b2c3d4e5f6: Download complete
a1b2c3d4e5f6: Pull complete
b2c3d4e5f6a1: Pull complete
c3d4e5f6a1b2: Pull complete
Digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
Status: Downloaded newer image for pytorch/pytorch:2.3.1
docker.io/pytorch/pytorch:2.3.1`

func feedAll(output string) []int {
	var p pullProgress
	var seen []int
	for _, l := range strings.Split(output, "\n") {
		if p.feed(l) {
			seen = append(seen, p.percent())
		}
	}
	return seen
}

// TestPullProgress: the percentages a pull's output gives, change by change.
func TestPullProgress(t *testing.T) {
	// podman: a layer started (0 of 1 done: 0 %, the message changes), a
	// second skipped (1 of 2: 42 %), the config (90), the manifest (95), the end.
	if got, want := feedAll(podmanPullOutput), []int{0, 42, 90, 95, 100}; !slices.Equal(got, want) {
		t.Errorf("podman: %v, want %v", got, want)
	}
	// docker: 4 layers named (3 first, then one that already exists: 1 of 4
	// = 21 %), the first downloading (the message names it: same percent),
	// then each complete: 2, 3, 4 of 4 (42, 63, 85), the end.
	if got, want := feedAll(dockerPullOutput), []int{0, 0, 0, 21, 21, 42, 63, 85, 100}; !slices.Equal(got, want) {
		t.Errorf("docker: %v, want %v", got, want)
	}
	var p pullProgress
	p.feed("Copying blob sha256:70030d7b3694e0929bf1b8cf8ef28b4d836612f19a87a17790919e940b8c4526")
	if got := p.message(); got != "pulling: 0 of 1 layers seen done, copying 70030d7b3694" {
		t.Errorf("message %q", got)
	}
	if p.feed("Trying to pull docker.io/library/busybox:1.36...") || p.feed("") {
		t.Error("a line that says nothing of progress changed it")
	}
}

// TestPullStreamsItsOutput: the pull's lines reach the agent as the
// program prints them (standard error and output both), and a failure
// carries the last line.
func TestPullStreamsItsOutput(t *testing.T) {
	var lines []string
	err := runEnginePull(context.Background(), []string{"sh", "-c",
		"echo 'Copying blob sha256:aaa' >&2; echo 'Copying config sha256:bbb' >&2; echo done-id"}, func(l string) { lines = append(lines, l) })
	if err != nil || !slices.Equal(lines, []string{"Copying blob sha256:aaa", "Copying config sha256:bbb", "done-id"}) {
		t.Fatalf("lines %q, err %v", lines, err)
	}
	err = runEnginePull(context.Background(), []string{"sh", "-c", "echo 'Error: manifest unknown' >&2; exit 125"}, func(string) {})
	if err == nil || !strings.Contains(err.Error(), "manifest unknown") || !strings.Contains(err.Error(), "125") {
		t.Fatalf("a failed pull: %v", err)
	}
}
