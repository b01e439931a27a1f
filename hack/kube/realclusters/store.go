package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// The real nodes' images are imported once, into a containerd root kept in
// /tmp/real-clusters-store, and every node's root starts as a copy of it
// made of hard links. Why: importing the 2 GiB TensorFlow image took a
// minute per node (the blob written and hashed, then unpacked), three
// nodes at once per test; the copy takes seconds and no disk. It is safe
// because containerd never changes a blob or an unpacked layer in place (a
// container writes to its own upper layer; a deleted image only unlinks):
// only the two bolt databases are written, and those are real copies.
//
// A store is kept per set of images and made again when a tar or
// containerd changes. It lives in the temporary folder, where the
// launchers' work folders are, so the links stay on one file system.
const storeRoot = "/tmp/real-clusters-store"

type imageStore struct {
	dir  string // the containerd root that nodes copy
	lock string // held shared while copying, exclusive while making
}

// nodeStore returns the store holding tars, made first if missing or stale.
func nodeStore(ctx context.Context, tars []string) (*imageStore, error) {
	stamp, err := storeStamp(tars)
	if err != nil {
		return nil, err
	}
	set := sha256.Sum256([]byte(strings.Join(tars, "\n")))
	name := hex.EncodeToString(set[:8])
	s := &imageStore{dir: filepath.Join(storeRoot, name), lock: filepath.Join(storeRoot, name+".lock")}
	if err := os.MkdirAll(storeRoot, 0o755); err != nil {
		return nil, err
	}
	current := func() bool {
		held, err := os.ReadFile(filepath.Join(s.dir, "stamp"))
		return err == nil && string(held) == stamp
	}
	unlock, err := s.take(syscall.LOCK_EX)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if current() {
		return s, nil
	}
	started := time.Now()
	if err := os.RemoveAll(s.dir); err != nil {
		return nil, err
	}
	if err := importInto(ctx, s.dir, tars); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(s.dir, "stamp"), []byte(stamp), 0o644); err != nil {
		return nil, err
	}
	logf("image store %s: imported in %.1fs", s.dir, time.Since(started).Seconds())
	return s, nil
}

// storeStamp names what a store was made from: each tar's path, size and
// time, and containerd's version.
func storeStamp(tars []string) (string, error) {
	version, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		return "", fmt.Errorf("containerd --version: %w", err)
	}
	lines := []string{strings.TrimSpace(string(version))}
	for _, tar := range tars {
		info, err := os.Stat(tar)
		if err != nil {
			return "", err
		}
		lines = append(lines, fmt.Sprintf("%s %d %d", tar, info.Size(), info.ModTime().UnixNano()))
	}
	return strings.Join(lines, "\n") + "\n", nil
}

// take locks the store (flock: released when the returned func runs or
// this process ends).
func (s *imageStore) take(how int) (func(), error) {
	file, err := os.OpenFile(s.lock, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(file.Fd()), how); err != nil {
		file.Close()
		return nil, fmt.Errorf("locking %s: %w", s.lock, err)
	}
	return func() { file.Close() }, nil
}

// importInto runs a containerd of the nodes' configuration on root, imports
// the tars and stops it, so that its databases are closed when copied.
func importInto(ctx context.Context, root string, tars []string) error {
	scratch, err := os.MkdirTemp("", "real-clusters-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	socket := filepath.Join(scratch, "containerd.sock")
	config := filepath.Join(scratch, "containerd.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(containerdConfig, root, filepath.Join(scratch, "state"), socket,
		pauseImage, filepath.Join(scratch, "runc"), filepath.Join(scratch, "cni"))), 0o644); err != nil {
		return err
	}
	log, err := os.Create(filepath.Join(scratch, "containerd.log"))
	if err != nil {
		return err
	}
	defer log.Close()
	daemon := exec.Command("containerd", "--config", config)
	daemon.Stdout, daemon.Stderr = log, log
	if err := daemon.Start(); err != nil {
		return err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = daemon.Process.Signal(syscall.SIGTERM)
		return daemon.Wait()
	}
	defer stop()
	node := &realNode{name: "image store", socket: socket}
	if err := node.waitContainerd(ctx); err != nil {
		return err
	}
	for _, tar := range tars {
		if out, err := exec.CommandContext(ctx, "ctr", "-a", socket, "-n", "k8s.io", "images", "import", tar).CombinedOutput(); err != nil {
			return fmt.Errorf("image store: importing %s: %v: %s", tar, err, out)
		}
	}
	if err := stop(); err != nil {
		return fmt.Errorf("image store: containerd did not stop cleanly: %w", err)
	}
	return nil
}

// copyInto makes root a copy of the store: every file hard linked (cp
// keeps owners, modes and whiteouts), then the bolt databases, which the
// node's containerd writes, replaced by copies of their own.
func (s *imageStore) copyInto(root string) error {
	unlock, err := s.take(syscall.LOCK_SH)
	if err != nil {
		return err
	}
	defer unlock()
	if out, err := exec.Command("cp", "-a", "--link", s.dir, root).CombinedOutput(); err != nil {
		return fmt.Errorf("copying the image store %s: %v: %s", s.dir, err, out)
	}
	return filepath.WalkDir(root, func(path string, entry fs.DirEntry, err error) error {
		if err != nil || !entry.Type().IsRegular() || !strings.HasSuffix(entry.Name(), ".db") {
			return err
		}
		linked := path + ".linked"
		if err := os.Rename(path, linked); err != nil {
			return err
		}
		if err := copyFile(linked, path); err != nil {
			return err
		}
		return os.Remove(linked)
	})
}

func copyFile(from, to string) error {
	source, err := os.Open(from)
	if err != nil {
		return err
	}
	defer source.Close()
	info, err := source.Stat()
	if err != nil {
		return err
	}
	target, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(target, source); err != nil {
		target.Close()
		return err
	}
	return target.Close()
}
