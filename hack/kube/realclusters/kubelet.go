package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
)

// The pod behaviour of the simulated kubelet (src/sim/kubelet.rs), on a
// real cluster whose nodes kwok fakes. kwok's Stages cannot express it:
// `exit-codes` is one code per attempt of a pod *name*, which is memory
// across pod objects that a Stage does not have, and the seconds are
// decimals. So one small helper drives every bound pod, and kwok keeps the
// nodes alive (one writer for pod status, one for node status).
const annotationPrefix = "sim.federation.tfjob.io/"

const (
	terminationDelay = 100 * time.Millisecond
	restartDelay     = 200 * time.Millisecond
)

type script struct {
	pending, run      time.Duration
	exitCodes         []int32
	waitingReason     string
	terminationReason string
}

func seconds(annotations map[string]string, name string, fallback float64) time.Duration {
	value, err := strconv.ParseFloat(strings.TrimSpace(annotations[annotationPrefix+name]), 64)
	if err != nil || value < 0 || value > 1e6 {
		value = fallback
	}
	return time.Duration(value * float64(time.Second))
}

func scriptOf(pod *corev1.Pod) script {
	a := pod.Annotations
	s := script{
		pending:           seconds(a, "pending-seconds", 0.2),
		run:               seconds(a, "run-seconds", 1),
		waitingReason:     a[annotationPrefix+"waiting-reason"],
		terminationReason: a[annotationPrefix+"termination-reason"],
	}
	for _, code := range strings.Split(a[annotationPrefix+"exit-codes"], ",") {
		if n, err := strconv.ParseInt(strings.TrimSpace(code), 10, 32); err == nil {
			s.exitCodes = append(s.exitCodes, int32(n))
		}
	}
	if len(s.exitCodes) == 0 {
		s.exitCodes = []int32{0}
	}
	return s
}

func (s script) exitCode(attempt int) int32 {
	if attempt < len(s.exitCodes) {
		return s.exitCodes[attempt]
	}
	return s.exitCodes[len(s.exitCodes)-1]
}

type kubelet struct {
	cluster     string
	book        *logBook
	client      kubernetes.Interface
	nodes       cache.Indexer
	mu          sync.Mutex
	started     map[types.UID]bool
	terminating map[types.UID]bool
	attempts    map[string]int // per namespace/name: attempts so far
	serial      int
}

func runKubelet(ctx context.Context, cluster string, client kubernetes.Interface, logs *logServer) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	pods := factory.Core().V1().Pods().Informer()
	nodes := factory.Core().V1().Nodes().Informer()
	k := &kubelet{cluster: cluster, book: logs.book, client: client, nodes: nodes.GetIndexer(), started: map[types.UID]bool{}, terminating: map[types.UID]bool{}, attempts: map[string]int{}}
	logs.kubelet.Store(k)
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { k.observe(ctx, obj) },
		DeleteFunc: func(obj any) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				k.mu.Lock()
				delete(k.started, pod.UID)
				delete(k.terminating, pod.UID)
				k.mu.Unlock()
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	return nil
}

func (k *kubelet) observe(ctx context.Context, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Spec.NodeName == "" {
		return
	}
	node, exists, err := k.nodes.GetByKey(pod.Spec.NodeName)
	if err == nil && exists && !isKwokNode(node.(*corev1.Node)) {
		return // a real node's kubelet runs it (realnode.go)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if pod.DeletionTimestamp != nil {
		if !k.terminating[pod.UID] {
			k.terminating[pod.UID] = true
			go k.terminate(ctx, pod.Namespace, pod.Name, pod.UID)
		}
		return
	}
	if k.started[pod.UID] || pod.Status.Phase != corev1.PodPending {
		return
	}
	if err != nil || !exists {
		return // bound to a node that does not exist: stays Pending
	}
	hostIP := ""
	for _, address := range node.(*corev1.Node).Status.Addresses {
		if address.Type == corev1.NodeInternalIP {
			hostIP = address.Address
		}
	}
	k.started[pod.UID] = true
	k.serial++
	podIP := fmt.Sprintf("10.244.%d.%d", (k.serial/250)%250, k.serial%250+2)
	go k.drive(ctx, pod.Namespace, pod.Name, firstContainer(pod), pod.UID, scriptOf(pod), hostIP, podIP)
}

func (k *kubelet) nextAttempt(namespace, name string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	key := namespace + "/" + name
	attempt := k.attempts[key]
	k.attempts[key]++
	return attempt
}

func sleep(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// updatePod writes the status through change while the pod is the same,
// undeleted pod; false when it is gone or being deleted.
func (k *kubelet) updatePod(ctx context.Context, namespace, name string, uid types.UID, change func(*corev1.Pod)) bool {
	alive := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := k.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if pod.UID != uid || pod.DeletionTimestamp != nil {
			alive = false
			return nil
		}
		change(pod)
		_, err = k.client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"})
		alive = err == nil
		return err
	})
	return err == nil && alive
}

func setConditions(pod *corev1.Pod, ready bool, reason string) {
	now := metav1.Now()
	var conditions []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodInitialized && c.Type != corev1.ContainersReady && c.Type != corev1.PodReady {
			conditions = append(conditions, c)
		}
	}
	for _, t := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		condition := corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
		if !ready && t != corev1.PodInitialized {
			condition.Status = corev1.ConditionFalse
			condition.Reason = reason
		}
		conditions = append(conditions, condition)
	}
	pod.Status.Conditions = conditions
}

