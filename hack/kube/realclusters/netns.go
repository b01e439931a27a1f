package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// The real nodes' network namespaces (realnode.go) carry the launcher's
// pid in their names (rc<pid>-node<slot>), so that a later launcher
// removes those of a launcher that was killed (cleanStaleNetworks) and
// leaves a live one's alone.
var ourNamespace = regexp.MustCompile(`^rc([0-9]+)-node[0-9]+$`)

func ipCommand(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
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

// cleanStaleNetworks removes the namespaces (and their processes) of
// launchers that are no longer running: a killed run's.
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
	}
}

// launcherAlive: process pid exists and is a real-clusters launcher.
func launcherAlive(pid int) bool {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return err == nil && strings.TrimSpace(string(comm)) == "real-clusters"
}
