package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"
)

// faults are the simulator's fault settings
// (docs/src/testing/simulated-clusters.md), the same JSON on both grounds.
type faults struct {
	Partitioned   bool           `json:"partitioned"`
	LatencyMs     uint64         `json:"latencyMs"`
	ErrorRate     float64        `json:"errorRate"`
	FailRequests  *failRequests  `json:"failRequests,omitempty"`
	DelayRequests *delayRequests `json:"delayRequests,omitempty"`
}

// delayRequests holds the next Count requests with this verb on this
// resource for DelayMs each, then serves them.
type delayRequests struct {
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	Count    uint32 `json:"count"`
	DelayMs  uint64 `json:"delayMs"`
}

// failRequests fails the next Count requests with this verb on this
// resource (plural, e.g. "secrets" or "pods/status") with HTTP Code.
type failRequests struct {
	Verb     string `json:"verb"`
	Resource string `json:"resource"`
	Count    uint32 `json:"count"`
	Code     int    `json:"code,omitempty"`
}

// faultsUpdate is a PUT body: fields left out keep their value.
type faultsUpdate struct {
	Partitioned   *bool          `json:"partitioned"`
	LatencyMs     *uint64        `json:"latencyMs"`
	ErrorRate     *float64       `json:"errorRate"`
	FailRequests  *failRequests  `json:"failRequests"`
	DelayRequests *delayRequests `json:"delayRequests"`
}

// verbAndResource reads a Kubernetes request as authorization does: its
// verb and resource (with a subresource after a slash); ok is false for
// paths that name no resource (discovery, health).
func verbAndResource(r *http.Request) (string, string, bool) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", "", false
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) == 0 {
		return "", "", false
	}
	resource, named := parts[0], len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch"}[r.Method]
	switch r.Method {
	case http.MethodGet:
		switch {
		case named:
			verb = "get"
		case isWatch(r):
			verb = "watch"
		default:
			verb = "list"
		}
	case http.MethodDelete:
		verb = "deletecollection"
		if named {
			verb = "delete"
		}
	}
	return verb, resource, verb != ""
}

// targeted counts down a failure the faults hold for this request.
func (p *faultProxy) targeted(r *http.Request) (int, bool) {
	verb, resource, ok := verbAndResource(r)
	if !ok {
		return 0, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rule := p.current.FailRequests
	if rule == nil || rule.Count == 0 || rule.Verb != verb || rule.Resource != resource {
		return 0, false
	}
	rule.Count--
	if rule.Code == 0 {
		return http.StatusInternalServerError, true
	}
	return rule.Code, true
}

// delayed counts down a delay the faults hold for this request.
func (p *faultProxy) delayed(r *http.Request) time.Duration {
	verb, resource, ok := verbAndResource(r)
	if !ok {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	rule := p.current.DelayRequests
	if rule == nil || rule.Count == 0 || rule.Verb != verb || rule.Resource != resource {
		return 0
	}
	rule.Count--
	return time.Duration(rule.DelayMs) * time.Millisecond
}

// faultProxy stands in front of one kube-apiserver on loopback: clients
// (tests, kubectl, the controller) reach the cluster only through it, while
// the cluster's own components talk to the API server directly, so a
// partition cuts the cluster off from its users, not from itself.
type faultProxy struct {
	mu      sync.Mutex
	current faults
	healed  chan struct{}              // closed while not partitioned
	streams map[int]context.CancelFunc // open watches
	nextID  int
	reverse *httputil.ReverseProxy
	target  *url.URL
	client  *http.Client
	// onPartition, when set, learns that a partition began (true) or
	// healed (false): a cluster with a real node cuts its pods' traffic
	// too (realnode.go).
	onPartition func(partitioned bool)
}

func newFaultProxy(apiserver string, ca []byte) (*faultProxy, error) {
	target, err := url.Parse(apiserver)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no CA certificate")
	}
	transport := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: 256,
		ForceAttemptHTTP2:   true,
	}
	reverse := httputil.NewSingleHostReverseProxy(target)
	reverse.FlushInterval = -1
	reverse.Transport = transport
	// A client that gives up (a cut watch, a test that ended) is no news.
	reverse.ErrorLog = log.New(io.Discard, "", 0)
	healed := make(chan struct{})
	close(healed)
	return &faultProxy{healed: healed, streams: map[int]context.CancelFunc{}, reverse: reverse, target: target, client: &http.Client{Transport: transport}}, nil
}

// serve listens on a free loopback port with the cluster's serving
// certificate and returns the address.
func (p *faultProxy) serve(certFile, keyFile string) (string, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return "", err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	server := &http.Server{Handler: p, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = server.ServeTLS(listener, "", "") }()
	return "https://" + listener.Addr().String(), nil
}

