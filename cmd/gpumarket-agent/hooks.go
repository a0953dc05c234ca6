package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"golang.org/x/crypto/ssh"
)

// hookTimeout bounds one run of an install or remove hook: the heartbeats
// wait for it, and three missed ones count as a host failure.
const hookTimeout = 2 * time.Minute

// maxCommandOutput bounds what the agent keeps of a hook's output.
const maxCommandOutput = 64 << 10

// hooks install and remove a piece's keys: the provider's own commands
// (-install-hook, -remove-hook) or, by default, the built-in
// authorized_keys writer. The server never names a command; these are the
// only programs the agent runs besides the probe and -acceptance-cmd.
type hooks struct {
	install, remove []string        // the provider's commands, or nil for keys
	keys            *authorizedKeys // the built-in hook
	users           *rentalUsers    // -rental-users, or nil
	conn            connection      // what the flags say the buyer connects to
}

// Install puts the piece's keys in place and returns how the buyer
// connects. A hook may print a JSON object with host, port and user on its
// standard output to replace the flags' (a container with its own port);
// other output is only logged.
func (h hooks) Install(ctx context.Context, a assignment) (connection, string, error) {
	if h.users != nil {
		conn := h.conn
		name, err := h.users.install(ctx, a.PieceID, a.SSHKeys)
		conn.User = name
		return conn, "", err
	}
	if h.install == nil {
		return h.conn, "", h.keys.install(a.PieceID, a.SSHKeys)
	}
	out, err := runCommand(ctx, h.install, "install", a, hookTimeout)
	if err != nil {
		return connection{}, out, err
	}
	conn := h.conn
	if trimmed := strings.TrimSpace(out); strings.HasPrefix(trimmed, "{") {
		var c connection
		if err := json.Unmarshal([]byte(trimmed), &c); err != nil {
			return connection{}, out, fmt.Errorf("install hook printed JSON that is not {\"host\", \"port\", \"user\"}: %w", err)
		}
		if c.Host != "" {
			conn.Host = c.Host
		}
		if c.Port != 0 {
			conn.Port = c.Port
		}
		if c.User != "" {
			conn.User = c.User
		}
	}
	return conn, out, nil
}

// Remove takes the piece's keys away. Removing keys that are not there is
// not an error.
func (h hooks) Remove(ctx context.Context, a assignment) (string, error) {
	if h.users != nil {
		return "", h.users.remove(ctx, a.PieceID)
	}
	if h.remove == nil {
		return "", h.keys.remove(a.PieceID)
	}
	return runCommand(ctx, h.remove, "remove", a, hookTimeout)
}

// isolation is how these hooks keep renters apart, as heartbeats report it.
func (h hooks) isolation() string {
	switch {
	case h.users != nil:
		return isolationRentalUsers
	case h.install != nil:
		return isolationHooks
	}
	return isolationSharedUser
}

// runCommand runs one of the provider's commands for an assignment: the
// assignment as JSON on standard input and as GPUMARKET_* environment
// variables, without a shell and without the host token. It returns the
// standard output, and a *commandError when the command fails.
func runCommand(ctx context.Context, argv []string, action string, a assignment, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	in, err := json.Marshal(a)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(hookEnviron(), assignmentEnv(action, a)...)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		reason := err.Error()
		var exit *exec.ExitError
		switch {
		case ctx.Err() == context.DeadlineExceeded:
			reason = fmt.Sprintf("no result after %s", timeout)
		case errors.As(err, &exit):
			reason = exit.ProcessState.String() // "exit status 2", "signal: killed"
		}
		return stdout.String(), &commandError{Action: action, Program: argv[0], Reason: reason, Stderr: firstLine(stderr.Bytes())}
	}
	return stdout.String(), nil
}

// commandError is one of the provider's commands failing: how it ended and
// the first line it printed on standard error.
type commandError struct {
	Action, Program string
	Reason          string // "exit status 2", "no result after 2m0s", …
	Stderr          string
}

