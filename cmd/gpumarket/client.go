package main

// The command-line client (docs/cli.md): subcommands of this binary that
// talk to a marketplace's JSON API (web/openapi.json) with a personal API
// token, so `go install ./cmd/gpumarket` installs the server and the
// client in one program. The token comes from GPUMARKET_TOKEN or a config
// file of mode 0600, never a flag (a flag shows in ps).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Exit codes of the client, for scripts.
const (
	exitOK      = 0 // done
	exitRefused = 1 // the server refused (its message on stderr), or it could not be reached
	exitUsage   = 2 // bad usage: unknown subcommand, bad flag, unreadable file
	exitAuth    = 3 // no token, or the server refused it (401, 403)
)

// clientCommands are the subcommands run by the client.
var clientCommands = map[string]func(*apiClient, []string) error{
	"search": cmdSearch, "quote": cmdQuote, "book": cmdBook, "pay": cmdPay,
	"list": cmdList, "show": cmdShow, "extend": cmdExtend, "cancel": cmdCancel, "reject": cmdReject,
	"ssh": cmdSSH, "orders": cmdOrders, "bids": cmdBids, "resale": cmdResale,
	"offers": cmdOffers, "hosts": cmdHosts, "ping": cmdPing, "metered": cmdMetered,
	"balance": cmdBalance,
}

// exitError is a failure with its exit code; its message is printed on
// stderr once, by reportExit.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usageErr(format string, a ...any) error {
	return &exitError{code: exitUsage, msg: fmt.Sprintf(format, a...)}
}

// reportExit prints err on stderr and returns the process's exit code.
func reportExit(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(stderr, "gpumarket:", ee.msg)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "gpumarket:", err)
	return exitRefused
}

// apiClient is one run of a client subcommand.
type apiClient struct {
	ctx      context.Context
	base     string // e.g. http://localhost:8080
	token    string
	identity string // the ssh identity file, from the config ("" for ssh's default)
	http     *http.Client
	getenv   func(string) string
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	// exec replaces the process with another program (syscall.Exec).
	exec func(path string, argv, env []string) error
}

// clientConfig is the config file: $GPUMARKET_CONFIG, else
// $XDG_CONFIG_HOME/gpumarket/config.json, else ~/.config/gpumarket/config.json.
type clientConfig struct {
	URL          string `json:"url"`
	Token        string `json:"token"`
	IdentityFile string `json:"identity_file"`
}

func configPath(getenv func(string) string) string {
	if p := getenv("GPUMARKET_CONFIG"); p != "" {
		return p
	}
	dir := getenv("XDG_CONFIG_HOME")
	if dir == "" {
		home := getenv("HOME")
		if home == "" {
			return ""
		}
		dir = filepath.Join(home, ".config")
	}
	return filepath.Join(dir, "gpumarket", "config.json")
}

// loadClientConfig reads the config file if there is one. A file others
// can read is refused: it holds the token.
func loadClientConfig(getenv func(string) string) (clientConfig, string, error) {
	var cfg clientConfig
	path := configPath(getenv)
	if path == "" {
		return cfg, "", nil
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return cfg, path, nil
	}
	if err != nil {
		return cfg, path, &exitError{code: exitUsage, msg: err.Error()}
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return cfg, path, &exitError{code: exitAuth, msg: fmt.Sprintf("%s holds your token and is readable by others (mode %04o): chmod 600 %s", path, fi.Mode().Perm(), path)}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return cfg, path, &exitError{code: exitUsage, msg: err.Error()}
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, path, &exitError{code: exitUsage, msg: fmt.Sprintf("%s: %v", path, err)}
	}
	return cfg, path, nil
}

