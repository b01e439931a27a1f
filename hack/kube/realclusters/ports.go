package main

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A child (etcd, kube-apiserver) is told its port before it binds it, so
// the port must stay free in between. A port the kernel hands out for
// 127.0.0.1:0 is in its ephemeral range, where any outgoing connection on
// the machine may take it meanwhile, and a launcher running beside this one
// may be handed the same port. So freePort picks a port below the ephemeral
// range and holds a lock on it (a file lock, released when this launcher
// ends, even killed) that other launchers respect.
const (
	lowestPort = 10000
	portLocks  = "/tmp/real-clusters-ports"
)

var (
	heldMu sync.Mutex
	held   []*os.File // the lock files of this launcher's ports, kept open
)

func freePort() (int, error) {
	first, last := lowestPort, ephemeralStart()-1
	if last-first < 1000 {
		return kernelPort()
	}
	if err := os.MkdirAll(portLocks, 0o777); err != nil {
		return 0, err
	}
	for range 200 {
		port := first + rand.IntN(last-first+1)
		lock, err := os.OpenFile(filepath.Join(portLocks, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return 0, err
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close() // another launcher's
			continue
		}
		listener, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			lock.Close() // in use by something else
			continue
		}
		listener.Close()
		heldMu.Lock()
		held = append(held, lock)
		heldMu.Unlock()
		return port, nil
	}
	return 0, fmt.Errorf("no free port between %d and %d after 200 tries", first, last)
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	text, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	fields := strings.Fields(string(text))
	if len(fields) == 0 {
		return 32768
	}
	start, err := strconv.Atoi(fields[0])
	if err != nil {
		return 32768
	}
	return start
}

// kernelPort: a port the kernel picks, when the range below its ephemeral
// ports is too small to choose from.
func kernelPort() (int, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}
