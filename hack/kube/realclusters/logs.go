package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The container logs of kwok's (scripted) pods on the real ground; a real
// node's kubelet serves its own. Each attempt of a pod's container
// (counted per pod name in the cluster, as `exit-codes` counts them)
// writes one file, DIR/logs/pods/<cluster>/<namespace>_<pod>/<container>/<n>.log,
// with the lines the simulated kubelet writes (crates/kube-sim/src/logs.rs). One kubelet
// server per cluster serves them to kube-apiserver, which serves `kubectl
// logs` (`pods/log`) by asking the pod's node: the nodes' ExternalIP is
// 127.0.0.1 and their kubelet port this server's, and kube-apiserver
// prefers ExternalIP (--kubelet-preferred-address-types), so its requests
// stay on loopback. `follow`, `tailLines`, `limitBytes` and `previous`
// (the attempt before, which a pod re-created under the same name keeps)
// are honoured.
type logServer struct {
	book    *logBook
	kubelet atomic.Pointer[kubelet] // the cluster's, set once it runs
	port    int
}

// logBook knows which log files are still being written.
type logBook struct {
	root string
	mu   sync.Mutex
	open map[string]bool
}

func newLogBook(root string) *logBook { return &logBook{root: root, open: map[string]bool{}} }

func (b *logBook) path(cluster, namespace, name, container string, attempt int) string {
	return fmt.Sprintf("%s/%s/%s_%s/%s/%d.log", b.root, cluster, namespace, name, container, attempt)
}

func (b *logBook) setOpen(path string, open bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if open {
		b.open[path] = true
	} else {
		delete(b.open, path)
	}
}

func (b *logBook) isOpen(path string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.open[path]
}

// appendLines adds lines to a scripted pod's log.
func (b *logBook) appendLines(path string, lines ...string) {
	if err := os.MkdirAll(path[:strings.LastIndex(path, "/")], 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	_, _ = f.WriteString(strings.Join(lines, "\n") + "\n")
}

// newLogServer listens on a free loopback port with the cluster's serving
// certificate (kube-apiserver does not check a kubelet's certificate unless
// told a CA).
func newLogServer(book *logBook, certFile, keyFile string) (*logServer, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	listener, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		return nil, err
	}
	s := &logServer{book: book, port: listener.Addr().(*net.TCPAddr).Port}
	server := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = server.Serve(listener) }()
	return s, nil
}

func httpError(w http.ResponseWriter, code int, format string, args ...any) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	fmt.Fprintf(w, format, args...)
}

// ServeHTTP: GET /containerLogs/{namespace}/{pod}/{container}.
func (s *logServer) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.TrimPrefix(req.URL.Path, "/"), "/")
	if req.Method != http.MethodGet || len(parts) != 4 || parts[0] != "containerLogs" {
		httpError(w, http.StatusNotFound, "real-clusters serves container logs alone, not %s", req.URL.Path)
		return
	}
	namespace, name, container := parts[1], parts[2], parts[3]
	k := s.kubelet.Load()
	if k == nil {
		httpError(w, http.StatusServiceUnavailable, "no kubelet yet")
		return
	}
	query := req.URL.Query()
	flag := func(key string) bool { v, _ := strconv.ParseBool(query.Get(key)); return v }
	tail := -1
	if v := query.Get("tailLines"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			httpError(w, http.StatusBadRequest, "tailLines %q: must be a number >= 0", v)
			return
		}
		tail = n
	}
	var limit int64 = -1
	if v := query.Get("limitBytes"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			httpError(w, http.StatusBadRequest, "limitBytes %q: must be a number > 0", v)
			return
		}
		limit = n
	}
	k.mu.Lock()
	attempts := k.attempts[namespace+"/"+name]
	k.mu.Unlock()
	attempt := attempts - 1
	if flag("previous") {
		attempt--
		if attempt < 0 {
			httpError(w, http.StatusBadRequest, "previous terminated container %q in pod %q not found", container, name)
			return
		}
	}
	if attempt < 0 {
		httpError(w, http.StatusBadRequest, "container %q in pod %q is waiting to start: ContainerCreating", container, name)
		return
	}
	path := s.book.path(k.cluster, namespace, name, container, attempt)
	w.Header().Set("Content-Type", "text/plain")
	data, _ := os.ReadFile(path)
	if tail >= 0 {
		data = lastLines(data, tail)
	}
	offset := int64(len(data))
	if tail >= 0 {
		// The offset into the file, not into the tail.
		if info, err := os.Stat(path); err == nil {
			offset = info.Size()
		}
	}
	written := int64(0)
	write := func(chunk []byte) bool {
		if limit >= 0 && written+int64(len(chunk)) > limit {
			chunk = chunk[:limit-written]
		}
		n, err := w.Write(chunk)
		written += int64(n)
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		return err == nil && (limit < 0 || written < limit)
	}
	if !write(data) || !flag("follow") || flag("previous") {
		return
	}
	s.follow(req.Context(), path, offset, write)
}

// follow streams what is added to path after offset until its writer is
// done (the container exited) or the client goes.
func (s *logServer) follow(ctx context.Context, path string, offset int64, write func([]byte) bool) {
	for {
		open := s.book.isOpen(path)
		if f, err := os.Open(path); err == nil {
			if _, err := f.Seek(offset, io.SeekStart); err == nil {
				chunk, _ := io.ReadAll(bufio.NewReader(f))
				offset += int64(len(chunk))
				if len(chunk) > 0 && !write(chunk) {
					f.Close()
					return
				}
			}
			f.Close()
		}
		if !open {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lastLines is the last n lines of data.
func lastLines(data []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	count := 0
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			count++
			if count == n {
				return data[i+1:]
			}
		}
	}
	return data
}
