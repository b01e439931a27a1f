package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// A real node (--real-nodes; docs/src/testing/real-nodes.md): kubelet,
// containerd with runc, the CNI plugins and kube-proxy, in a network
// namespace of its own, joined to its cluster as `<cluster>-node`.
//
// Every cluster with a real node holds a network slot s (1–54), a file
// lock in /tmp/real-clusters-nets that launchers running side by side
// respect, released when this launcher ends, even killed. The slot gives
// the cluster addresses no other cluster on the host uses:
//
//	host end of the node's veth   10.199.s.1/30 (the API server is reached there)
//	the node (eth0 in its netns)  10.199.s.2/30
//	pod CIDR (node-ipam)          10.(200+s).0.0/16, the node's podCIDR a /24 of it
//	service CIDR                  10.(100+s).0.0/16, the cluster's DNS at .0.10
//
// The host routes both CIDRs via the node, so that a pod reaches any other
// cluster's pods by pod IP and ClusterIPs by the node that serves them,
// with its own source address (the bridge does not masquerade).
const (
	netLocks       = "/tmp/real-clusters-nets"
	netSlots       = 54
	realNodeLabel  = "node.tfjob-federator.dev/kind"
	realNodeTaint  = "node.tfjob-federator.dev/real"
	realNodeMarker = "real"
)

type netSlot struct {
	index int
	lock  *os.File // held open: the lock lasts as long as this process
}

func takeNetSlot() (*netSlot, error) {
	if err := os.MkdirAll(netLocks, 0o777); err != nil {
		return nil, err
	}
	for i := 1; i <= netSlots; i++ {
		lock, err := os.OpenFile(filepath.Join(netLocks, strconv.Itoa(i)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			return nil, err
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			lock.Close()
			continue
		}
		return &netSlot{index: i, lock: lock}, nil
	}
	return nil, fmt.Errorf("all %d network slots in %s are held by other launchers", netSlots, netLocks)
}

func (s *netSlot) hostIP() string      { return fmt.Sprintf("10.199.%d.1", s.index) }
func (s *netSlot) nodeIP() string      { return fmt.Sprintf("10.199.%d.2", s.index) }
func (s *netSlot) podCIDR() string     { return fmt.Sprintf("10.%d.0.0/16", 200+s.index) }
func (s *netSlot) serviceCIDR() string { return fmt.Sprintf("10.%d.0.0/16", 100+s.index) }
func (s *netSlot) dnsIP() string       { return fmt.Sprintf("10.%d.0.10", 100+s.index) }

// kubernetesIP is the `kubernetes` Service's address, which in-cluster
// clients (CoreDNS) dial and the API server's certificate must name.
func (s *netSlot) kubernetesIP() string { return fmt.Sprintf("10.%d.0.1", 100+s.index) }

// The node's names: its network namespace carries the launcher's pid
// (netns.go), so a later launcher removes a killed one's; the veth's host end and the kubelet's cgroup root carry
// the slot, unique on the host while the launcher lives.
func (s *netSlot) netns() string      { return fmt.Sprintf("rc%d-node%d", os.Getpid(), s.index) }
func (s *netSlot) hostVeth() string   { return fmt.Sprintf("rcnode%d", s.index) }
func (s *netSlot) cgroupRoot() string { return fmt.Sprintf("rc-node%d", s.index) }

// makeNodeNetwork creates the namespace, the veth and the host's routes.
// Deleting the namespace (cleanup) deletes the veth and so the routes.
func makeNodeNetwork(s *netSlot) error {
	ns, veth := s.netns(), s.hostVeth()
	_ = ipCommand("link", "del", veth) // a killed launcher's, of the same slot
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling IP forwarding: %w", err)
	}
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"addr", "add", s.hostIP() + "/30", "dev", veth},
		{"link", "set", veth, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", s.nodeIP() + "/30", "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "route", "add", "default", "via", s.hostIP()},
		{"route", "add", s.podCIDR(), "via", s.nodeIP()},
		{"route", "add", s.serviceCIDR(), "via", s.nodeIP()},
	} {
		if err := ipCommand(args...); err != nil {
			return err
		}
	}
	out, err := exec.Command("nsenter", "--net=/run/netns/"+ns, "sysctl", "-qw", "net.ipv4.ip_forward=1").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip forwarding in %s: %v: %s", ns, err, out)
	}
	return nil
}

