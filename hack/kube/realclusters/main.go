// Command real-clusters starts N real Kubernetes control planes on loopback
// with the contract of `tfjob-federator sim` (docs/src/design/command-line.md,
// docs/src/testing/real-clusters.md):
//
//	real-clusters --clusters N --kubeconfig-dir DIR [--nodes K] [--gpus-per-node G]
//	    [--cpu-per-node C] [--memory-per-node M] [--register] [--real-nodes]
//
// writes DIR/<name>.kubeconfig (clusters home, member-1, …) and
// DIR/<name>.direct.kubeconfig (the same admin, to the API server itself,
// past the fault proxy: for what runs inside the cluster, such as a
// member's fence, which a partition between home and the member does not
// cut off), then DIR/ready,
// and runs until SIGINT or SIGTERM, when it stops every process it started.
//
// Per cluster: kube-apiserver (RBAC, the default admission plugins with Pod
// Security, service-account tokens), kube-controller-manager, kube-scheduler,
// kwok faking K nodes, the pod-lifecycle helper of kubelet.go, and a fault
// proxy (proxy.go) that the written kubeconfig points at. With --real-nodes
// each cluster also gets one real node (realnode.go: kubelet, containerd,
// CNI, kube-proxy), `<cluster>-node`, beside the K fake ones. One etcd serves
// every cluster, each under its own key prefix: a cluster is its API
// server's keys, and one etcd starts faster and weighs less than N; faults
// are injected at the proxy, never at etcd, so sharing it changes nothing a
// test can see.
//
// With REAL_CLUSTERS_EXIT_ON_STDIN_EOF=1 it also stops when its standard
// input closes, so a test process that dies takes its clusters with it.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

type options struct {
	clusters      int
	kubeconfigDir string
	nodes         int
	gpus          int
	cpu, memory   string
	register      bool
	realNodes     bool
	tensorflow    bool
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "real-clusters: "+format+"\n", args...)
}