// runClient runs one client subcommand.
func runClient(ctx context.Context, cmd string, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer, exec func(string, []string, []string) error) error {
	f := clientCommands[cmd]
	cfg, path, err := loadClientConfig(getenv)
	if err != nil {
		return err
	}
	c := &apiClient{ctx: ctx, base: strings.TrimRight(envOr(getenv, "GPUMARKET_URL", cfg.URL), "/"), token: envOr(getenv, "GPUMARKET_TOKEN", cfg.Token),
		identity: cfg.IdentityFile, http: &http.Client{Timeout: 60 * time.Second}, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, exec: exec}
	if c.base == "" {
		c.base = "http://localhost:8080"
	}
	if c.token == "" {
		where := "a config file"
		if path != "" {
			where = path + ` ({"url": "…", "token": "gpm_…"}, mode 600)`
		}
		return &exitError{code: exitAuth, msg: "no API token: set GPUMARKET_TOKEN or put it in " + where + "; create one on your account page"}
	}
	return f(c, args)
}

// apiFailure is an error answer of the API: its one shape (web/openapi.json).
type apiFailure struct {
	Error struct {
		Code      string            `json:"code"`
		Message   string            `json:"message"`
		Fields    map[string]string `json:"fields"`
		RequestID string            `json:"request_id"`
	} `json:"error"`
}

// do sends one request and decodes a 2xx answer into out (when not nil);
// it returns the raw body too. Any other answer is an exitError with the
// server's message and the fields it names.
func (c *apiClient) do(method, path string, body any, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(c.ctx, method, c.base+"/api/v1"+path, rd)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("cannot reach %s: %v", c.base, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, &exitError{code: exitRefused, msg: fmt.Sprintf("reading the answer: %v", err)}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if out != nil && len(data) > 0 {
			if err := json.Unmarshal(data, out); err != nil {
				return data, fmt.Errorf("the server's answer could not be read: %w", err)
			}
		}
		return data, nil
	}
	return data, failure(resp.StatusCode, data)
}

// failure turns an error answer into an exitError: 401 and 403 are auth
// (3), everything else refused (1).
func failure(status int, data []byte) error {
	var f apiFailure
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &f) == nil && f.Error.Message != "" {
		msg = f.Error.Message
		for _, k := range sortedKeys(f.Error.Fields) {
			if !strings.Contains(msg, f.Error.Fields[k]) {
				msg += fmt.Sprintf("\n  %s: %s", k, f.Error.Fields[k])
			}
		}
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	msg = fmt.Sprintf("%s (HTTP %d)", msg, status)
	code := exitRefused
	if status == http.StatusUnauthorized || status == http.StatusForbidden {
		code = exitAuth
	}
	return &exitError{code: code, msg: msg}
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// printJSON prints a raw answer indented.
func (c *apiClient) printJSON(data []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, data, "", "  "); err != nil {
		_, err = c.stdout.Write(data)
		return err
	}
	buf.WriteByte('\n')
	_, err := c.stdout.Write(buf.Bytes())
	return err
}

// parseFlags parses args with fs, flags and positional arguments in any
// order, and checks the count of positional ones.
func parseFlags(fs *flag.FlagSet, args []string, usage string, minPos, maxPos int) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		// flag would eat the "--" itself; what follows it is positional.
		if len(args) > 0 && args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, usageErr("usage: gpumarket %s", usage)
			}
			return nil, usageErr("%v\nusage: gpumarket %s", err, usage)
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		pos, args = append(pos, args[0]), args[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		return nil, usageErr("usage: gpumarket %s", usage)
	}
	return pos, nil
}

// idArg reads a positional id.
func idArg(s, what string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimPrefix(s, "#"), 10, 64)
	if err != nil || id <= 0 {
		return 0, usageErr("%s must be a number, not %q", what, s)
	}
	return id, nil
}

// money formats cents as dollars.
func money(cents int64) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	return fmt.Sprintf("%s$%d.%02d", sign, cents/100, cents%100)
}

func when(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04Z")
}

func cmdPing(c *apiClient, args []string) error {
	if _, err := parseFlags(flag.NewFlagSet("ping", flag.ContinueOnError), args, "ping", 0, 0); err != nil {
		return err
	}
	if _, err := c.do(http.MethodGet, "/ping", nil, nil); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "ok: the token works against", c.base)
	return nil
}

// queryPath is path with the query values.
func queryPath(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}