func (e *commandError) Error() string {
	msg := fmt.Sprintf("%s command %s: %s", e.Action, e.Program, e.Reason)
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// hookEnviron is the agent's environment less the host token, which the
// provider's commands have no use for.
func hookEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, tokenEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// assignmentEnv is an assignment as environment variables for a command.
func assignmentEnv(action string, a assignment) []string {
	return []string{
		"GPUMARKET_ACTION=" + action,
		"GPUMARKET_PIECE_ID=" + strconv.FormatInt(a.PieceID, 10),
		"GPUMARKET_RESERVATION_ID=" + strconv.FormatInt(a.ReservationID, 10),
		"GPUMARKET_DEVICES=" + strconv.Itoa(a.Devices),
		"GPUMARKET_START=" + a.Start.UTC().Format(time.RFC3339),
		"GPUMARKET_END=" + a.End.UTC().Format(time.RFC3339),
		"GPUMARKET_SSH_KEYS=" + strings.Join(a.SSHKeys, "\n"),
	}
}

// limitedBuffer keeps the first maxCommandOutput bytes written to it and
// drops the rest, so a chatty command cannot fill the agent's memory.
type limitedBuffer struct{ bytes.Buffer }

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := maxCommandOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// normaliseKeys checks the keys an assignment carries and returns them one
// per line as OpenSSH writes them. Each must be a single public key
// (ed25519, ECDSA, RSA, security-key types) with an optional comment and no
// options: the server sends only keys, and a line it could shape (a
// command="…" option, a second key, a marker) is refused.
func normaliseKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, errors.New("no SSH keys to install")
	}
	out := make([]string, 0, len(keys))
	for i, k := range keys {
		k = strings.TrimSpace(k)
		if strings.ContainsFunc(k, unicode.IsControl) {
			return nil, fmt.Errorf("SSH key %d holds a line break or control character", i+1)
		}
		pub, comment, options, rest, err := ssh.ParseAuthorizedKey([]byte(k))
		switch {
		case err != nil:
			return nil, fmt.Errorf("SSH key %d is not an SSH public key", i+1)
		case len(options) > 0:
			return nil, fmt.Errorf("SSH key %d carries options (%s); only keys are accepted", i+1, clip(strings.Join(options, ","), 60))
		case len(bytes.TrimSpace(rest)) > 0:
			return nil, fmt.Errorf("SSH key %d holds more than one key", i+1)
		}
		line := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
		if comment != "" {
			line += " " + comment
		}
		out = append(out, line)
	}
	return out, nil
}

// keysDigest identifies a set of keys, to tell whether a piece's keys changed.
func keysDigest(keys []string) string {
	sum := sha256.Sum256([]byte(strings.Join(keys, "\n")))
	return hex.EncodeToString(sum[:])
}

// authorizedKeys is the built-in hook: it writes each piece's keys into one
// authorized_keys file between marker lines
//
//	# gpumarket piece 31 begin
//	ssh-ed25519 AAAA… buyer@example
//	# gpumarket piece 31 end
//
// and leaves every other line as it was.
type authorizedKeys struct {
	path string
	// uid and gid own a file or directory the hook creates when the agent
	// runs as root for another user; -1 keeps the agent's own.
	uid, gid int
}

func beginMarker(piece int64) string { return fmt.Sprintf("# gpumarket piece %d begin", piece) }
func endMarker(piece int64) string   { return fmt.Sprintf("# gpumarket piece %d end", piece) }

// install writes the piece's block, replacing one already there.
func (k *authorizedKeys) install(piece int64, keys []string) error {
	keys, err := normaliseKeys(keys)
	if err != nil {
		return fmt.Errorf("piece %d: %w", piece, err)
	}
	old, err := os.ReadFile(k.path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("authorized_keys: %w", err)
	}
	if errors.Is(err, os.ErrNotExist) {
		if err := k.makeDir(); err != nil {
			return err
		}
	}
	data, err := withBlock(old, piece, keys)
	if err != nil {
		return fmt.Errorf("authorized_keys %s: %w", k.path, err)
	}
	return k.write(data)
}

// remove deletes exactly the piece's block; a file without it is left alone.
func (k *authorizedKeys) remove(piece int64) error {
	old, err := os.ReadFile(k.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("authorized_keys: %w", err)
	}
	data, found, err := withoutBlock(old, piece)
	if err != nil {
		return fmt.Errorf("authorized_keys %s: %w", k.path, err)
	}
	if !found {
		return nil
	}
	return k.write(data)
}