func main() {
	var o options
	flag.IntVar(&o.clusters, "clusters", 1, "how many clusters: home, member-1, …")
	flag.StringVar(&o.kubeconfigDir, "kubeconfig-dir", "", "where to write <name>.kubeconfig, then ready")
	flag.IntVar(&o.nodes, "nodes", 4, "nodes per cluster")
	flag.IntVar(&o.gpus, "gpus-per-node", 4, "nvidia.com/gpu per node")
	flag.StringVar(&o.cpu, "cpu-per-node", "32", "cpu per node")
	flag.StringVar(&o.memory, "memory-per-node", "128Gi", "memory per node")
	flag.BoolVar(&o.register, "register", false, "install the CRDs on home and register the other clusters as members, with the identity of deploy/member-rbac.yaml")
	flag.BoolVar(&o.realNodes, "real-nodes", false, "give every cluster a real node <cluster>-node (kubelet, containerd, CNI, kube-proxy; needs root), tainted "+realNodeTaint+"=true:NoSchedule beside kwok's nodes and untainted with --nodes 0, advertising the --gpus-per-node GPUs")
	flag.BoolVar(&o.tensorflow, "tensorflow-image", false, "with --real-nodes, also load "+tensorflowImage+" (the virtual environment of hack/tf-venv, made first if missing, with the example programs in /examples) into every real node")
	flag.Parse()
	if o.kubeconfigDir == "" || o.clusters < 1 || o.nodes < 0 || (o.nodes == 0 && !o.realNodes) {
		fmt.Fprintln(os.Stderr, "usage: real-clusters --clusters N --kubeconfig-dir DIR [--nodes K] [--gpus-per-node G] [--cpu-per-node C] [--memory-per-node M] [--register] [--real-nodes [--tensorflow-image]]")
		os.Exit(2)
	}
	// Asked to stop (a signal, or standard input closed) is a clean end; a
	// child that died is not.
	asked, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	if os.Getenv("REAL_CLUSTERS_EXIT_ON_STDIN_EOF") == "1" {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			stop()
		}()
	}
	ctx, died := context.WithCancelCause(asked)
	procs := &processes{died: died}
	err := run(ctx, o, procs)
	if asked.Err() == nil && ctx.Err() != nil {
		// A child died: that is why run stopped, whatever it returned on
		// its way out (often only "context canceled").
		err = context.Cause(ctx)
	}
	stop()
	// Stopping removes the real nodes' containers, mounts and cgroups: a
	// second signal must not cut that short (SIGKILL still does).
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM)
	procs.stopAll()
	if err != nil {
		logf("%v", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, procs *processes) error {
	started := time.Now()
	bin, err := binDir(o.realNodes)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.kubeconfigDir, 0o755); err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(o.kubeconfigDir, "ready"))
	work, err := os.MkdirTemp("", "real-clusters-")
	if err != nil {
		return err
	}
	procs.removeAfter(work)
	logf("work in %s", work)
	logs := filepath.Join(o.kubeconfigDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	logf("logs in %s", logs)
	// The scripted pods' logs (kubelet.go), served as their kubelet's.
	book := newLogBook(filepath.Join(logs, "pods"))
	if o.realNodes {
		cleanStaleNetworks()
	}
	etcd, err := startEtcd(ctx, procs, bin, work, logs)
	if err != nil {
		return err
	}
	var images *imageStore
	if o.realNodes {
		tars, err := nodeImages(bin, o.tensorflow)
		if err != nil {
			return err
		}
		if images, err = nodeStore(ctx, tars); err != nil {
			return err
		}
	}
	names := []string{"home"}
	for i := 1; i < o.clusters; i++ {
		names = append(names, fmt.Sprintf("member-%d", i))
	}
	clusters := make([]*cluster, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = startCluster(ctx, procs, book, bin, work, logs, etcd, name, images, o)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, c := range clusters {
		path := filepath.Join(o.kubeconfigDir, c.name+".kubeconfig")
		if err := clientcmd.WriteToFile(*c.userKubeconfig(), path); err != nil {
			return err
		}
		direct := filepath.Join(o.kubeconfigDir, c.name+".direct.kubeconfig")
		if err := clientcmd.WriteToFile(*c.kubeconfig(c.direct), direct); err != nil {
			return err
		}
	}
	if o.realNodes {
		if err := runMCSImporter(ctx, clusters); err != nil {
			return fmt.Errorf("the MCS importer: %w", err)
		}
	}
	if o.register {
		if err := registerMembers(ctx, clusters[0], clusters[1:]); err != nil {
			return fmt.Errorf("registering members: %w", err)
		}
	}
	// As sim writes it: one line per cluster, its name and address.
	var ready strings.Builder
	for _, c := range clusters {
		fmt.Fprintf(&ready, "%s %s\n", c.name, c.proxied)
	}
	if err := os.WriteFile(filepath.Join(o.kubeconfigDir, "ready"), []byte(ready.String()), 0o644); err != nil {
		return err
	}
	logf("%d cluster(s) ready in %.1fs; kubeconfigs in %s", len(clusters), time.Since(started).Seconds(), o.kubeconfigDir)
	<-ctx.Done()
	logf("stopping")
	return nil
}

// binDir is where the built components are: beside this executable.
func binDir(realNodes bool) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	dir := filepath.Dir(self)
	names := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
	if realNodes {
		names = append(names, "kubelet", "kube-proxy", "pause", "coredns")
	}
	for _, name := range names {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%s is missing in %s: run hack/build-kube", name, dir)
		}
	}
	return dir, nil
}

