package market

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// LaunchMode says what the agent starts in a buyer's container
// (docs/runtime.md).
type LaunchMode string

// Launch modes.
const (
	// LaunchSSH runs an SSH server in the container, port 22 published,
	// the buyer's keys the only way in.
	LaunchSSH LaunchMode = "ssh"
	// LaunchJupyter runs a notebook server on port 8888, published, behind
	// a token the agent makes for the rental.
	LaunchJupyter LaunchMode = "jupyter"
	// LaunchEntrypoint runs the image's own command.
	LaunchEntrypoint LaunchMode = "entrypoint"
)

// LaunchModes lists the modes for forms, with their labels.
var LaunchModes = []struct {
	Mode  LaunchMode
	Label string
}{
	{LaunchSSH, "SSH: an SSH server with my keys"},
	{LaunchJupyter, "Jupyter: a notebook behind a token"},
	{LaunchEntrypoint, "Entrypoint: the image's own command"},
}

// Limits on a runtime, in one place for the form, the JSON and the agent.
const (
	MaxImageRefLen   = 255
	MaxOnStartBytes  = 16 << 10 // 16 KiB
	MaxRuntimePorts  = 16
	MaxEnvVars       = 64
	MaxEnvNameLen    = 128
	MaxEnvValueBytes = 4096
	MaxShmMB         = 256 << 10 // 256 GiB
	MaxOfferImageGB  = 10_000
	SSHContainerPort = 22
	JupyterPort      = 8888
)

// ReservedContainerPorts are the ports a runtime may not ask to expose:
// the launch modes' own, which the agent publishes itself when the mode
// needs them.
var ReservedContainerPorts = []int{SSHContainerPort, JupyterPort}

// EnvVar is one environment variable of a runtime. A secret's value is
// never shown back, logged or exported (EncodeRequestJSON leaves it out);
// only the agent that starts the container receives it.
type EnvVar struct {
	Name   string
	Value  string
	Secret bool
}

// String is the variable with a secret's value masked, so a %v never
// prints it.
func (e EnvVar) String() string {
	if e.Secret {
		return e.Name + "=(secret)"
	}
	return e.Name + "=" + e.Value
}

// LogValue keeps a secret's value out of structured logs.
func (e EnvVar) LogValue() slog.Value { return slog.StringValue(e.String()) }

// Runtime is the buyer's environment for a rental: the container the
// agent runs on each node of each piece. The zero Runtime means none (the
// host's own environment, reached by SSH as today).
type Runtime struct {
	// Image is an OCI image reference, e.g. docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04.
	Image  string
	Launch LaunchMode
	// OnStart is a shell script run in the container before the launch
	// mode's server (ssh, jupyter modes only).
	OnStart string
	// Ports are container ports to publish besides the launch mode's own;
	// the agent maps each to a host port and reports it.
	Ports []int
	Env   []EnvVar
	// MinShmMB is the least /dev/shm the container gets (0: the engine's default).
	MinShmMB int
	// TemplateID is the template the runtime was taken from (0: none);
	// secret values missing from a request are filled from it when the
	// buyer is its author (FillSecrets).
	TemplateID int64
}

// IsZero reports whether the runtime is none at all.
func (r Runtime) IsZero() bool {
	return r.Image == "" && r.Launch == "" && r.OnStart == "" && len(r.Ports) == 0 && len(r.Env) == 0 && r.MinShmMB == 0 && r.TemplateID == 0
}

// PublishedPorts are the container ports the agent publishes: the launch
// mode's own first, then the asked-for ports.
func (r Runtime) PublishedPorts() []int {
	var out []int
	switch r.Launch {
	case LaunchSSH:
		out = append(out, SSHContainerPort)
	case LaunchJupyter:
		out = append(out, JupyterPort)
	}
	return append(out, r.Ports...)
}

// WithoutSecrets is the runtime with every secret's value removed (its
// name and secrecy kept): what may be shown back or exported.
func (r Runtime) WithoutSecrets() Runtime {
	if len(r.Env) == 0 {
		return r
	}
	env := make([]EnvVar, len(r.Env))
	for i, e := range r.Env {
		if e.Secret {
			e.Value = ""
		}
		env[i] = e
	}
	r.Env = env
	return r
}