// makeDir creates the directory of a new authorized_keys file (~/.ssh),
// owned by the user, readable by no one else.
func (k *authorizedKeys) makeDir() error {
	dir := filepath.Dir(k.path)
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("authorized_keys: %w", err)
	}
	if k.uid >= 0 {
		if err := os.Chown(dir, k.uid, k.gid); err != nil {
			return fmt.Errorf("authorized_keys: %w", err)
		}
	}
	return nil
}

func (k *authorizedKeys) write(data []byte) error {
	if err := writeFileAtomicOwned(k.path, data, 0o600, k.uid, k.gid); err != nil {
		return fmt.Errorf("authorized_keys: %w", err)
	}
	return nil
}

// markerLines finds a piece's block in lines: the indexes of its begin and
// end markers, or -1, -1. A begin without its end (or the reverse, or two
// blocks) is an error: the file was edited by hand and guessing could
// remove someone else's key.
func markerLines(lines []string, piece int64) (begin, end int, err error) {
	begin, end = -1, -1
	b, e := beginMarker(piece), endMarker(piece)
	for i, l := range lines {
		switch strings.TrimRight(l, " \t\r\n") {
		case b:
			if begin >= 0 {
				return -1, -1, fmt.Errorf("two blocks for piece %d; fix the file by hand", piece)
			}
			begin = i
		case e:
			if begin < 0 || end >= 0 {
				return -1, -1, fmt.Errorf("an end marker for piece %d without its begin; fix the file by hand", piece)
			}
			end = i
		}
	}
	if begin >= 0 && end < 0 {
		return -1, -1, fmt.Errorf("a begin marker for piece %d without its end; fix the file by hand", piece)
	}
	return begin, end, nil
}

// withBlock returns the file with the piece's block of keys: in place of
// the old block, or appended. Every other byte is kept.
func withBlock(old []byte, piece int64, keys []string) ([]byte, error) {
	lines := strings.SplitAfter(string(old), "\n")
	begin, end, err := markerLines(lines, piece)
	if err != nil {
		return nil, err
	}
	block := beginMarker(piece) + "\n" + strings.Join(keys, "\n") + "\n" + endMarker(piece) + "\n"
	if begin >= 0 {
		return []byte(strings.Join(lines[:begin], "") + block + strings.Join(lines[end+1:], "")), nil
	}
	out := old
	if len(out) > 0 && out[len(out)-1] != '\n' {
		out = append(out, '\n')
	}
	return append(out, block...), nil
}

// withoutBlock returns the file without the piece's block, and whether it
// was there. Every other byte is kept.
func withoutBlock(old []byte, piece int64) ([]byte, bool, error) {
	lines := strings.SplitAfter(string(old), "\n")
	begin, end, err := markerLines(lines, piece)
	if err != nil || begin < 0 {
		return old, false, err
	}
	return []byte(strings.Join(lines[:begin], "") + strings.Join(lines[end+1:], "")), true, nil
}

// writeFileAtomic replaces the file at path with data: written to a
// temporary file beside it, synced, then renamed over it, so a reader (sshd)
// sees the old file or the new one, never half of one. An existing file
// keeps its mode and owner; a new one gets mode.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	return writeFileAtomicOwned(path, data, mode, -1, -1)
}

// writeFileAtomicOwned is writeFileAtomic giving a new file to uid and gid
// (-1: the agent's own).
func writeFileAtomicOwned(path string, data []byte, mode fs.FileMode, uid, gid int) error {
	// A symbolic link is followed: the file it names is replaced, the link kept.
	if target, err := filepath.EvalSymlinks(path); err == nil {
		path = target
	}
	fi, err := os.Stat(path)
	switch {
	case err == nil:
		mode = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".gpumarket-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	// Only root can give a file away; the agent's own files need nothing.
	if uid >= 0 && (uid != os.Getuid() || gid != os.Getgid()) {
		if err := tmp.Chown(uid, gid); err != nil {
			tmp.Close()
			return fmt.Errorf("keep the owner of %s: %w", path, err)
		}
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	// The rename is durable once the directory is synced.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
