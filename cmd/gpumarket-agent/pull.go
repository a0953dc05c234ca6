package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
)

// pullProgress follows an engine's pull output, line by line, and says how
// far the pull is (docs/agent.md, "Pull progress"). Both engines print
// without a terminal one line per event:
//
//	podman (standard error): "Copying blob sha256:…" as each layer starts,
//	  "Copying blob sha256:… done" or "… skipped: already exists" when one
//	  ends (not always printed), "Copying config sha256:…" once every layer is
//	  in, then "Writing manifest to image destination".
//	docker (standard output): "<id>: Pulling fs layer" for every layer first,
//	  then "<id>: Download complete", "<id>: Pull complete" or
//	  "<id>: Already exists", and "Status: Downloaded newer image …" at the end.
//
// Docker names every layer before any completes, so its percentage is
// layers done of layers named; podman names a layer only as it starts, so
// its percentage moves by stages (layers done of those started, then the
// config, the manifest) and the message names the layer being copied.
type pullProgress struct {
	layers  []string        // in the order named
	done    map[string]bool // layers finished
	stage   int             // 0 layers, 1 config, 2 manifest, 3 finished
	current string          // the last layer named
}

// feed takes one line of output and reports whether the progress changed.
func (p *pullProgress) feed(line string) bool {
	if p.done == nil {
		p.done = map[string]bool{}
	}
	line = strings.TrimSpace(line)
	before := p.percent()
	beforeMsg := p.message()
	switch {
	case strings.HasPrefix(line, "Copying blob "):
		f := strings.Fields(strings.TrimPrefix(line, "Copying blob "))
		if len(f) == 0 {
			return false
		}
		id := shortLayer(f[0])
		p.named(id)
		if len(f) > 1 && (f[1] == "done" || strings.HasPrefix(f[1], "skipped")) {
			p.done[id] = true
		}
	case strings.HasPrefix(line, "Copying config "):
		for _, id := range p.layers {
			p.done[id] = true
		}
		p.stage = max(p.stage, 1)
	case strings.HasPrefix(line, "Writing manifest"):
		p.stage = max(p.stage, 2)
	case strings.HasPrefix(line, "Status: Downloaded") || strings.HasPrefix(line, "Status: Image is up to date") || strings.HasPrefix(line, "Storing signatures"):
		for _, id := range p.layers {
			p.done[id] = true
		}
		p.stage = 3
	default:
		id, event, ok := strings.Cut(line, ": ")
		if !ok || strings.ContainsAny(id, " /") {
			return false
		}
		switch event {
		case "Pulling fs layer", "Waiting", "Downloading", "Verifying Checksum", "Download complete", "Extracting":
			p.named(id)
		case "Pull complete", "Already exists":
			p.named(id)
			p.done[id] = true
		default:
			return false
		}
	}
	return p.percent() != before || p.message() != beforeMsg
}

func (p *pullProgress) named(id string) {
	if _, seen := p.done[id]; !seen {
		p.layers = append(p.layers, id)
		p.done[id] = false
	}
	p.current = id
}

// percent is how far the pull is, 0 to 100.
func (p *pullProgress) percent() int {
	switch p.stage {
	case 3:
		return 100
	case 2:
		return 95
	case 1:
		return 90
	}
	if len(p.layers) == 0 {
		return 0
	}
	n := 0
	for _, id := range p.layers {
		if p.done[id] {
			n++
		}
	}
	return 85 * n / len(p.layers)
}

// message says what the pull is doing, for the buyer.
func (p *pullProgress) message() string {
	switch {
	case p.stage >= 2:
		return "pulling: writing the image"
	case p.stage == 1:
		return fmt.Sprintf("pulling: %d layers in", len(p.layers))
	case len(p.layers) == 0:
		return "pulling"
	}
	n := 0
	for _, id := range p.layers {
		if p.done[id] {
			n++
		}
	}
	return fmt.Sprintf("pulling: %d of %d layers seen done, copying %s", n, len(p.layers), p.current)
}

// shortLayer is a layer's digest as engines abbreviate it (12 hex digits).
func shortLayer(digest string) string {
	digest = strings.TrimPrefix(digest, "sha256:")
	if len(digest) > 12 {
		digest = digest[:12]
	}
	return digest
}

// runEnginePull runs a pull, giving each line it prints (standard output
// and error together) to line as it comes; the error carries the last line.
func runEnginePull(ctx context.Context, argv []string, line func(string)) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = hookEnviron()
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return err
	}
	var last string
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 64<<10)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				last = l
				line(l)
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	err := cmd.Wait()
	pw.Close()
	<-scanned
	if err != nil && last != "" {
		return fmt.Errorf("%w: %s", err, clip(last, 300))
	}
	return err
}