// waitReachable blocks while partitioned; false when the client gave up.
func (p *faultProxy) waitReachable(ctx context.Context) bool {
	p.mu.Lock()
	healed := p.healed
	p.mu.Unlock()
	select {
	case <-healed:
		return true
	case <-ctx.Done():
		return false
	}
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if admin, ok := strings.CutPrefix(r.URL.Path, "/_sim/"); ok {
		p.admin(w, r, admin)
		return
	}
	if !p.waitReachable(r.Context()) {
		return
	}
	p.mu.Lock()
	now := p.current
	p.mu.Unlock()
	if now.LatencyMs > 0 {
		select {
		case <-time.After(time.Duration(now.LatencyMs) * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	if now.ErrorRate > 0 && rand.Float64() < now.ErrorRate {
		if rand.IntN(2) == 0 {
			writeStatus(w, http.StatusInternalServerError, "InternalError", "injected fault: internal error")
		} else {
			writeStatus(w, http.StatusTooManyRequests, "TooManyRequests", "injected fault: too many requests, please try again later")
		}
		return
	}
	if code, fail := p.targeted(r); fail {
		reason := "InternalError"
		if code == http.StatusTooManyRequests {
			reason = "TooManyRequests"
		}
		verb, resource, _ := verbAndResource(r)
		writeStatus(w, code, reason, fmt.Sprintf("injected fault: %s %s fails", verb, resource))
		return
	}
	if delay := p.delayed(r); delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	held := &heldWriter{ResponseWriter: w, proxy: p, ctx: r.Context()}
	if !isWatch(r) {
		// The body is read whole before it is forwarded. Streamed, an
		// answer that comes before the API server reads the body (a route
		// that does not exist, e.g. PATCH configmaps/NAME/scale) deadlocked
		// about once in a hundred over HTTP/2: the proxy's transport, closing
		// the answer, waited for the rest of the client's body, while the
		// client, answered, sent no more and waited for the answer's end.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "proxy: reading the request body: "+err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		p.reverse.ServeHTTP(held, r)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	p.mu.Lock()
	id := p.nextID
	p.nextID++
	p.streams[id] = cancel
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.streams, id)
		p.mu.Unlock()
	}()
	held.ctx = ctx
	p.watch(held, r.WithContext(ctx))
}

// watch streams one watch. Unlike ReverseProxy, which resets the stream
// when it is cut, a dropped watch ends as a real API server ends one at its
// timeout: the response simply finishes.
func (p *faultProxy) watch(w *heldWriter, r *http.Request) {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.target.Scheme, p.target.Host, p.target.Host
	resp, err := p.client.Do(out)
	if err != nil {
		if r.Context().Err() == nil {
			writeStatus(w, http.StatusBadGateway, "InternalError", "proxy: "+err.Error())
		}
		return
	}
	defer resp.Body.Close()
	for key, values := range resp.Header {
		if key == "Content-Length" || key == "Connection" || key == "Transfer-Encoding" {
			continue
		}
		w.Header()[key] = values
	}
	w.WriteHeader(resp.StatusCode)
	w.Flush()
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			w.Flush()
		}
		if err != nil {
			return
		}
	}
}

func isWatch(r *http.Request) bool {
	watch := r.URL.Query().Get("watch")
	return watch == "true" || watch == "1" || strings.Contains(r.URL.Path, "/watch/")
}

// heldWriter holds response bytes while the cluster is partitioned, as the
// simulator holds events of open watches.
type heldWriter struct {
	http.ResponseWriter
	proxy *faultProxy
	ctx   context.Context
}

func (h *heldWriter) Write(b []byte) (int, error) {
	if !h.proxy.waitReachable(h.ctx) {
		return 0, h.ctx.Err()
	}
	return h.ResponseWriter.Write(b)
}

func (h *heldWriter) Flush() {
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (h *heldWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func writeStatus(w http.ResponseWriter, code int, reason, message string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"kind": "Status", "apiVersion": "v1", "metadata": map[string]any{},
		"status": "Failure", "message": message, "reason": reason, "code": code,
	})
}

func writeJSON(w http.ResponseWriter, value any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(value)
}

// admin serves the simulator's fault paths: GET/PUT faults, POST
// drop-watches. Compaction is the simulator's alone (etcd compacts by
// itself).
func (p *faultProxy) admin(w http.ResponseWriter, r *http.Request, path string) {
	switch {
	case r.Method == http.MethodGet && path == "faults":
		p.mu.Lock()
		now := p.current
		p.mu.Unlock()
		writeJSON(w, now)
	case r.Method == http.MethodPut && path == "faults":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", err.Error())
			return
		}
		var update faultsUpdate
		decoder := json.NewDecoder(strings.NewReader(string(body)))
		decoder.DisallowUnknownFields()
		if err := decoder.Decode(&update); err != nil {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "invalid faults: "+err.Error())
			return
		}
		if update.ErrorRate != nil && (*update.ErrorRate < 0 || *update.ErrorRate > 1) {
			writeStatus(w, http.StatusBadRequest, "BadRequest", "errorRate must be between 0 and 1")
			return
		}
		writeJSON(w, p.update(update))
	case r.Method == http.MethodPost && path == "drop-watches":
		p.mu.Lock()
		for _, cancel := range p.streams {
			cancel()
		}
		p.mu.Unlock()
		writeJSON(w, map[string]bool{"dropped": true})
	default:
		writeStatus(w, http.StatusNotFound, "NotFound", "no admin path /_sim/"+path)
	}
}

func (p *faultProxy) update(u faultsUpdate) faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	wasPartitioned := p.current.Partitioned
	if u.Partitioned != nil {
		p.current.Partitioned = *u.Partitioned
	}
	if u.LatencyMs != nil {
		p.current.LatencyMs = *u.LatencyMs
	}
	if u.ErrorRate != nil {
		p.current.ErrorRate = *u.ErrorRate
	}
	if u.FailRequests != nil {
		rule := *u.FailRequests
		p.current.FailRequests = &rule
	}
	if u.DelayRequests != nil {
		rule := *u.DelayRequests
		p.current.DelayRequests = &rule
	}
	switch {
	case !wasPartitioned && p.current.Partitioned:
		p.healed = make(chan struct{})
	case wasPartitioned && !p.current.Partitioned:
		close(p.healed)
	}
	if p.onPartition != nil && wasPartitioned != p.current.Partitioned {
		p.onPartition(p.current.Partitioned)
	}
	return p.current
}
