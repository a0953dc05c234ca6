package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestWithBlockAndWithoutBlock(t *testing.T) {
	b31 := "# gpumarket piece 31 begin\n" + buyerKey + "\n# gpumarket piece 31 end\n"
	b31two := "# gpumarket piece 31 begin\n" + buyerKey + "\n" + secondKey + "\n# gpumarket piece 31 end\n"
	b7 := "# gpumarket piece 7 begin\n" + secondKey + "\n# gpumarket piece 7 end\n"
	own := "# the provider's own\n" + providerKey + "\n"
	for _, tc := range []struct {
		name      string
		old       string
		keys      []string // installed for piece 31
		installed string   // the file after install
	}{
		{"empty file", "", []string{buyerKey}, b31},
		{"other lines kept", own, []string{buyerKey}, own + b31},
		{"no final newline", strings.TrimSuffix(own, "\n"), []string{buyerKey}, own + b31},
		{"block replaced in place", own + b31 + b7, []string{buyerKey, secondKey}, own + b31two + b7},
		{"another piece's block kept", b7 + own, []string{buyerKey}, b7 + own + b31},
		{"CRLF file", "ssh-rsa AAAA old\r\n", []string{buyerKey}, "ssh-rsa AAAA old\r\n" + b31},
		{"piece 310 is not piece 31", strings.ReplaceAll(b31, "piece 31 ", "piece 310 "), []string{buyerKey},
			strings.ReplaceAll(b31, "piece 31 ", "piece 310 ") + b31},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := withBlock([]byte(tc.old), 31, tc.keys)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.installed {
				t.Fatalf("installed:\n%q\nwant\n%q", got, tc.installed)
			}
			// Removal deletes exactly the block: what was there before comes
			// back, but for a final newline the file lacked.
			back, found, err := withoutBlock(got, 31)
			if err != nil || !found {
				t.Fatalf("remove: found %v, %v", found, err)
			}
			want, _, _ := withoutBlock([]byte(tc.old), 31)
			if !strings.HasSuffix(string(want), "\n") && len(want) > 0 {
				want = append(want, '\n')
			}
			if string(back) != string(want) {
				t.Errorf("after removal:\n%q\nwant\n%q", back, want)
			}
		})
	}
}

func TestBrokenBlocksAreNotGuessed(t *testing.T) {
	begin, end := "# gpumarket piece 31 begin\n", "# gpumarket piece 31 end\n"
	for _, tc := range []struct{ name, file, err string }{
		{"begin without end", begin + buyerKey + "\n", "without its end"},
		{"end without begin", buyerKey + "\n" + end, "without its begin"},
		{"two blocks", begin + end + begin + end, "two blocks"},
		{"end before begin", end + begin, "without its begin"},
	} {
		for _, op := range []string{"install", "remove"} {
			var err error
			if op == "install" {
				_, err = withBlock([]byte(tc.file), 31, []string{buyerKey})
			} else {
				_, _, err = withoutBlock([]byte(tc.file), 31)
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "fix the file by hand") {
				t.Errorf("%s, %s: %v, want %q", tc.name, op, err, tc.err)
			}
		}
	}
}

func TestNormaliseKeys(t *testing.T) {
	got, err := normaliseKeys([]string{"  " + buyerKey + "  ", secondKey, strings.TrimSuffix(buyerKey, " buyer@example")})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{buyerKey, secondKey, strings.TrimSuffix(buyerKey, " buyer@example")}; !slices.Equal(got, want) {
		t.Errorf("keys %q, want %q", got, want)
	}
	for _, tc := range []struct {
		key, err string
	}{
		{"not a key", "is not an SSH public key"},
		{`command="/bin/sh" ` + buyerKey, "carries options"},
		{buyerKey + "\n" + secondKey, "line break"},
		{buyerKey + "\r# gpumarket piece 31 end", "line break"},
		{"# gpumarket piece 31 end", "is not an SSH public key"},
		{"ssh-ed25519 AAAAnotbase64!! x", "is not an SSH public key"},
	} {
		if _, err := normaliseKeys([]string{buyerKey, tc.key}); err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "key 2") {
			t.Errorf("%q: %v, want %q about key 2", tc.key, err, tc.err)
		}
	}
	if _, err := normaliseKeys(nil); err == nil {
		t.Error("no keys accepted")
	}
}

