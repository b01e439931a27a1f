package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// The process runtime: a pod with the annotation
// sim.federation.tfjob.io/runtime: process runs for real, as a host process
// in a network namespace of its own (network.go), with a hosts file that
// stands in for cluster and multi-cluster DNS (hosts.go), its output the
// container's log (logs.go). Every other pod keeps the scripted behaviour
// of kubelet.go.
//
// What runs: the first container's command + args ($(VAR) expanded from
// its env, as a kubelet does); the image is not pulled. The process gets
// the container's env (value, and fieldRef of the pod's metadata, spec and
// status addresses), the env of the launcher's --process-env flags beneath
// it (PATH, for example that of a Python virtual environment), HOSTNAME =
// the pod's name, and the pod's workingDir, or a fresh directory of its own.
const runtimeAnnotation = annotationPrefix + "runtime"

func wantsProcess(pod *corev1.Pod) bool {
	return pod.Annotations[runtimeAnnotation] == "process"
}

// processRuntime is shared by the clusters of the run: one pod network,
// one hosts registry, one set of running processes.
type processRuntime struct {
	network *podNetwork
	hosts   *hostsRegistry
	book    *logBook
	env     []string // --process-env
	work    string   // the launcher's scratch directory
	mu      sync.Mutex
	running map[*runningProcess]bool
	closed  bool
}

type runningProcess struct {
	cmd    *exec.Cmd
	exited chan struct{}
	code   int32
	// deleting: the pod is being deleted; the exit goes to terminate.
	deleting bool
}

func newProcessRuntime(ctx context.Context, book *logBook, work string, env []string) *processRuntime {
	cleanStaleNetworks()
	return &processRuntime{
		network: newPodNetwork(),
		hosts:   newHostsRegistry(ctx),
		book:    book,
		env:     env,
		work:    work,
		running: map[*runningProcess]bool{},
	}
}