// nodeImages are the layout tars of the real nodes' images, made once
// into target/kube/images (images.go).
func nodeImages(bin string, tensorflow bool) ([]string, error) {
	specs, err := imageSpecs(bin)
	if err != nil {
		return nil, err
	}
	if tensorflow {
		venv, err := tensorflowVenv()
		if err != nil {
			return nil, err
		}
		examples, err := repoFile("config/examples/tensorflow")
		if err != nil {
			return nil, err
		}
		spec, err := tensorflowSpec(venv, examples)
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	tars := make([]string, 0, len(specs))
	for _, spec := range specs {
		tar, err := imageTar(filepath.Join(filepath.Dir(bin), "images"), spec)
		if err != nil {
			return nil, err
		}
		tars = append(tars, tar)
	}
	return tars, nil
}

// tensorflowVenv is the virtual environment of hack/tf-venv, which makes
// it when it is missing.
func tensorflowVenv() (string, error) {
	script, err := repoFile("hack/tf-venv")
	if err != nil {
		return "", err
	}
	cmd := exec.Command(script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/tf-venv: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// processes are the children; each dies with this process (Pdeathsig) even
// when it is killed outright, and one that exits before stopAll ends the run.
type processes struct {
	mu       sync.Mutex
	children []child
	stopping bool
	died     context.CancelCauseFunc
	cleanups []func() // run once the children are gone, before leftover is removed
	leftover []string // directories removed once the children are gone
}

// cleanUpAfter has clean run once every child is stopped.
func (p *processes) cleanUpAfter(clean func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleanups = append(p.cleanups, clean)
}

// removeAfter has dir removed once every child is stopped.
func (p *processes) removeAfter(dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.leftover = append(p.leftover, dir)
}

type child struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed once reaped
}

func (p *processes) start(logs, name, path string, args ...string) error {
	out, err := os.Create(filepath.Join(logs, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	c := child{cmd: cmd, exited: make(chan struct{})}
	p.mu.Lock()
	p.children = append(p.children, c)
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		close(c.exited)
		out.Close()
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if !stopping {
			p.died(fmt.Errorf("%s exited (%v); the end of %s:\n%s", name, err, out.Name(), logTail(out.Name(), 20)))
		}
	}()
	return nil
}

// stopAll sends SIGTERM to every child, SIGKILL to the process groups of
// those still there after five seconds, and returns once all are reaped.
func (p *processes) stopAll() {
	p.mu.Lock()
	p.stopping = true
	children := p.children
	p.mu.Unlock()
	for _, c := range children {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
	}
	grace, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range children {
		select {
		case <-c.exited:
		case <-grace.Done():
			_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
			<-c.exited
		}
	}
	for _, clean := range p.cleanups {
		clean()
	}
	for _, dir := range p.leftover {
		_ = os.RemoveAll(dir)
	}
}

// logTail is the last lines of the file at path, to say why a child died.
func logTail(path string, lines int) string {
	text, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func startEtcd(ctx context.Context, procs *processes, bin, work, logs string) (string, error) {
	client, err := freePort()
	if err != nil {
		return "", err
	}
	peer, err := freePort()
	if err != nil {
		return "", err
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", client)
	dataDir := filepath.Join(work, "etcd")
	if shm, err := os.MkdirTemp("/dev/shm", "real-clusters-etcd-"); err == nil {
		dataDir = shm // in memory: tests need no durability
		procs.removeAfter(shm)
	}
	err = procs.start(logs, "etcd", filepath.Join(bin, "etcd"),
		"--name=real-clusters", "--data-dir="+dataDir,
		"--listen-client-urls="+url, "--advertise-client-urls="+url,
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peer),
		fmt.Sprintf("--initial-cluster=real-clusters=http://127.0.0.1:%d", peer),
		"--unsafe-no-fsync", "--quota-backend-bytes=4294967296", "--log-level=warn")
	if err != nil {
		return "", err
	}
	if err := waitHTTP(ctx, url+"/health", nil, 30*time.Second); err != nil {
		return "", fmt.Errorf("etcd: %w", err)
	}
	return url, nil
}

func waitHTTP(ctx context.Context, url string, client *http.Client, limit time.Duration) error {
	if client == nil {
		client = http.DefaultClient
	}
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not healthy after %s: %v", url, limit, last)
}

// schedulerProfiles: kube-scheduler also answers to `t9k-scheduler`, so the
// pods of a job with scheduler.t9kScheduler are scheduled as on a cluster
// with T9k Scheduler (one by one here: a real cluster has no gang
// scheduling without it; the simulator's scheduler gangs them).
const schedulerProfiles = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
leaderElection:
  leaderElect: false
profiles:
- schedulerName: default-scheduler
- schedulerName: t9k-scheduler
`

// podGroupCRD is T9k's PodGroup as the simulator serves it
// (src/sim/mod.rs): every cluster has the kind the controller's gang
// scheduling writes.
func podGroupCRD() *unstructured.Unstructured {
	return namespacedCRD("scheduler.tensorstack.dev", "v1beta1", "PodGroup", "podgroups", "pg",
		column{"MinMember", "integer", ".spec.minMember"}, column{"Queue", "string", ".spec.queue"},
		column{"Age", "date", ".metadata.creationTimestamp"})
}

type cluster struct {
	name       string
	direct     string // the API server itself, for the cluster's components
	proxied    string // the fault proxy, for everyone else
	adminToken string
	pki        *pki
	// With a real node: its network slot, the API server's port (the
	// node reaches it at the slot's host address) and the node's and
	// kube-proxy's identities.
	slot                  *netSlot
	port                  int
	nodeToken, proxyToken string
}

// nodeServer is the API server as the real node reaches it.
func (c *cluster) nodeServer() string { return fmt.Sprintf("https://%s:%d", c.slot.hostIP(), c.port) }

func (c *cluster) kubeconfig(server string) *clientcmdapi.Config {
	config := clientcmdapi.NewConfig()
	config.Clusters[c.name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: c.pki.caPEM}
	config.AuthInfos[c.name] = &clientcmdapi.AuthInfo{Token: c.adminToken}
	config.Contexts[c.name] = &clientcmdapi.Context{Cluster: c.name, AuthInfo: c.name, Namespace: "default"}
	config.CurrentContext = c.name
	return config
}

// userKubeconfig is what DIR/<name>.kubeconfig holds: admin, through the proxy.
func (c *cluster) userKubeconfig() *clientcmdapi.Config { return c.kubeconfig(c.proxied) }

func (c *cluster) restConfig(server string) (*rest.Config, error) {
	config, err := clientcmd.NewDefaultClientConfig(*c.kubeconfig(server), nil).ClientConfig()
	if err != nil {
		return nil, err
	}
	config.QPS, config.Burst = 200, 400
	return config, nil
}

func startCluster(ctx context.Context, procs *processes, book *logBook, bin, work, logs, etcd, name string, images *imageStore, o options) (*cluster, error) {
	dir := filepath.Join(work, name)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	c := &cluster{name: name, direct: fmt.Sprintf("https://127.0.0.1:%d", port), port: port, adminToken: randomToken()}
	tokens := c.adminToken + ",admin,admin,system:masters\n"
	// kwok's clusters: the API server on loopback, no endpoints for the
	// `kubernetes` Service (no pod calls it), the kwok nodes' ExternalIP
	// 127.0.0.1, where logs.go serves their kubelet API.
	address := []string{"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--service-cluster-ip-range=10.96.0.0/16", "--endpoint-reconciler-type=none",
		"--kubelet-preferred-address-types=ExternalIP"}
	var serverIPs []string
	if o.realNodes {
		if c.slot, err = takeNetSlot(); err != nil {
			return nil, err
		}
		if err := makeNodeNetwork(c.slot); err != nil {
			_ = ipCommand("netns", "del", c.slot.netns())
			return nil, fmt.Errorf("%s: the real node's network: %w", name, err)
		}
		serverIPs = []string{c.slot.hostIP(), c.slot.kubernetesIP()}
		c.nodeToken, c.proxyToken = randomToken(), randomToken()
		tokens += c.nodeToken + ",system:node:" + name + "-node,node-" + name + ",system:nodes\n"
		tokens += c.proxyToken + ",system:kube-proxy,kube-proxy-" + name + "\n"
		// The real node reaches the API server at the slot's host
		// address, and so do its pods through the `kubernetes` Service;
		// the API server reaches a kwok node at its ExternalIP, the real
		// one (which has none) at its InternalIP.
		address = []string{"--bind-address=0.0.0.0", "--advertise-address=" + c.slot.hostIP(),
			"--service-cluster-ip-range=" + c.slot.serviceCIDR(),
			"--kubelet-preferred-address-types=ExternalIP,InternalIP"}
	}
	p, err := makePKI(dir, name, serverIPs)
	if err != nil {
		return nil, err
	}
	c.pki = p
	tokensFile := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokensFile, []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	err = procs.start(logs, name+"-kube-apiserver", filepath.Join(bin, "kube-apiserver"), append(address,
		"--etcd-servers="+etcd, "--etcd-prefix=/"+name,
		fmt.Sprintf("--secure-port=%d", port),
		"--tls-cert-file="+p.serverCert, "--tls-private-key-file="+p.serverKey,
		"--client-ca-file="+p.caFile,
		"--kubelet-client-certificate="+p.kubeletClientCert, "--kubelet-client-key="+p.kubeletClientKey,
		"--token-auth-file="+tokensFile,
		"--authorization-mode=Node,RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+p.saPub, "--service-account-signing-key-file="+p.saKey,
		"--allow-privileged=true", "--profiling=false")...)
	if err != nil {
		return nil, err
	}
	admin, err := c.restConfig(c.direct)
	if err != nil {
		return nil, err
	}
	transport, err := rest.TransportFor(admin)
	if err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, c.direct+"/readyz", &http.Client{Transport: transport}, 90*time.Second); err != nil {
		return nil, fmt.Errorf("%s kube-apiserver: %w", name, err)
	}
	logf("%s: kube-apiserver ready", name)
	// The cluster's kinds exist before kube-controller-manager starts: its
	// garbage collector discovers kinds made later only at its next
	// discovery (every 30 s), and a PodGroup owned by a deleted job would
	// wait for it.
	applier, err := newApplier(c)
	if err != nil {
		return nil, err
	}
	if err := applier.apply(ctx, podGroupCRD()); err != nil {
		return nil, err
	}
	// Multi-Cluster Services' ServiceExport, for members with exportServices.
	if err := applier.apply(ctx, serviceExportCRD()); err != nil {
		return nil, err
	}
	// ServiceImport, which CoreDNS reads and the MCS importer writes.
	if o.realNodes {
		if err := applier.apply(ctx, serviceImportCRD()); err != nil {
			return nil, err
		}
	}
	if name == "home" && o.register {
		crds, err := repoFile("deploy/crds/crds.yaml")
		if err != nil {
			return nil, err
		}
		if err := applier.applyFile(ctx, crds); err != nil {
			return nil, err
		}
	}
	componentConfig := filepath.Join(dir, "admin.kubeconfig")
	schedulerConfig := filepath.Join(dir, "scheduler.yaml")
	if err := clientcmd.WriteToFile(*c.kubeconfig(c.direct), componentConfig); err != nil {
		return nil, err
	}
	// Everything but what needs volumes, a cloud or a CSR signer, and
	// node-ipam unless a real node needs its pod CIDR.
	controllers := "--controllers=*,-persistentvolume-attach-detach-controller,-persistentvolume-binder-controller,-persistentvolume-expander-controller,-ephemeral-volume-controller,-certificatesigningrequest-signing-controller,-certificatesigningrequest-approving-controller,-certificatesigningrequest-cleaner-controller"
	ipam := []string{controllers + ",-node-ipam-controller"}
	if c.slot != nil {
		ipam = []string{controllers, "--allocate-node-cidrs=true", "--cluster-cidr=" + c.slot.podCIDR(),
			"--node-cidr-mask-size=24", "--service-cluster-ip-range=" + c.slot.serviceCIDR()}
	}
	err = errors.Join(
		procs.start(logs, name+"-kube-controller-manager", filepath.Join(bin, "kube-controller-manager"), append(ipam,
			"--kubeconfig="+componentConfig, "--leader-elect=false", "--secure-port=0",
			"--use-service-account-credentials=true",
			"--service-account-private-key-file="+p.saKey, "--root-ca-file="+p.caFile)...),
		os.WriteFile(schedulerConfig, []byte(fmt.Sprintf(schedulerProfiles, componentConfig)), 0o644),
		procs.start(logs, name+"-kube-scheduler", filepath.Join(bin, "kube-scheduler"),
			"--config="+schedulerConfig, "--secure-port=0"),
	)
	if err != nil {
		return nil, err
	}
	stages := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(stages, []byte(kwokNodeStages), 0o644); err != nil {
		return nil, err
	}
	err = procs.start(logs, name+"-kwok", filepath.Join(bin, "kwok"),
		"--kubeconfig="+componentConfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		// Heartbeat Leases in kube-node-lease, as kubelets keep them.
		"--node-lease-duration-seconds=40")
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(admin)
	if err != nil {
		return nil, err
	}
	kubeletAPI, err := newLogServer(book, p.serverCert, p.serverKey)
	if err != nil {
		return nil, err
	}
	if err := createNodes(ctx, client, name, o, kubeletAPI.port); err != nil {
		return nil, fmt.Errorf("%s nodes: %w", name, err)
	}
	nodes := o.nodes
	if c.slot != nil {
		if err := startRealNode(ctx, procs, bin, dir, logs, c, client, images, o); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := startCoreDNS(ctx, applier, client, c); err != nil {
			return nil, err
		}
		nodes++
	}
	if err := runKubelet(ctx, name, client, kubeletAPI); err != nil {
		return nil, err
	}
	if err := waitServed(ctx, client, "multicluster.x-k8s.io/v1alpha1", "serviceexports"); err != nil {
		return nil, err
	}
	proxy, err := newFaultProxy(c.direct, p.caPEM)
	if err != nil {
		return nil, err
	}
	if slot := c.slot; slot != nil {
		proxy.onPartition = func(partitioned bool) {
			if err := setDataPlaneCut(slot, partitioned); err != nil {
				logf("%s: %v", name, err)
			}
		}
		procs.cleanUpAfter(func() { _ = setDataPlaneCut(slot, false) })
	}
	if c.proxied, err = proxy.serve(p.serverCert, p.serverKey); err != nil {
		return nil, err
	}
	if err := waitNodesReady(ctx, client, nodes); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	logf("%s: %d nodes ready; serving on %s", name, nodes, c.proxied)
	return c, nil
}

// waitServed waits until the API server serves resource of groupVersion
// (a CRD just made).
func waitServed(ctx context.Context, client kubernetes.Interface, groupVersion, resource string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if list, err := client.Discovery().ServerResourcesForGroupVersion(groupVersion); err == nil {
			for _, r := range list.APIResources {
				if r.Name == resource {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s of %s not served after 30s", resource, groupVersion)
}