// realNode is one node's files and processes.
type realNode struct {
	name   string
	slot   *netSlot
	dir    string
	socket string // containerd's
}

// cgroupHierarchies are the cgroup mounts a kubelet with the cgroupfs
// driver uses (cgroup v1 here, with cgroup2 beside them).
func cgroupHierarchies() []string {
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var mounts []string
	for _, entry := range entries {
		if entry.IsDir() {
			mounts = append(mounts, filepath.Join("/sys/fs/cgroup", entry.Name()))
		}
	}
	return mounts
}

// makeCgroupRoot makes the kubelet's cgroupRoot in every hierarchy: a
// kubelet kills the pod cgroups below its root that it does not know, so
// two kubelets must not share one.
func makeCgroupRoot(root string) error {
	for _, mount := range cgroupHierarchies() {
		dir := filepath.Join(mount, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if filepath.Base(mount) == "cpuset" {
			for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
				value, err := os.ReadFile(filepath.Join(mount, file))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, file), value, 0o644); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
[grpc]
  address = %[3]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # Root here lacks CAP_SYS_RESOURCE: runc cannot lower a container's
  # oom_score_adj, and every sandbox would fail.
  restrict_oom_score_adj = true
  # The pods' network namespaces below state, so that clean-up finds them.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[5]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[6]q
`

// The kubelet's configuration: its own containerd, cgroup root, addresses
// and files; thresholds low enough for a test machine's disk.
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /%[1]s
cgroupsPerQOS: true
failSwapOn: false
containerRuntimeEndpoint: unix://%[2]s
address: %[3]s
healthzBindAddress: %[3]s
readOnlyPort: 0
podLogsDir: %[4]s
clusterDNS: [%[5]s]
clusterDomain: cluster.local
resolvConf: %[6]s
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[7]s}
authorization: {mode: Webhook}
evictionHard: {memory.available: 100Mi, nodefs.available: 1%%, nodefs.inodesFree: 1%%, imagefs.available: 1%%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
registerWithTaints: %[8]s
`

const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]s}
mode: iptables
clusterCIDR: %[2]s
hostnameOverride: %[3]s
bindAddress: %[4]s
healthzBindAddress: ""
metricsBindAddress: 127.0.0.1:10249
# The host's conntrack settings are the host's: leave them alone.
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
`

// startRealNode runs the node and returns once it is Ready. Its
// containerd's root starts as a copy of images (store.go).
func startRealNode(ctx context.Context, procs *processes, bin, dir, logs string, c *cluster, client kubernetes.Interface, images *imageStore, o options) error {
	s := c.slot
	n := &realNode{name: c.name + "-node", slot: s, dir: filepath.Join(dir, "node")}
	n.socket = filepath.Join(n.dir, "containerd.sock")
	procs.cleanUpAfter(n.cleanUp)
	for _, sub := range []string{"cni", "pod-logs", "kubelet"} {
		if err := os.MkdirAll(filepath.Join(n.dir, sub), 0o755); err != nil {
			return err
		}
	}
	if err := makeCgroupRoot(s.cgroupRoot()); err != nil {
		return fmt.Errorf("%s cgroups: %w", n.name, err)
	}
	config := filepath.Join(n.dir, "containerd.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(containerdConfig,
		filepath.Join(n.dir, "containerd"), filepath.Join(n.dir, "state"), n.socket, pauseImage,
		filepath.Join(n.dir, "runc"), filepath.Join(n.dir, "cni"))), 0o644); err != nil {
		return err
	}
	inNode := func(name string, args ...string) error {
		return procs.start(logs, n.name+"-"+name, "nsenter", append([]string{"--net=/run/netns/" + s.netns(), "--"}, args...)...)
	}
	if err := images.copyInto(filepath.Join(n.dir, "containerd")); err != nil {
		return fmt.Errorf("%s: %w", n.name, err)
	}
	if err := inNode("containerd", "containerd", "--config", config); err != nil {
		return err
	}
	if err := n.waitContainerd(ctx); err != nil {
		return err
	}
	kubeconfig := func(file, token string) (string, error) {
		path := filepath.Join(n.dir, file)
		config := clientcmdapi.NewConfig()
		config.Clusters["cluster"] = &clientcmdapi.Cluster{Server: c.nodeServer(), CertificateAuthorityData: c.pki.caPEM}
		config.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
		config.Contexts["default"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "user"}
		config.CurrentContext = "default"
		return path, clientcmd.WriteToFile(*config, path)
	}
	kubeletKubeconfig, err := kubeconfig("kubelet.kubeconfig", c.nodeToken)
	if err != nil {
		return err
	}
	proxyKubeconfig, err := kubeconfig("kube-proxy.kubeconfig", c.proxyToken)
	if err != nil {
		return err
	}
	// Beside kwok's nodes the real one takes only the pods that ask for it
	// (docs/src/testing/real-nodes.md); alone it takes every pod.
	taints := "[]"
	if o.nodes > 0 {
		taints = fmt.Sprintf("[{key: %q, value: %q, effect: NoSchedule}]", realNodeTaint, "true")
	}
	resolv := filepath.Join(n.dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("# real-clusters: pods with dnsPolicy ClusterFirst ask the cluster's DNS\noptions attempts:1 timeout:1\nnameserver "+s.dnsIP()+"\n"), 0o644); err != nil {
		return err
	}
	kubeletYAML := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(kubeletYAML, []byte(fmt.Sprintf(kubeletConfig, s.cgroupRoot(), n.socket, s.nodeIP(),
		filepath.Join(n.dir, "pod-logs"), s.dnsIP(), resolv, c.pki.caFile, taints)), 0o644); err != nil {
		return err
	}
	err = inNode("kubelet", filepath.Join(bin, "kubelet"), "--config="+kubeletYAML, "--kubeconfig="+kubeletKubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"), "--cert-dir="+filepath.Join(n.dir, "kubelet", "pki"),
		"--hostname-override="+n.name, "--node-ip="+s.nodeIP(), "--node-labels="+realNodeLabel+"="+realNodeMarker)
	if err != nil {
		return err
	}
	proxyYAML := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(proxyYAML, []byte(fmt.Sprintf(kubeProxyConfig, proxyKubeconfig, s.podCIDR(), n.name, s.nodeIP())), 0o644); err != nil {
		return err
	}
	if err := inNode("kube-proxy", filepath.Join(bin, "kube-proxy"), "--config="+proxyYAML); err != nil {
		return err
	}
	podCIDR, err := n.waitPodCIDR(ctx, client)
	if err != nil {
		return err
	}
	if err := n.writeCNI(podCIDR); err != nil {
		return err
	}
	if err := n.advertiseGPUs(ctx, client, o.gpus); err != nil {
		return err
	}
	logf("%s: real node %s (%s, pods %s)", c.name, n.name, s.nodeIP(), podCIDR)
	return nil
}

func (n *realNode) waitContainerd(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if exec.CommandContext(ctx, "ctr", "-a", n.socket, "version").Run() == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: containerd did not answer on %s within 30s", n.name, n.socket)
}

// waitPodCIDR: the node registered and node-ipam gave it a pod CIDR.
func (n *realNode) waitPodCIDR(ctx context.Context, client kubernetes.Interface) (string, error) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if node, err := client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err == nil && node.Spec.PodCIDR != "" {
			return node.Spec.PodCIDR, nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return "", fmt.Errorf("%s did not register with a pod CIDR within 60s", n.name)
}

// writeCNI gives containerd the node's pod network; the node turns Ready
// once containerd has read it.
func (n *realNode) writeCNI(podCIDR string) error {
	conf, err := json.MarshalIndent(map[string]any{
		"cniVersion": "0.4.0", "name": n.name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "hairpinMode": true,
				// Pods of other clusters see a pod's own address.
				"ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "ranges": []any{[]any{map[string]any{"subnet": podCIDR}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}}, "dataDir": filepath.Join(n.dir, "ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.dir, "cni", "10-pods.conflist"), conf, 0o644)
}

// advertiseGPUs gives the node G nvidia.com/gpu, an extended resource
// the kubelet keeps as it finds it, so GPU-shaped jobs fit.
func (n *realNode) advertiseGPUs(ctx context.Context, client kubernetes.Interface, gpus int) error {
	if gpus <= 0 {
		return nil
	}
	quantity := resource.NewQuantity(int64(gpus), resource.DecimalSI).String()
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"capacity":    map[string]string{"nvidia.com/gpu": quantity},
		"allocatable": map[string]string{"nvidia.com/gpu": quantity},
	}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Nodes().Patch(ctx, n.name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// cleanUp runs once the node's processes are stopped: the containers'
// processes (children of shims that outlive containerd) are killed, every
// mount below the node's folder is undone deepest first (so that removing
// the folder never reaches through a mount), and the cgroups and the
// network namespace are removed.
func (n *realNode) cleanUp() {
	n.killShims()
	roots := make([]string, 0)
	for _, mount := range cgroupHierarchies() {
		roots = append(roots, filepath.Join(mount, n.slot.cgroupRoot()))
	}
	for range 20 {
		if killCgroups(roots) == 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	unmountBelow(n.dir)
	for _, root := range roots {
		removeCgroups(root)
	}
	killNamespace(n.slot.netns())
	_ = ipCommand("netns", "del", n.slot.netns())
}

// killShims kills this node's containerd shims: each names the socket of
// the containerd that started it.
func (n *realNode) killShims() {
	procDirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procDirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), n.socket+"\x00") {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// killCgroups SIGKILLs every process in the cgroups below roots and says
// how many it found.
func killCgroups(roots []string) int {
	found := 0
	for _, root := range roots {
		_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
			if err != nil || info.Name() != "cgroup.procs" {
				return nil
			}
			text, _ := os.ReadFile(path)
			for _, field := range strings.Fields(string(text)) {
				if pid, err := strconv.Atoi(field); err == nil && pid > 1 {
					found++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			return nil
		})
	}
	return found
}

// removeCgroups removes the cgroup folders below and at root, deepest first.
func removeCgroups(root string) {
	var dirs []string
	_ = filepath.Walk(root, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = syscall.Rmdir(dirs[i])
	}
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) {
	file, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer file.Close()
	var points []string
	scanner := bufio.NewScanner(file)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 {
			continue
		}
		point := unescapeMountPoint(fields[4])
		if point == dir || strings.HasPrefix(point, dir+"/") {
			points = append(points, point)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, point := range points {
		_ = syscall.Unmount(point, syscall.MNT_DETACH)
	}
}

// unescapeMountPoint undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountPoint(text string) string {
	var out strings.Builder
	for i := 0; i < len(text); i++ {
		if text[i] == '\\' && i+3 < len(text) {
			if value, err := strconv.ParseUint(text[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(value))
				i += 3
				continue
			}
		}
		out.WriteByte(text[i])
	}
	return out.String()
}

// isKwokNode: the node is one of kwok's, whose pods kubelet.go plays.
func isKwokNode(node *corev1.Node) bool {
	return node.Annotations["kwok.x-k8s.io/node"] == "fake"
}

// setDataPlaneCut cuts (or restores) what the host forwards to or from the
// cluster's pod and service addresses: with its API server partitioned
// (proxy.go), a cluster's pods no longer reach the other clusters' pods
// nor they its, as on a cluster cut off from the others. Traffic between
// the node and the host, its own API server's included, is not forwarded
// and stays: the cluster is cut off from the others, not from itself.
// A TCP segment across the cut is answered with a reset, everything else
// dropped: a connection across it fails at its next send, as behind a
// stateful firewall that lost the route. (With every segment dropped, a
// TensorFlow chief whose worker was on the cut cluster waited on TCP's
// retransmission timeout, minutes, before it saw the worker fail.)
func setDataPlaneCut(s *netSlot, cut bool) error {
	comment := []string{"-m", "comment", "--comment", fmt.Sprintf("real-clusters %d: partition of node slot %d", os.Getpid(), s.index)}
	// Inserted in this order, the reset comes first in the chain.
	verdicts := [][]string{{"-j", "DROP"}, {"-p", "tcp", "-j", "REJECT", "--reject-with", "tcp-reset"}}
	for _, cidr := range []string{s.podCIDR(), s.serviceCIDR()} {
		for _, direction := range []string{"-s", "-d"} {
			for _, verdict := range verdicts {
				rule := append(append([]string{"FORWARD", direction, cidr}, verdict...), comment...)
				present := exec.Command("iptables", append([]string{"-C"}, rule...)...).Run() == nil
				action := ""
				switch {
				case cut && !present:
					action = "-I"
				case !cut && present:
					action = "-D"
				default:
					continue
				}
				if out, err := exec.Command("iptables", append([]string{action}, rule...)...).CombinedOutput(); err != nil {
					return fmt.Errorf("iptables %s %s: %v: %s", action, strings.Join(rule, " "), err, out)
				}
			}
		}
	}
	return nil
}