// ResaleRuntime is the runtime a resale buyer's container gets from the
// reservation they bought: the seller's image, launch mode, script, ports
// and plain environment; the seller's secrets are dropped (names and
// values), and no template of the seller's is counted as used.
func ResaleRuntime(r Runtime) Runtime {
	r.TemplateID = 0
	var env []EnvVar
	for _, e := range r.Env {
		if !e.Secret {
			env = append(env, e)
		}
	}
	r.Env = env
	return r
}

// MissingSecrets names the secrets without a value.
func (r Runtime) MissingSecrets() []string {
	var out []string
	for _, e := range r.Env {
		if e.Secret && e.Value == "" {
			out = append(out, e.Name)
		}
	}
	return out
}

// FillSecrets gives each secret of r without a value the value of the
// secret of the same name in from (a stored template's runtime).
func (r Runtime) FillSecrets(from Runtime) Runtime {
	if len(r.Env) == 0 {
		return r
	}
	env := slices.Clone(r.Env)
	for i, e := range env {
		if !e.Secret || e.Value != "" {
			continue
		}
		for _, f := range from.Env {
			if f.Name == e.Name && f.Secret {
				env[i].Value = f.Value
			}
		}
	}
	r.Env = env
	return r
}

// Image references: [domain[:port]/]path[:tag][@digest], as the OCI
// distribution spec's reference grammar (lower-case path components).
var (
	imageComponent = `[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*`
	imageDomain    = `(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*(?::[0-9]+)?`
	imageRefRe     = regexp.MustCompile(`^(?:` + imageDomain + `/)?` + imageComponent + `(?:/` + imageComponent + `)*` +
		`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$`)
	envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// ValidImageRef reports whether ref is an OCI image reference.
func ValidImageRef(ref string) bool {
	if ref == "" || len(ref) > MaxImageRefLen || !imageRefRe.MatchString(ref) {
		return false
	}
	// A first part is a registry only with a dot, a port or as localhost;
	// otherwise it is a path component, in lower case.
	if first, _, ok := strings.Cut(ref, "/"); ok && !strings.ContainsAny(first, ".:") && first != "localhost" {
		return regexp.MustCompile(`^` + imageComponent + `$`).MatchString(first)
	}
	return true
}

// reservedEnvName reports whether the agent owns the variable: the
// NVIDIA runtime's device selection would widen the container's GPUs past
// its piece, and GPUMARKET_ is the agent's own prefix.
func reservedEnvName(name string) bool {
	u := strings.ToUpper(name)
	return strings.HasPrefix(u, "NVIDIA_") || strings.HasPrefix(u, "GPUMARKET_")
}

// ValidateRuntime checks a runtime and returns an invalid *Error whose
// Fields name each bad field ("runtime.image", "runtime.ports", …). It
// trims in place. The zero runtime is valid (none asked for).
func ValidateRuntime(r *Runtime) error {
	p := Problems{}
	validateRuntime(p, r)
	return p.Err()
}

func validateRuntime(p Problems, r *Runtime) {
	r.Image = strings.TrimSpace(r.Image)
	if r.IsZero() {
		return
	}
	switch {
	case r.Image == "":
		p.Add("runtime.image", "Name the image, e.g. docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04.")
	case len(r.Image) > MaxImageRefLen:
		p.Add("runtime.image", fmt.Sprintf("An image reference has at most %d characters.", MaxImageRefLen))
	case !ValidImageRef(r.Image):
		p.Add("runtime.image", "That is not an image reference: write [registry/]name[:tag][@sha256:digest] in lower case, e.g. docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime.")
	}
	if r.Launch == "" {
		r.Launch = LaunchSSH
	}
	switch r.Launch {
	case LaunchSSH, LaunchJupyter, LaunchEntrypoint:
	default:
		p.Add("runtime.launch", "Choose ssh, jupyter or entrypoint.")
	}
	if len(r.OnStart) > MaxOnStartBytes {
		p.Add("runtime.on_start", fmt.Sprintf("The on-start script is %s bytes; keep it under %s (put larger set-up in the image).",
			groupThousands(len(r.OnStart)), groupThousands(MaxOnStartBytes)))
	} else if r.OnStart != "" && r.Launch == LaunchEntrypoint {
		p.Add("runtime.on_start", "The entrypoint mode runs the image's own command; put set-up in the image, or choose ssh or jupyter.")
	} else {
		textField(p, "runtime.on_start", r.OnStart, true)
	}
	if len(r.Ports) > MaxRuntimePorts {
		p.Add("runtime.ports", fmt.Sprintf("Expose at most %d ports.", MaxRuntimePorts))
	}
	for i, port := range r.Ports {
		switch {
		case port < 1 || port > 65535:
			p.Add("runtime.ports", fmt.Sprintf("Port %d is not a port: use 1 to 65535.", port))
		case slices.Contains(ReservedContainerPorts, port):
			p.Add("runtime.ports", fmt.Sprintf("Port %d is reserved (22 is the SSH mode's server, 8888 the Jupyter mode's, published by the agent itself).", port))
		case slices.Contains(r.Ports[:i], port):
			p.Add("runtime.ports", fmt.Sprintf("Port %d is listed twice.", port))
		}
	}
	if len(r.Env) > MaxEnvVars {
		p.Add("runtime.env", fmt.Sprintf("Set at most %d environment variables.", MaxEnvVars))
	}
	for i := range r.Env {
		e := &r.Env[i]
		e.Name = strings.TrimSpace(e.Name)
		switch {
		case e.Name == "" || len(e.Name) > MaxEnvNameLen || !envNameRe.MatchString(e.Name):
			p.Add("runtime.env", fmt.Sprintf("%q is not a variable name: use letters, digits and _, not starting with a digit.", e.Name))
		case reservedEnvName(e.Name):
			p.Add("runtime.env", fmt.Sprintf("%s is the agent's to set (NVIDIA_* would choose the container's GPUs; GPUMARKET_* is reserved).", e.Name))
		case slices.ContainsFunc(r.Env[:i], func(o EnvVar) bool { return o.Name == e.Name }):
			p.Add("runtime.env", fmt.Sprintf("%s is set twice.", e.Name))
		case len(e.Value) > MaxEnvValueBytes:
			p.Add("runtime.env", fmt.Sprintf("The value of %s is over %s bytes.", e.Name, groupThousands(MaxEnvValueBytes)))
		case strings.ContainsRune(e.Value, 0) || !utf8.ValidString(e.Value):
			// Never quote a value: it may be a secret.
			p.Add("runtime.env", fmt.Sprintf("The value of %s holds a NUL or bytes that are not UTF-8.", e.Name))
		}
	}
	if r.MinShmMB < 0 || r.MinShmMB > MaxShmMB {
		p.Add("runtime.min_shm_mb", fmt.Sprintf("Shared memory must be between 0 and %s MB.", groupThousands(MaxShmMB)))
	}
	if r.TemplateID < 0 {
		p.Add("runtime.template", "Templates are named by their numbers.")
	}
}

// ParsePorts reads a list of ports as typed ("8080, 6006"), for forms.
func ParsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a port number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// FormatPorts writes ports the way ParsePorts reads them.
func FormatPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

// ContainerEngine is the engine an offer runs buyer containers with.
type ContainerEngine string

// Container engines; "" runs none.
const (
	EnginePodman ContainerEngine = "podman"
	EngineDocker ContainerEngine = "docker"
)

// ContainerSupport is what an offer says about running buyers'
// environments.
type ContainerSupport struct {
	// Engine runs buyer containers ("" = none: the host's own
	// environment, reached by SSH).
	Engine ContainerEngine
	// CDI: the NVIDIA Container Toolkit's CDI spec gives each container
	// only its piece's devices (nvidia.com/gpu=<index>).
	CDI bool
	// MaxImageGB is the largest image the host pulls (0 = no stated limit).
	MaxImageGB int
	// ImageCache: pulled images are kept between rentals, so a second
	// rental of the same image starts sooner.
	ImageCache bool
	// SharedHostUser: without containers, every renter of a node logs in
	// as the same Unix user (the host cannot give a user per rental), so
	// renters of one node are not isolated from each other.
	SharedHostUser bool
}

// RunsContainers reports whether a request with a runtime may use the
// offer: an engine and GPU passthrough by CDI, so the container sees its
// piece's devices and no others.
func (c ContainerSupport) RunsContainers() bool { return c.Engine != "" && c.CDI }

// Summary is the support in words, for offer pages.
func (c ContainerSupport) Summary() string {
	if c.Engine == "" {
		if c.SharedHostUser {
			return "No buyer containers; shared host user (renters of a node are not isolated from each other)"
		}
		return "No buyer containers; a Unix user per rental"
	}
	parts := []string{"Runs buyer containers with " + string(c.Engine)}
	if c.CDI {
		parts = append(parts, "GPUs by CDI")
	} else {
		parts = append(parts, "no GPU passthrough")
	}
	if c.MaxImageGB > 0 {
		parts = append(parts, fmt.Sprintf("images up to %d GB", c.MaxImageGB))
	}
	if c.ImageCache {
		parts = append(parts, "images cached")
	}
	return strings.Join(parts, ", ")
}

// validateContainerSupport checks an offer's container support (fields
// "container_engine", "container_max_image_gb").
func validateContainerSupport(p Problems, c *ContainerSupport) {
	switch c.Engine {
	case "", EnginePodman, EngineDocker:
	default:
		p.Add("container_engine", "Choose podman, docker or none.")
	}
	if c.MaxImageGB < 0 || c.MaxImageGB > MaxOfferImageGB {
		p.Add("container_max_image_gb", fmt.Sprintf("The largest image must be between 0 and %s GB.", groupThousands(MaxOfferImageGB)))
	}
	if c.Engine == "" && (c.CDI || c.ImageCache || c.MaxImageGB > 0) {
		p.Add("container_engine", "Choose the engine that runs buyer containers, or clear GPU passthrough, the image limit and the cache.")
	}
}

// runtimeJSON is the runtime in the portable request JSON. A secret's
// value may be sent (the API) but is never written back: an exported
// request names its secrets without values, and the template (when it
// names one) or the sender fills them again.
type runtimeJSON struct {
	Image      string       `json:"image"`
	Launch     LaunchMode   `json:"launch,omitempty"`
	OnStart    string       `json:"on_start,omitempty"`
	Ports      []int        `json:"ports,omitempty"`
	Env        []envVarJSON `json:"env,omitempty"`
	MinShmMB   int          `json:"min_shm_mb,omitempty"`
	TemplateID int64        `json:"template,omitempty"`
}

type envVarJSON struct {
	Name   string `json:"name"`
	Value  string `json:"value,omitempty"`
	Secret bool   `json:"secret,omitempty"`
}

// encodeRuntimeJSON is r for the portable JSON, secrets' values left out;
// nil for no runtime.
func encodeRuntimeJSON(r Runtime) *runtimeJSON {
	if r.IsZero() {
		return nil
	}
	doc := &runtimeJSON{Image: r.Image, Launch: r.Launch, OnStart: r.OnStart, Ports: r.Ports, MinShmMB: r.MinShmMB, TemplateID: r.TemplateID}
	for _, e := range r.WithoutSecrets().Env {
		doc.Env = append(doc.Env, envVarJSON(e))
	}
	return doc
}

func decodeRuntimeJSON(doc *runtimeJSON) Runtime {
	if doc == nil {
		return Runtime{}
	}
	r := Runtime{Image: doc.Image, Launch: doc.Launch, OnStart: doc.OnStart, Ports: doc.Ports, MinShmMB: doc.MinShmMB, TemplateID: doc.TemplateID}
	for _, e := range doc.Env {
		r.Env = append(r.Env, EnvVar(e))
	}
	return r
}

// EncodeRuntimeStored is the whole runtime, secrets included, as the
// store keeps it (never shown, never exported: only the agent of a node
// of the rental is sent it).
func EncodeRuntimeStored(r Runtime) ([]byte, error) {
	doc := runtimeJSON{Image: r.Image, Launch: r.Launch, OnStart: r.OnStart, Ports: r.Ports, MinShmMB: r.MinShmMB, TemplateID: r.TemplateID}
	for _, e := range r.Env {
		doc.Env = append(doc.Env, envVarJSON(e))
	}
	return json.Marshal(doc)
}

// DecodeRuntimeStored reads what EncodeRuntimeStored wrote.
func DecodeRuntimeStored(data []byte) (Runtime, error) {
	var doc runtimeJSON
	if err := json.Unmarshal(data, &doc); err != nil {
		return Runtime{}, fmt.Errorf("market: stored runtime: %w", err)
	}
	return decodeRuntimeJSON(&doc), nil
}

// containersJSON is an offer's ContainerSupport in the portable offer JSON.
type containersJSON struct {
	Engine         ContainerEngine `json:"engine,omitempty"`
	CDI            bool            `json:"cdi,omitempty"`
	MaxImageGB     int             `json:"max_image_gb,omitempty"`
	ImageCache     bool            `json:"image_cache,omitempty"`
	SharedHostUser bool            `json:"shared_host_user,omitempty"`
}

func encodeContainersJSON(c ContainerSupport) *containersJSON {
	if c == (ContainerSupport{}) {
		return nil
	}
	doc := containersJSON(c)
	return &doc
}

func decodeContainersJSON(doc *containersJSON) ContainerSupport {
	if doc == nil {
		return ContainerSupport{}
	}
	return ContainerSupport(*doc)
}

// Template is a runtime saved under a name to reuse (store keeps it with
// its author); public templates are listed to every buyer.
type Template struct {
	Name        string
	Description string
	Public      bool
	Runtime     Runtime
}

// Limits on a template.
const (
	MaxTemplateName        = 80
	MaxTemplateDescription = 300
)

// ValidateTemplate checks a template (fields "name", "description" and
// the runtime's "runtime.…"), trimming in place. A template must name an
// image.
func ValidateTemplate(t *Template) error {
	p := Problems{}
	t.Name, t.Description = strings.TrimSpace(t.Name), strings.TrimSpace(t.Description)
	switch n := utf8.RuneCountInString(t.Name); {
	case n == 0:
		p.Add("name", "Give the template a name.")
	case n > MaxTemplateName:
		p.Add("name", fmt.Sprintf("Keep the name to %d characters or fewer.", MaxTemplateName))
	}
	textField(p, "name", t.Name, false)
	if utf8.RuneCountInString(t.Description) > MaxTemplateDescription {
		p.Add("description", fmt.Sprintf("Keep the description to %d characters or fewer.", MaxTemplateDescription))
	}
	textField(p, "description", t.Description, true)
	if t.Runtime.Image == "" {
		p.Add("runtime.image", "Name the image, e.g. docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04.")
	}
	validateRuntime(p, &t.Runtime)
	return p.Err()
}

// DemoTemplates are the starting templates the demo comes with.
var DemoTemplates = []Template{
	{Name: "CUDA base with SSH", Public: true,
		Description: "NVIDIA's CUDA 12.4 base image on Ubuntu 22.04 with an SSH server; log in with your keys.",
		Runtime: Runtime{Image: "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04", Launch: LaunchSSH,
			OnStart: "command -v sshd >/dev/null || (apt-get update && apt-get install -y openssh-server)", MinShmMB: 1024}},
	{Name: "PyTorch notebook", Public: true,
		Description: "PyTorch 2.3 with CUDA 12.1 and JupyterLab behind a token; TensorBoard on port 6006.",
		Runtime: Runtime{Image: "docker.io/pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime", Launch: LaunchJupyter,
			OnStart: "pip install --quiet jupyterlab tensorboard", Ports: []int{6006}, MinShmMB: 8192}},
}
