package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// TestRentalUsersEndAccessWithRealSSHD runs the agent with -rental-users
// against the host's real sshd (configured as docs/agent.md says: a Match
// Group block whose AuthorizedKeysFile is the agent's root-owned file) and
// two overlapping rentals on one node, as root (useradd; CI runs as root).
// During the rental the buyer logs in as the piece's own user, appends a
// second key to ~/.ssh/authorized_keys (which must not log in), leaves a
// background process and files; the other rental's user can read neither
// the first one's files, the host token nor the agent's state, nor signal
// the agent. At the end the user, its home, its files in /tmp and the
// background process are gone and no key logs in, while the other rental
// goes on.
func TestRentalUsersEndAccessWithRealSSHD(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the agent creates Unix users with useradd (CI runs as root)")
	}
	for _, prog := range []string{"/usr/sbin/sshd", "ssh-keygen", "useradd", "userdel", "groupadd", "groupdel"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Skipf("needs %s: %v", prog, err)
		}
	}
	// StrictModes checks every directory above the keys file up to /: not
	// under /tmp (world-writable), so under /var/lib.
	base, err := os.MkdirTemp("/var/lib", "gpumarket-rental-test-")
	if err != nil {
		t.Skipf("no directory outside /tmp for sshd's StrictModes: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	for _, d := range []string{base, filepath.Join(base, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	keysDir := filepath.Join(base, "keys")
	suffix := make([]byte, 3)
	rand.Read(suffix)
	prefix := "gt" + hex.EncodeToString(suffix) + "p"
	group := "gt" + hex.EncodeToString(suffix) + "g"
	const pieceA, pieceB = 31, 32
	userA, userB := prefix+"31", prefix+"32"
	t.Cleanup(func() {
		// Whatever the test left (it fails if the agent left anything).
		for _, u := range []string{userA, userB} {
			if uu, err := user.Lookup(u); err == nil {
				uid, _ := strconv.Atoi(uu.Uid)
				gid, _ := strconv.Atoi(uu.Gid)
				_ = killUser(context.Background(), uid, gid)
				_ = exec.Command("userdel", "--remove", u).Run()
			}
		}
		_ = exec.Command("groupdel", group).Run()
	})

	port := freePort(t)
	startSSHD(t, base, port, group, keysDir)

	// The token file is 0600 in a directory anyone may pass: only its mode
	// keeps the other renter out. The state is in the agent's 0700 directory.
	tokenFile := filepath.Join(base, "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateFile := filepath.Join(base, "agent", "state.json")

	buyerA, buyerAPub := newSSHKey(t, "buyer-a")
	appended, appendedPub := newSSHKey(t, "added-by-the-renter")
	buyerB, buyerBPub := newSSHKey(t, "buyer-b")

	clock := &fakeClock{t: t0}
	srv := newFakeServer(t, clock.Now)
	srv.pieces = []assignment{
		{ReservationID: 12, PieceID: pieceA, Devices: 4, Start: t0.Add(10 * time.Second), End: t0.Add(60 * time.Second), SSHKeys: []string{buyerAPub}},
		{ReservationID: 13, PieceID: pieceB, Devices: 4, Start: t0.Add(10 * time.Second), End: t0.Add(90 * time.Second), SSHKeys: []string{buyerBPub}},
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{"-server", srv.URL, "-state", stateFile, "-token-file", tokenFile, "-simulate", "H100 80GB SXM x8",
		"-host", "127.0.0.1", "-port", strconv.Itoa(port), "-rental-users", "-keys-dir", keysDir,
		"-home-base", filepath.Join(base, "home"), "-user-prefix", prefix, "-rental-group", group}

	var leftPID int
	leftFile := "/tmp/" + prefix + "-left-behind"
	homeA := filepath.Join(base, "home", userA)
	during, after := false, false
	a, ctx := newTestAgent(t, args, clock, func() bool {
		at := clock.Now().Sub(t0)
		switch {
		case at >= 30*time.Second && !during:
			during = true
			leftPID = duringTheRentals(t, addr, userA, userB, buyerA, appended, buyerB, appendedPub, homeA, leftFile, tokenFile, stateFile)
		case at >= 70*time.Second && !after:
			after = true
			afterTheFirstEnds(t, addr, userA, userB, buyerA, appended, buyerB, homeA, leftFile, keysDir, leftPID)
		}
		return at > 100*time.Second
	})
	if err := a.run(ctx); err != nil {
		t.Fatalf("run: %v", err)
	}
	if !during || !after {
		t.Fatalf("the checks did not run (during %v, after %v)", during, after)
	}
	for _, hb := range srv.accepted() {
		if hb.Isolation != isolationRentalUsers {
			t.Errorf("heartbeat reports isolation %q, want %q", hb.Isolation, isolationRentalUsers)
			break
		}
	}
	for _, piece := range []int64{pieceA, pieceB} {
		inst := srv.installed[piece]
		want := connection{Host: "127.0.0.1", Port: port, User: prefix + strconv.FormatInt(piece, 10)}
		if len(inst) == 0 || inst[0].Connection != want {
			t.Errorf("piece %d installed %+v, want the connection %+v", piece, inst, want)
		}
		if len(srv.removed[piece]) != 1 {
			t.Errorf("piece %d removed reports %+v, want one", piece, srv.removed[piece])
		}
	}
	// The second rental ended too: its user is gone as well.
	if _, err := user.Lookup(userB); err == nil {
		t.Errorf("user %s still exists after its rental", userB)
	}
	if _, err := sshAs(addr, userB, buyerB, "true"); err == nil {
		t.Errorf("%s still logs in after its rental", userB)
	}
}

// duringTheRentals does what renters do while both rentals run and checks
// what each may do; it returns the background process left by the first.
func duringTheRentals(t *testing.T, addr, userA, userB string, buyerA, appended, buyerB ssh.Signer, appendedPub, homeA, leftFile, tokenFile, stateFile string) int {
	t.Helper()
	out, err := sshAs(addr, userA, buyerA, "id -un; mkdir -p ~/.ssh && echo '"+appendedPub+"' >> ~/.ssh/authorized_keys && "+
		"echo secret-of-a > ~/secret && chmod 644 ~/secret && echo left > "+leftFile+" && "+
		"(nohup sleep 31337 >/dev/null 2>&1 </dev/null & echo $!)")
	if err != nil {
		t.Fatalf("the first buyer does not log in as %s: %v\n%s", userA, err, out)
	}
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[0] != userA {
		t.Fatalf("as %s: %q, want the user's name and a pid", userA, out)
	}
	pid, err := strconv.Atoi(lines[1])
	if err != nil {
		t.Fatalf("pid %q: %v", lines[1], err)
	}
	uA, err := user.Lookup(userA)
	if err != nil {
		t.Fatalf("user %s: %v", userA, err)
	}
	if uid, ok := processUID(pid); !ok || strconv.Itoa(uid) != uA.Uid {
		t.Fatalf("the background process %d: uid %d (running %v), want %s's %s", pid, uid, ok, userA, uA.Uid)
	}
	// sshd reads only the agent's root-owned file: the key the renter
	// appended does not log in, even during the rental.
	if _, err := sshAs(addr, userA, appended, "true"); err == nil {
		t.Errorf("a key the renter appended to ~/.ssh/authorized_keys logs in")
	}
	fi, err := os.Stat(filepath.Join(filepath.Dir(homeA), "..", "keys", userA))
	if err != nil {
		t.Fatalf("keys file of %s: %v", userA, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || fi.Mode().Perm() != 0o640 {
		t.Errorf("keys file of %s: uid %d mode %o, want root's and 640", userA, st.Uid, fi.Mode().Perm())
	}
	// The other renter is another uid: nothing of the first, nor of the agent.
	if out, err := sshAs(addr, userB, buyerB, "id -un"); err != nil || strings.TrimSpace(out) != userB {
		t.Fatalf("the second buyer as %s: %q, %v", userB, out, err)
	}
	for what, cmd := range map[string]string{
		"the first renter's file":  "cat " + filepath.Join(homeA, "secret"),
		"the host token":           "cat " + tokenFile,
		"the agent's state":        "cat " + stateFile,
		"signal the agent":         "kill -0 " + strconv.Itoa(os.Getpid()),
		"kill the first's process": "kill -9 " + strconv.Itoa(pid),
	} {
		if out, err := sshAs(addr, userB, buyerB, cmd); err == nil {
			t.Errorf("as %s, %s (%s) succeeded: %q", userB, what, cmd, out)
		} else if strings.Contains(out, "secret-of-a") || strings.Contains(out, testToken) {
			t.Errorf("as %s, %s printed it: %q", userB, what, out)
		}
	}
	if _, ok := processUID(pid); !ok {
		t.Errorf("the first renter's process %d was killed by the second renter", pid)
	}
	return pid
}

// afterTheFirstEnds checks that the first rental's access is over and the
// second's is not.
func afterTheFirstEnds(t *testing.T, addr, userA, userB string, buyerA, appended, buyerB ssh.Signer, homeA, leftFile, keysDir string, pid int) {
	t.Helper()
	if _, err := sshAs(addr, userA, buyerA, "true"); err == nil {
		t.Errorf("the buyer's key still logs in as %s after the end", userA)
	}
	if _, err := sshAs(addr, userA, appended, "true"); err == nil {
		t.Errorf("the key the renter appended logs in as %s after the end", userA)
	}
	if uid, ok := processUID(pid); ok {
		t.Errorf("the rental's background process %d (uid %d) still runs after the end", pid, uid)
	}
	if _, err := user.Lookup(userA); err == nil {
		t.Errorf("user %s still exists after the end", userA)
	}
	for _, p := range []string{homeA, leftFile, filepath.Join(keysDir, userA)} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is still there after the end (%v)", p, err)
		}
	}
	if out, err := sshAs(addr, userB, buyerB, "id -un"); err != nil || strings.TrimSpace(out) != userB {
		t.Errorf("the other rental, still running, lost its access: %q, %v", out, err)
	}
}

// startSSHD runs the host's sshd on port with the configuration
// docs/agent.md gives, until the test ends.
func startSSHD(t *testing.T, base string, port int, group, keysDir string) {
	t.Helper()
	hostKey := filepath.Join(base, "ssh_host_ed25519_key")
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", hostKey).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	// sshd's privilege separation directory, as the openssh-server package makes it.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(base, "sshd_config")
	conf := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
StrictModes yes
Match Group %s
    AuthorizedKeysFile %s/%%u
`, port, hostKey, filepath.Join(base, "sshd.pid"), group, keysDir)
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/sbin/sshd", "-t", "-f", cfg).CombinedOutput(); err != nil {
		t.Fatalf("sshd -t: %v\n%s", err, out)
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", cfg)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("sshd: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("sshd's log:\n%s", log.String())
		}
	})
	for i := 0; ; i++ {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second)
		if err == nil {
			c.Close()
			return
		}
		if i == 50 {
			t.Fatalf("sshd does not listen on %d: %v\n%s", port, err, log.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sshAs logs in as name with key and runs cmd, returning its output.
func sshAs(addr, name string, key ssh.Signer, cmd string) (string, error) {
	c, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: name, Auth: []ssh.AuthMethod{ssh.PublicKeys(key)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), Timeout: 10 * time.Second})
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	return string(out), err
}

func newSSHKey(t *testing.T, comment string) (ssh.Signer, string) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s, strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.PublicKey()))) + " " + comment
}

// processUID is the real uid of a running process (not a zombie).
func processUID(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil || strings.Contains(string(b), "State:\tZ") {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				uid, err := strconv.Atoi(f[0])
				return uid, err == nil
			}
		}
	}
	return 0, false
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
