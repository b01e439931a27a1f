package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The pod network of the process runtime (process.go): every process pod
// gets a network namespace of its own with one address from podSubnet on a
// veth whose other end is a port of one bridge. The bridge lives in a hub
// namespace of this launcher, not in the host's: the host gets no address,
// no route and no interface, so nothing the pods send can leave the
// namespaces this launcher made. Names carry the launcher's pid
// (rc<pid>-hub, rc<pid>-<n>), so that a later launcher removes those of a
// launcher that was killed (cleanStaleNetworks) and leaves a live one's alone.
const (
	podSubnetPrefix = "10.245." // 10.245.0.0/16, the pods' addresses
	podSubnetBits   = 16
)

type podNetwork struct {
	mu      sync.Mutex
	prefix  string // rc<pid>
	created bool   // the hub and its bridge exist
	next    int    // the next pod number
	free    []int  // numbers whose namespace is gone
	live    map[string]bool
}

func newPodNetwork() *podNetwork {
	return &podNetwork{prefix: fmt.Sprintf("rc%d", os.Getpid()), next: 1, live: map[string]bool{}}
}

func ipCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

func (n *podNetwork) hub() string { return n.prefix + "-hub" }

// ensureHub makes the hub namespace and its bridge once.
func (n *podNetwork) ensureHub() error {
	if n.created {
		return nil
	}
	hub := n.hub()
	for _, args := range [][]string{
		{"netns", "add", hub},
		{"-n", hub, "link", "set", "lo", "up"},
		{"-n", hub, "link", "add", "br0", "type", "bridge"},
		{"-n", hub, "link", "set", "br0", "up"},
	} {
		if err := ipCommand(args...); err != nil {
			_ = ipCommand("netns", "del", hub)
			return fmt.Errorf("the pod network's bridge (process pods need root and iproute2): %w", err)
		}
	}
	n.created = true
	return nil
}

// add makes a pod's namespace, joined to the bridge, and returns its name
// and address.
func (n *podNetwork) add() (name, ip string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.ensureHub(); err != nil {
		return "", "", err
	}
	var number int
	if len(n.free) > 0 {
		number, n.free = n.free[0], n.free[1:]
	} else {
		number = n.next
		n.next++
	}
	if number >= 65000 {
		return "", "", fmt.Errorf("the pod network %s0.0/%d is full", podSubnetPrefix, podSubnetBits)
	}
	name = fmt.Sprintf("%s-%d", n.prefix, number)
	ip = fmt.Sprintf("%s%d.%d", podSubnetPrefix, (number+1)/256, (number+1)%256)
	port := fmt.Sprintf("p%d", number)
	hub := n.hub()
	steps := [][]string{
		{"netns", "add", name},
		{"-n", name, "link", "set", "lo", "up"},
		{"-n", hub, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", name},
		{"-n", hub, "link", "set", port, "master", "br0"},
		{"-n", hub, "link", "set", port, "up"},
		// An address given again keeps its hardware address: the other
		// pods' neighbour caches still map it to the namespace that had it,
		// and with a new one their frames went nowhere for up to 45 s
		// (a chief kept failing to reach a worker that moved to a freed
		// address until its training ended).
		{"-n", name, "link", "set", "eth0", "address", fmt.Sprintf("02:42:0a:f5:%02x:%02x", (number+1)/256, (number+1)%256)},
		{"-n", name, "addr", "add", fmt.Sprintf("%s/%d", ip, podSubnetBits), "dev", "eth0"},
		{"-n", name, "link", "set", "eth0", "up"},
	}
	// A port of that name left over (see remove) goes first.
	_ = ipCommand("-n", hub, "link", "del", port)
	for _, args := range steps {
		if err := ipCommand(args...); err != nil {
			_ = ipCommand("-n", hub, "link", "del", port)
			_ = ipCommand("netns", "del", name)
			n.free = append(n.free, number)
			return "", "", err
		}
	}
	if err := os.MkdirAll(filepath.Join("/etc/netns", name), 0o755); err != nil {
		_ = ipCommand("netns", "del", name)
		return "", "", err
	}
	// No name server: a name that the hosts file lacks fails at once
	// inside the namespace rather than being asked of anyone.
	if err := os.WriteFile(filepath.Join("/etc/netns", name, "resolv.conf"), []byte("# real-clusters: names come from /etc/hosts alone\noptions attempts:1 timeout:1\nnameserver 127.0.0.1\n"), 0o644); err != nil {
		return "", "", err
	}
	n.live[name] = true
	return name, ip, nil
}

// remove deletes a pod's namespace and its veth pair, after killing
// anything still running in it. The pair is deleted by its hub end first:
// a namespace's deletion frees its interfaces later, in the kernel's own
// time, and the number (and port name) may be given again at once.
func (n *podNetwork) remove(name string) {
	killNamespace(name)
	if number, err := strconv.Atoi(strings.TrimPrefix(name, n.prefix+"-")); err == nil {
		_ = ipCommand("-n", n.hub(), "link", "del", fmt.Sprintf("p%d", number))
	}
	_ = ipCommand("netns", "del", name)
	_ = os.RemoveAll(filepath.Join("/etc/netns", name))
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.live[name] {
		delete(n.live, name)
		if number, err := strconv.Atoi(strings.TrimPrefix(name, n.prefix+"-")); err == nil {
			n.free = append(n.free, number)
		}
	}
}

// close removes every namespace of this launcher, the hub last.
func (n *podNetwork) close() {
	n.mu.Lock()
	names := make([]string, 0, len(n.live))
	for name := range n.live {
		names = append(names, name)
	}
	created := n.created
	n.mu.Unlock()
	for _, name := range names {
		n.remove(name)
	}
	if created {
		_ = ipCommand("netns", "del", n.hub())
	}
}

// killNamespace SIGKILLs every process in network namespace name.
func killNamespace(name string) {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return
	}
	for _, field := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(field); err == nil && pid > 1 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

var ourNamespace = regexp.MustCompile(`^rc([0-9]+)-(hub|[0-9]+|node[0-9]+)$`)

// cleanStaleNetworks removes the namespaces (and their processes and
// /etc/netns files) of launchers that are no longer running: a killed run's.
func cleanStaleNetworks() {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		name := fields[0]
		match := ourNamespace.FindStringSubmatch(name)
		if match == nil {
			continue
		}
		pid, _ := strconv.Atoi(match[1])
		if pid == os.Getpid() || launcherAlive(pid) {
			continue
		}
		logf("removing network namespace %s of a launcher (pid %d) that is gone", name, pid)
		killNamespace(name)
		_ = ipCommand("netns", "del", name)
		_ = os.RemoveAll(filepath.Join("/etc/netns", name))
	}
	// Files of namespaces that are already gone.
	entries, _ := os.ReadDir("/etc/netns")
	for _, entry := range entries {
		match := ourNamespace.FindStringSubmatch(entry.Name())
		if match == nil {
			continue
		}
		pid, _ := strconv.Atoi(match[1])
		if pid != os.Getpid() && !launcherAlive(pid) {
			_ = os.RemoveAll(filepath.Join("/etc/netns", entry.Name()))
		}
	}
}

// launcherAlive: process pid exists and is a real-clusters launcher.
func launcherAlive(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "real-clusters"
}