// TestAuthorizedKeysFile installs and removes through the file: mode kept,
// other lines untouched, the file replaced by a rename (a reader holding the
// old file still reads all of it), no temporary file left behind.
func TestAuthorizedKeysFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "authorized_keys")
	own := providerKey + "\n# a comment\n"
	if err := os.WriteFile(path, []byte(own), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	before, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	k := &authorizedKeys{path: path, uid: -1, gid: -1}

	if err := k.install(31, []string{buyerKey}); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, own+"# gpumarket piece 31 begin\n"+buyerKey+"\n# gpumarket piece 31 end\n", 0o640)
	if old, _ := io.ReadAll(before); string(old) != own {
		t.Errorf("the old file changed under its reader: %q", old)
	}
	if err := k.install(8, []string{secondKey}); err != nil {
		t.Fatal(err)
	}
	if err := k.install(31, []string{secondKey}); err != nil { // the buyer's keys changed
		t.Fatal(err)
	}
	assertFile(t, path, own+"# gpumarket piece 31 begin\n"+secondKey+"\n# gpumarket piece 31 end\n"+
		"# gpumarket piece 8 begin\n"+secondKey+"\n# gpumarket piece 8 end\n", 0o640)
	if err := k.remove(31); err != nil {
		t.Fatal(err)
	}
	if err := k.remove(31); err != nil { // twice: nothing to do
		t.Fatal(err)
	}
	if err := k.remove(8); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, own, 0o640)
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("files left beside authorized_keys: %v", entries)
	}
	// A bad key leaves the file alone.
	if err := k.install(9, []string{"ssh-ed25519 nonsense"}); err == nil {
		t.Error("a bad key was installed")
	}
	assertFile(t, path, own, 0o640)
}

// TestAuthorizedKeysNewFile: the hook creates ~/.ssh (0700) and the file
// (0600) when they do not exist; removal from a missing file is no error.
func TestAuthorizedKeysNewFile(t *testing.T) {
	home := t.TempDir()
	path := filepath.Join(home, ".ssh", "authorized_keys")
	k := &authorizedKeys{path: path, uid: -1, gid: -1}
	if err := k.remove(31); err != nil {
		t.Fatalf("remove from a missing file: %v", err)
	}
	if err := k.install(31, []string{buyerKey}); err != nil {
		t.Fatal(err)
	}
	assertFile(t, path, "# gpumarket piece 31 begin\n"+buyerKey+"\n# gpumarket piece 31 end\n", 0o600)
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("~/.ssh: %v %v, want mode 0700", fi.Mode(), err)
	}
}

