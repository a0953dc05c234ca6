package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Isolation modes the agent reports in its heartbeats (docs/agent.md,
// "Which mode isolates what"): how a piece without a container is kept
// apart from the host and from other renters.
const (
	// isolationRentalUsers: each piece is its own Unix user whose keys
	// live in a root-owned file (-rental-users).
	isolationRentalUsers = "rental_users"
	// isolationSharedUser: every renter is the one -ssh-user (the built-in
	// authorized_keys writer): the offer says "shared host user".
	isolationSharedUser = "shared_user"
	// isolationHooks: the provider's own -install-hook and -remove-hook.
	isolationHooks = "provider_hooks"
)

// rentalUsers is the per-rental Unix users mode (-rental-users): the agent,
// running as root, creates a user for each piece (prefix and piece id,
// "rent31"), writes the buyer's keys to a root-owned file sshd reads for
// that user (AuthorizedKeysFile keysDir/%u), and at the end removes the
// file, kills every process of the user, removes the user with its home
// and whatever else it left in the shared temporary directories. Keys a
// renter adds anywhere else are never read by sshd.
type rentalUsers struct {
	keysDir  string // sshd's AuthorizedKeysFile directory, e.g. /etc/gpumarket/keys
	homeBase string // where the users' homes go, e.g. /home
	prefix   string // user name prefix, e.g. "rent"
	group    string // the supplementary group of every rental user (sshd's Match Group)
	shell    string
	// tempDirs are the shared writable directories cleared of the user's
	// files at the end, so a later user given the same uid finds nothing.
	tempDirs []string
	// run runs a program (useradd, userdel, groupadd); tests see the real one.
	run func(ctx context.Context, name string, args ...string) ([]byte, []byte, error)
}

// userTimeout bounds one useradd, userdel or kill.
const userTimeout = 30 * time.Second

// userName is the piece's Unix user.
func (r *rentalUsers) userName(piece int64) string {
	return r.prefix + strconv.FormatInt(piece, 10)
}

func (r *rentalUsers) keysPath(name string) string { return filepath.Join(r.keysDir, name) }

// check is run once at the start: the mode needs root, an absolute keys
// directory and the tools it calls.
func (r *rentalUsers) check() error {
	if os.Geteuid() != 0 {
		return errors.New("-rental-users needs root: the agent creates and removes a Unix user per rental (or run without it: offers then say \"shared host user\")")
	}
	if !filepath.IsAbs(r.keysDir) || !filepath.IsAbs(r.homeBase) {
		return errors.New("-keys-dir and -home-base must be absolute paths")
	}
	if !sshUserRe.MatchString(r.prefix+"0") || len(r.prefix) > 20 {
		return fmt.Errorf("-user-prefix %q does not make user names (lower-case letters, digits, '_', '-', at most 20)", r.prefix)
	}
	for _, prog := range []string{"useradd", "userdel", "groupadd"} {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("-rental-users: %w", err)
		}
	}
	return nil
}