func containerStatuses(pod *corev1.Pod, state corev1.ContainerState, last corev1.ContainerState, ready bool, restarts int32) []corev1.ContainerStatus {
	var statuses []corev1.ContainerStatus
	for _, c := range pod.Spec.Containers {
		started := ready
		statuses = append(statuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image + "@sha256:0000",
			ContainerID: fmt.Sprintf("containerd://%s-%s-%d", string(pod.UID)[:8], c.Name, restarts),
			Ready:       ready, Started: &started, RestartCount: restarts, State: state, LastTerminationState: last,
		})
	}
	return statuses
}

// drive is one pod's life: pending, running attempts, restarts in place for
// restartPolicy Always/OnFailure (the controller's pods use Never).
func (k *kubelet) drive(ctx context.Context, namespace, name, container string, uid types.UID, s script, hostIP, podIP string) {
	if !sleep(ctx, s.pending) {
		return
	}
	address := func(pod *corev1.Pod) {
		pod.Status.HostIP = hostIP
		pod.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
		pod.Status.PodIP = podIP
		pod.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
		if pod.Status.StartTime == nil {
			now := metav1.Now()
			pod.Status.StartTime = &now
		}
	}
	if s.waitingReason != "" {
		k.updatePod(ctx, namespace, name, uid, func(pod *corev1.Pod) {
			waiting := corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: s.waitingReason, Message: "simulated: " + s.waitingReason}}
			address(pod)
			pod.Status.ContainerStatuses = containerStatuses(pod, waiting, corev1.ContainerState{}, false, 0)
			setConditions(pod, false, "ContainersNotReady")
		})
		return
	}
	var restarts int32
	var last corev1.ContainerState
	for {
		attempt := k.nextAttempt(namespace, name)
		logs := k.scriptedLogs(namespace, name, container, attempt)
		startedAt := metav1.Now()
		running := k.updatePod(ctx, namespace, name, uid, func(pod *corev1.Pod) {
			state := corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: startedAt}}
			pod.Status.Phase = corev1.PodRunning
			address(pod)
			pod.Status.ContainerStatuses = containerStatuses(pod, state, last, true, restarts)
			setConditions(pod, true, "")
		})
		if !running {
			k.book.setOpen(logs, false)
			return
		}
		if !sleep(ctx, s.run) {
			return
		}
		code := s.exitCode(attempt)
		k.endScriptedLog(logs, name, attempt, code)
		reason := "Error"
		switch {
		case code == 0:
			reason = "Completed"
		case s.terminationReason != "":
			reason = s.terminationReason
		}
		terminated := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: code, Reason: reason, StartedAt: startedAt, FinishedAt: metav1.Now(),
			ContainerID: "containerd://" + string(uid)[:8],
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

// terminate is a graceful deletion: running containers get SIGTERM and exit
// 143, then the pod is removed (grace period 0), as a kubelet does.
func (k *kubelet) terminate(ctx context.Context, namespace, name string, uid types.UID) {
	if !sleep(ctx, terminationDelay) {
		return
	}
	pods := k.client.CoreV1().Pods(namespace)
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pod, err := pods.Get(ctx, name, metav1.GetOptions{})
		if err != nil || pod.UID != uid || (pod.Status.Phase != corev1.PodRunning && pod.Status.Phase != corev1.PodPending) {
			return nil
		}
		k.mu.Lock()
		attempt := k.attempts[namespace+"/"+name] - 1
		k.mu.Unlock()
		if logs := k.book.path(k.cluster, namespace, name, firstContainer(pod), attempt); attempt >= 0 && k.book.isOpen(logs) {
			k.endScriptedLog(logs, name, attempt, 143)
		}
		now := metav1.Now()
		for i := range pod.Status.ContainerStatuses {
			status := &pod.Status.ContainerStatuses[i]
			if status.State.Running != nil {
				status.State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
					ExitCode: 143, Reason: "Error", StartedAt: status.State.Running.StartedAt, FinishedAt: now,
				}}
				status.Ready = false
				started := false
				status.Started = &started
			}
		}
		pod.Status.Phase = corev1.PodFailed
		setConditions(pod, false, "PodCompleted")
		_, err = pods.UpdateStatus(ctx, pod, metav1.UpdateOptions{FieldManager: "kubelet"})
		return err
	})
	k.removePod(ctx, namespace, name, uid)
}

// removePod deletes a terminated pod for good (grace period 0), as a
// kubelet does once its containers stopped.
func (k *kubelet) removePod(ctx context.Context, namespace, name string, uid types.UID) {
	pods := k.client.CoreV1().Pods(namespace)
	zero := int64(0)
	err := pods.Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		logf("deleting pod %s/%s: %v", namespace, name, err)
	}
}

func firstContainer(pod *corev1.Pod) string {
	if len(pod.Spec.Containers) == 0 {
		return ""
	}
	return pod.Spec.Containers[0].Name
}

// scriptedLogs starts the log of a scripted pod's attempt (0-based) with
// the lines the simulated kubelet writes (crates/kube-sim/src/logs.rs),
// and returns its path.
func (k *kubelet) scriptedLogs(namespace, name, container string, attempt int) string {
	path := k.book.path(k.cluster, namespace, name, container, attempt)
	_ = os.Remove(path)
	k.book.setOpen(path, true)
	n := attempt + 1
	k.book.appendLines(path, fmt.Sprintf("%s attempt %d: started", name, n), fmt.Sprintf("%s attempt %d: running", name, n))
	return path
}

func (k *kubelet) endScriptedLog(path, name string, attempt int, code int32) {
	if !k.book.isOpen(path) {
		return
	}
	k.book.appendLines(path, fmt.Sprintf("%s attempt %d: exited with code %d", name, attempt+1, code))
	k.book.setOpen(path, false)
}