// stopAll ends every process (SIGTERM, SIGKILL after 5 s) and removes the
// pod network.
func (r *processRuntime) stopAll() {
	r.mu.Lock()
	r.closed = true
	var all []*runningProcess
	for p := range r.running {
		all = append(all, p)
	}
	r.mu.Unlock()
	for _, p := range all {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	}
	deadline := time.After(5 * time.Second)
	for _, p := range all {
		select {
		case <-p.exited:
		case <-deadline:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	r.network.close()
}

var variableReference = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)|\$\$`)

// expand does a kubelet's $(VAR) expansion: defined variables are replaced,
// $$ is $, an undefined reference stays as it is.
func expand(text string, vars map[string]string) string {
	return variableReference.ReplaceAllStringFunc(text, func(ref string) string {
		if ref == "$$" {
			return "$"
		}
		if value, ok := vars[ref[2:len(ref)-1]]; ok {
			return value
		}
		return ref
	})
}

var fieldPath = regexp.MustCompile(`^metadata\.(labels|annotations)\['(.*)'\]$`)

func fieldRef(pod *corev1.Pod, path, hostIP, podIP string) (string, error) {
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.hostIP", "status.hostIPs":
		return hostIP, nil
	case "status.podIP", "status.podIPs":
		return podIP, nil
	}
	if m := fieldPath.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	return "", fmt.Errorf("fieldRef %q is not supported by the process runtime", path)
}

// environment is the process's env, in the container's order.
func (r *processRuntime) environment(pod *corev1.Pod, container corev1.Container, hostIP, podIP string) ([]string, map[string]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(name, value string) {
		if _, ok := vars[name]; !ok {
			order = append(order, name)
		}
		vars[name] = value
	}
	// The launcher's PATH unless --process-env names one.
	set("PATH", os.Getenv("PATH"))
	for _, kv := range r.env {
		name, value, _ := strings.Cut(kv, "=")
		set(name, value)
	}
	set("HOSTNAME", pod.Name)
	for _, e := range container.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, vars))
		case e.ValueFrom.FieldRef != nil:
			value, err := fieldRef(pod, e.ValueFrom.FieldRef.FieldPath, hostIP, podIP)
			if err != nil {
				return nil, nil, err
			}
			set(e.Name, value)
		default:
			return nil, nil, fmt.Errorf("env %s: only value and fieldRef are supported by the process runtime", e.Name)
		}
	}
	env := make([]string, 0, len(order))
	for _, name := range order {
		env = append(env, name+"="+vars[name])
	}
	return env, vars, nil
}

// gracePeriod is how long a deleted pod's process has between SIGTERM and
// SIGKILL.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return 30 * time.Second
}

func exitCodeOf(state *os.ProcessState) int32 {
	if status, ok := state.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int32(status.Signal())
	}
	return int32(state.ExitCode())
}

// runProcess is a process pod's life on its node: its network namespace,
// then one process per attempt (a pod restartPolicy of Always or OnFailure
// restarts it in place; the controller's pods use Never), each attempt's
// output its container's log.
func (k *kubelet) runProcess(ctx context.Context, pod *corev1.Pod, hostIP string) {
	r := k.runtime
	namespace, name, uid := pod.Namespace, pod.Name, pod.UID
	fail := func(reason, message string) {
		logf("%s: pod %s/%s: %s", k.cluster, namespace, name, message)
		k.updatePod(ctx, namespace, name, uid, func(pod *corev1.Pod) {
			waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message}}
			pod.Status.HostIP = hostIP
			pod.Status.ContainerStatuses = containerStatuses(pod, waiting, corev1.ContainerState{}, false, 0)
			setConditions(pod, false, "ContainersNotReady")
		})
	}
	if len(pod.Spec.Containers) == 0 {
		return
	}
	// As a kubelet retries a sandbox, a few times.
	var netns, podIP string
	var err error
	for try := 0; ; try++ {
		if netns, podIP, err = r.network.add(); err == nil {
			break
		}
		if try == 4 {
			fail("CreatePodSandboxError", err.Error())
			return
		}
		logf("%s: pod %s/%s: %v (trying again)", k.cluster, namespace, name, err)
		if !sleep(ctx, time.Duration(try+1)*500*time.Millisecond) {
			return
		}
	}
	defer r.network.remove(netns)
	if err := r.hosts.addPod(netns, hostsPod{cluster: k.cluster, name: name, ip: podIP}); err != nil {
		fail("CreatePodSandboxError", err.Error())
		return
	}
	defer r.hosts.removePod(netns)
	container := pod.Spec.Containers[0]
	env, vars, err := r.environment(pod, container, hostIP, podIP)
	if err != nil {
		fail("CreateContainerConfigError", err.Error())
		return
	}
	var argv []string
	for _, arg := range append(append([]string{}, container.Command...), container.Args...) {
		argv = append(argv, expand(arg, vars))
	}
	if len(argv) == 0 {
		fail("CreateContainerConfigError", "the process runtime needs the container's command (the image's entrypoint is not known)")
		return
	}
	dir := container.WorkingDir
	if dir == "" {
		dir = filepath.Join(r.work, "pods", k.cluster, namespace+"_"+name+"_"+string(uid))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail("CreateContainerConfigError", err.Error())
		return
	}
	var restarts int32
	var last corev1.ContainerState
	for {
		attempt := k.nextAttempt(namespace, name)
		path := r.book.path(k.cluster, namespace, name, container.Name, attempt)
		p, err := r.start(netns, argv, env, dir, path)
		if err != nil {
			fail("RunContainerError", err.Error())
			return
		}
		k.mu.Lock()
		deleted := k.terminating[uid]
		if !deleted {
			k.processes[uid] = p
		}
		k.mu.Unlock()
		if deleted { // deleted while it started: it does not run
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
			return
		}
		startedAt := metav1.Now()
		k.updatePod(ctx, namespace, name, uid, func(pod *corev1.Pod) {
			state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
			pod.Status.Phase = corev1.PodRunning
			pod.Status.HostIP = hostIP
			pod.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
			pod.Status.PodIP = podIP
			pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
			if pod.Status.StartTime == nil {
				pod.Status.StartTime = &startedAt
			}
			pod.Status.ContainerStatuses = containerStatuses(pod, state, last, true, restarts)
			setConditions(pod, true, "")
		})
		select {
		case <-p.exited:
		case <-ctx.Done():
			<-p.exited
			return
		}
		k.mu.Lock()
		deleting := p.deleting
		k.mu.Unlock()
		if deleting {
			return // terminate writes the end
		}
		code := p.code
		reason := "Error"
		if code == 0 {
			reason = "Completed"
		}
		terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: startedAt, FinishedAt: metav1.Now(),
			ContainerID: fmt.Sprintf("process://%d", p.cmd.Process.Pid),
		}}
		restart := false
		alive := k.updatePod(ctx, namespace, name, uid, func(pod *corev1.Pod) {
			policy := pod.Spec.RestartPolicy
			restart = policy == corev1.RestartPolicyAlways || (policy == corev1.RestartPolicyOnFailure && code != 0)
			if restart {
				waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
				pod.Status.ContainerStatuses = containerStatuses(pod, waiting, terminated, false, restarts)
				setConditions(pod, false, "ContainersNotReady")
				return
			}
			pod.Status.ContainerStatuses = containerStatuses(pod, terminated, last, false, restarts)
			pod.Status.Phase = corev1.PodSucceeded
			if code != 0 {
				pod.Status.Phase = corev1.PodFailed
			}
			setConditions(pod, false, "PodCompleted")
		})
		if !alive || !restart || !sleep(ctx, restartDelay) {
			return
		}
		restarts++
		last = terminated
	}
}

// start runs argv in network namespace netns (`ip netns exec` also mounts
// /etc/netns/<netns>/hosts over /etc/hosts), output to the log at path.
func (r *processRuntime) start(netns string, argv, env []string, dir, path string) (*runningProcess, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	out, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		out.Close()
		return nil, errors.New("the launcher is stopping")
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", netns}, argv...)...)
	cmd.Env, cmd.Dir = env, dir
	cmd.Stdout, cmd.Stderr = out, out
	// A group of its own (stopped as one), killed if the launcher dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, err
	}
	p := &runningProcess{cmd: cmd, exited: make(chan struct{})}
	r.running[p] = true
	r.book.setOpen(path, true)
	go func() {
		_ = cmd.Wait()
		p.code = exitCodeOf(cmd.ProcessState)
		// Nothing it started outlives it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		out.Close()
		r.book.setOpen(path, false)
		r.mu.Lock()
		delete(r.running, p)
		r.mu.Unlock()
		close(p.exited)
	}()
	return p, nil
}

// terminateProcess is the graceful deletion of a process pod: SIGTERM, SIGKILL
// after the grace period, the exit code (143 or 137, or its own) recorded,
// then the pod removed.
func (k *kubelet) terminateProcess(ctx context.Context, pod *corev1.Pod) {
	namespace, name, uid := pod.Namespace, pod.Name, pod.UID
	k.mu.Lock()
	p := k.processes[uid]
	if p != nil {
		p.deleting = true
	}
	k.mu.Unlock()
	var code int32 = -1
	if p != nil {
		select {
		case <-p.exited:
		default:
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(gracePeriod(pod)):
				_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
				<-p.exited
			case <-ctx.Done():
				return
			}
			code = p.code
		}
	}
	pods := k.client.CoreV1().Pods(namespace)
	if code >= 0 {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			current, err := pods.Get(ctx, name, metav1.GetOptions{})
			if err != nil || current.UID != uid {
				return nil
			}
			now := metav1.Now()
			for i := range current.Status.ContainerStatuses {
				status := &current.Status.ContainerStatuses[i]
				startedAt := now
				if status.State.Running != nil {
					startedAt = status.State.Running.StartedAt
				}
				status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: code, Reason: "Error", StartedAt: startedAt, FinishedAt: now,
					ContainerID: fmt.Sprintf("process://%d", p.cmd.Process.Pid),
				}}
				status.Ready = false
				started := false
				status.Started = &started
			}
			current.Status.Phase = corev1.PodFailed
			setConditions(current, false, "PodCompleted")
			_, err = pods.UpdateStatus(ctx, current, metav1.UpdateOptions{FieldManager: "kubelet"})
			return err
		})
	}
	k.removePod(ctx, namespace, name, uid)
}

// stopProcess sends SIGTERM to a process's group, SIGKILL after grace.
func stopProcess(ctx context.Context, p *runningProcess, grace time.Duration) {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	case <-ctx.Done():
	}
}