// install creates the piece's user unless it exists and writes its keys;
// it returns the user name.
func (r *rentalUsers) install(ctx context.Context, piece int64, keys []string) (string, error) {
	keys, err := normaliseKeys(keys)
	if err != nil {
		return "", fmt.Errorf("piece %d: %w", piece, err)
	}
	name := r.userName(piece)
	ctx, cancel := context.WithTimeout(ctx, userTimeout)
	defer cancel()
	if _, err := user.LookupGroup(r.group); err != nil {
		if err := r.exec(ctx, "groupadd", "--force", "--system", r.group); err != nil {
			return "", err
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		home := filepath.Join(r.homeBase, name)
		// The password "*" matches no password but is not "locked" ("!"):
		// sshd without PAM refuses a locked account even for keys.
		if err := r.exec(ctx, "useradd", "--create-home", "--home-dir", home, "--shell", r.shell, "--user-group",
			"--groups", r.group, "--password", "*", "--comment", fmt.Sprintf("gpumarket piece %d", piece), name); err != nil {
			return "", err
		}
		if u, err = user.Lookup(name); err != nil {
			return "", fmt.Errorf("useradd %s: the user is not there after it: %w", name, err)
		}
		if err := os.Chmod(u.HomeDir, 0o700); err != nil {
			return "", fmt.Errorf("home of %s: %w", name, err)
		}
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return "", fmt.Errorf("user %s: gid %q", name, u.Gid)
	}
	// sshd reads the file as the user: the user's group may read it, only
	// root may change it, and the directory may be passed but not listed.
	if err := os.MkdirAll(r.keysDir, 0o711); err != nil {
		return "", fmt.Errorf("keys directory: %w", err)
	}
	data := []byte(strings.Join(keys, "\n") + "\n")
	path := r.keysPath(name)
	if err := writeFileAtomicOwned(path, data, 0o640, 0, gid); err != nil {
		return "", fmt.Errorf("keys of %s: %w", name, err)
	}
	// An existing file keeps its owner and mode in writeFileAtomicOwned;
	// this one must be root's whatever was there.
	if err := os.Chown(path, 0, gid); err != nil {
		return "", fmt.Errorf("keys of %s: %w", name, err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		return "", fmt.Errorf("keys of %s: %w", name, err)
	}
	return name, nil
}

// remove ends the piece's access: its keys file goes (no new login), every
// process of its user is killed, the user and its home are removed, and
// files it left in the shared temporary directories go. Removing a user
// that is not there is not an error.
func (r *rentalUsers) remove(ctx context.Context, piece int64) error {
	name := r.userName(piece)
	if err := os.Remove(r.keysPath(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("keys of %s: %w", name, err)
	}
	u, err := user.Lookup(name)
	var unknown user.UnknownUserError
	if errors.As(err, &unknown) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("user %s: %w", name, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil || uid == 0 {
		return fmt.Errorf("user %s: uid %q is not a rental user's", name, u.Uid)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return fmt.Errorf("user %s: gid %q", name, u.Gid)
	}
	ctx, cancel := context.WithTimeout(ctx, userTimeout)
	defer cancel()
	if err := killUser(ctx, uid, gid); err != nil {
		return fmt.Errorf("user %s: %w", name, err)
	}
	if err := r.exec(ctx, "userdel", "--remove", name); err != nil {
		// userdel fails on a home it cannot remove; the user may be gone.
		if _, lookErr := user.Lookup(name); lookErr == nil {
			return err
		}
	}
	if strings.HasPrefix(u.HomeDir, r.homeBase+"/") {
		if err := os.RemoveAll(u.HomeDir); err != nil {
			return fmt.Errorf("home of %s: %w", name, err)
		}
	}
	for _, dir := range r.tempDirs {
		if err := removeOwnedBy(dir, uid); err != nil {
			return fmt.Errorf("files of %s in %s: %w", name, dir, err)
		}
	}
	return nil
}

func (r *rentalUsers) exec(ctx context.Context, name string, args ...string) error {
	_, stderr, err := r.run(ctx, name, args...)
	if err != nil {
		msg := fmt.Sprintf("%s %s: %v", name, args[len(args)-1], err)
		if line := firstLine(stderr); line != "" {
			msg += ": " + line
		}
		return errors.New(msg)
	}
	return nil
}

// killUser kills every process of uid and returns once none is left. It
// first signals them all at once from a process of that uid (kill -1, which
// the kernel applies to every process the sender may signal, so a process
// forking meanwhile does not escape), then sweeps /proc as root until a
// sweep finds none: a renter's process that killed the first kill is
// caught there.
func killUser(ctx context.Context, uid, gid int) error {
	if kill, err := exec.LookPath("kill"); err == nil {
		cmd := exec.CommandContext(ctx, kill, "-s", "KILL", "--", "-1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
		_ = cmd.Run() // "kill: (-1): no such process" when there were none; the sweep decides
	}
	for round := 0; ; round++ {
		pids, err := processesOf(uid)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if round >= 50 || ctx.Err() != nil {
			return fmt.Errorf("%d processes of uid %d still running after %d rounds of SIGKILL", len(pids), uid, round)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// processesOf lists the processes whose real, effective or saved uid is uid
// (a zombie counts until its parent reaps it; killed processes whose parent
// is one of the user's are reaped by init).
func processesOf(uid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	want := strconv.Itoa(uid)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		status, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue // gone meanwhile
		}
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
				ids := strings.Fields(rest)
				if len(ids) >= 3 && (ids[0] == want || ids[1] == want || ids[2] == want) {
					if !strings.Contains(string(status), "State:\tZ") {
						pids = append(pids, pid)
					}
				}
				break
			}
		}
	}
	return pids, nil
}

// removeOwnedBy removes every file and directory under dir (not dir itself,
// not crossing into another file system) that uid owns.
func removeOwnedBy(dir string, uid int) error {
	root, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	dev := root.Sys().(*syscall.Stat_t).Dev
	var owned []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if path == dir {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Dev != dev {
			return filepath.SkipDir
		}
		if int(st.Uid) == uid {
			owned = append(owned, path)
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, p := range owned {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	return nil
}