// TestAuthorizedKeysThroughSymlink: a symlinked authorized_keys has its
// target replaced and stays a link.
func TestAuthorizedKeysThroughSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "keys")
	link := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(target, []byte(providerKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	k := &authorizedKeys{path: link, uid: -1, gid: -1}
	if err := k.install(31, []string{buyerKey}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced by a file: %v", err)
	}
	assertFile(t, target, providerKey+"\n# gpumarket piece 31 begin\n"+buyerKey+"\n# gpumarket piece 31 end\n", 0o600)
}

func assertFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != content {
		t.Errorf("%s:\n%s\nwant\n%s", filepath.Base(path), b, content)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != mode {
		t.Errorf("%s has mode %v, want %v", filepath.Base(path), fi.Mode().Perm(), mode)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		t.Errorf("%s is owned by %d, want %d", filepath.Base(path), st.Uid, os.Getuid())
	}
}

// TestExternalHooks: the provider's commands get the assignment on
// standard input and as GPUMARKET_* variables (never the host token), may
// replace the connection by printing JSON, and fail with their message.
func TestExternalHooks(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(tokenEnv, testToken)
	script := filepath.Join(dir, "hook.sh")
	body := `#!/bin/sh
cat > "` + dir + `/stdin-$1.json"
{
	echo "action=$GPUMARKET_ACTION piece=$GPUMARKET_PIECE_ID reservation=$GPUMARKET_RESERVATION_ID devices=$GPUMARKET_DEVICES"
	echo "start=$GPUMARKET_START end=$GPUMARKET_END token=${GPUMARKET_AGENT_TOKEN:-none}"
	printf '%s\n' "$GPUMARKET_SSH_KEYS"
} > "` + dir + `/env-$1"
case "$1" in
install) echo '{"port": 2201, "user": "piece31"}' ;;
remove) echo "container gone" ; echo "stopping failed" >&2 ; exit 3 ;;
esac
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	h := hooks{install: []string{script, "install"}, remove: []string{script, "remove"},
		conn: connection{Host: "203.0.113.7", Port: 22, User: "gpu"}}
	as := assignment{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0, End: t0.Add(10 * time.Hour),
		SSHKeys: []string{buyerKey, secondKey}, Acceptance: true, State: stateInstall}

	conn, _, err := h.Install(context.Background(), as)
	if err != nil {
		t.Fatal(err)
	}
	if want := (connection{Host: "203.0.113.7", Port: 2201, User: "piece31"}); conn != want {
		t.Errorf("connection %+v, want %+v", conn, want)
	}
	var got assignment
	b, _ := os.ReadFile(filepath.Join(dir, "stdin-install.json"))
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("stdin %q: %v", b, err)
	}
	if got.PieceID != 31 || got.ReservationID != 12 || got.Devices != 8 || !got.Start.Equal(t0) || !got.End.Equal(as.End) ||
		!slices.Equal(got.SSHKeys, as.SSHKeys) || got.State != stateInstall {
		t.Errorf("stdin assignment %+v", got)
	}
	envWant := "action=install piece=31 reservation=12 devices=8\n" +
		"start=2026-12-01T10:00:00Z end=2026-12-01T20:00:00Z token=none\n" +
		buyerKey + "\n" + secondKey + "\n"
	if b, _ := os.ReadFile(filepath.Join(dir, "env-install")); string(b) != envWant {
		t.Errorf("environment:\n%s\nwant\n%s", b, envWant)
	}

	out, err := h.Remove(context.Background(), as)
	var ce *commandError
	if !errors.As(err, &ce) || ce.Reason != "exit status 3" || ce.Stderr != "stopping failed" || out != "container gone\n" {
		t.Errorf("remove: %v (%+v), output %q", err, ce, out)
	}
}

func TestHookPrintingBadJSONFails(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '{\"port\": \"many\"}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := hooks{install: []string{script}, remove: []string{script}, conn: connection{Host: "h", Port: 22, User: "gpu"}}
	if _, _, err := h.Install(context.Background(), assignment{PieceID: 1}); err == nil || !strings.Contains(err.Error(), "not {\"host\", \"port\", \"user\"}") {
		t.Errorf("install: %v", err)
	}
}

func TestHookTimeout(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "hook.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 10\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := runCommand(context.Background(), []string{script}, "install", assignment{PieceID: 1}, 100*time.Millisecond)
	var ce *commandError
	if !errors.As(err, &ce) || ce.Reason != "no result after 100ms" {
		t.Errorf("timeout: %v", err)
	}
	if time.Since(start) > 5*time.Second {
		t.Errorf("the hook ran %s past its timeout", time.Since(start))
	}
}

// TestRemovalFailureIsReportedOnce: a remove hook that fails is tried again
// at each heartbeat; the server is told of the failure once (not at every
// retry), and "removed" once it succeeds.
func TestRemovalFailureIsReportedOnce(t *testing.T) {
	dir := t.TempDir()
	stuck := filepath.Join(dir, "stuck")
	if err := os.WriteFile(stuck, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	remove := filepath.Join(dir, "remove.sh")
	script := "#!/bin/sh\nif [ -e " + stuck + " ]; then echo 'processes still running' >&2; exit 3; fi\n"
	if err := os.WriteFile(remove, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{{ReservationID: 12, PieceID: 31, Devices: 8, Start: t0, End: t0.Add(20 * time.Second), SSHKeys: []string{buyerKey}}}
	args := []string{"-server", srv.URL, "-state", filepath.Join(dir, "state.json"), "-simulate", "H100 80GB SXM x8",
		"-host", "203.0.113.7", "-ssh-user", "gpu", "-install-hook", "/bin/true", "-remove-hook", remove}
	a, ctx := newTestAgent(t, args, clock, func() bool {
		if clock.Now().Sub(t0) >= 70*time.Second {
			os.Remove(stuck) // fixed by hand
		}
		return clock.Now().Sub(t0) > 100*time.Second
	})
	if err := a.run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := srv.removeFailed[31]; len(got) != 1 || !strings.Contains(got[0], "exit status 3") || !strings.Contains(got[0], "processes still running") {
		t.Errorf("remove_failed reports %q, want one naming the failure", got)
	}
	if got := srv.removed[31]; len(got) != 1 || got[0].RemovedAt.Before(t0.Add(70*time.Second)) {
		t.Errorf("removed reports %+v, want one after the fix", got)
	}
}
