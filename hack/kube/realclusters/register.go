package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The registration of `sim --register` (src/join.rs), with the identity a
// platform team would hand us on a member: deploy/member-rbac.yaml applied
// there, a token of its ServiceAccount in the kubeconfig Secret on home.
const (
	fieldManager     = "real-clusters"
	secretsNamespace = "tfjob-federator"
	memberAccount    = "tfjob-federator-member"
	kubeconfigKey    = "kubeconfig"
	// A day: longer than any test run; the API server allows it.
	tokenSeconds = 24 * 60 * 60
)

// repoFile is a file of the repository that hack/real-clusters runs from.
func repoFile(path string) (string, error) {
	root := os.Getenv("REAL_CLUSTERS_REPO")
	if root == "" {
		return "", fmt.Errorf("REAL_CLUSTERS_REPO is not set: run hack/real-clusters")
	}
	return filepath.Join(root, path), nil
}

// applier applies YAML documents with server-side apply, as kubectl apply
// --server-side does.
type applier struct {
	dynamic dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(c *cluster) (*applier, error) {
	config, err := c.restConfig(c.direct)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	return &applier{dynamic: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	var lastErr error
	// A kind whose CRD was just created is served a moment later.
	for range 50 {
		mapping, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			a.mapper.Reset()
			lastErr = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		data, err := json.Marshal(obj.Object)
		if err != nil {
			return err
		}
		resource := a.dynamic.Resource(mapping.Resource)
		var target dynamic.ResourceInterface = resource
		if mapping.Scope.Name() == "namespace" {
			target = resource.Namespace(obj.GetNamespace())
		}
		force := true
		_, err = target.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force})
		if err == nil {
			return nil
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), lastErr)
}

func (a *applier) applyFile(ctx context.Context, path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var obj unstructured.Unstructured
		if err := decoder.Decode(&obj.Object); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		if err := a.apply(ctx, &obj); err != nil {
			return err
		}
	}
}

// registerMembers writes a member Secret and MemberCluster on home for each
// member; the CRDs are on home already (startCluster).
func registerMembers(ctx context.Context, home *cluster, members []*cluster) error {
	rbac, err := repoFile("deploy/member-rbac.yaml")
	if err != nil {
		return err
	}
	homeApplier, err := newApplier(home)
	if err != nil {
		return err
	}
	if err := homeApplier.apply(ctx, object(map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": secretsNamespace}})); err != nil {
		return err
	}
	for _, member := range members {
		kubeconfig, err := memberIdentity(ctx, member, rbac)
		if err != nil {
			return fmt.Errorf("%s: %w", member.name, err)
		}
		secret := object(map[string]any{
			"apiVersion": "v1", "kind": "Secret",
			"metadata":   map[string]any{"name": member.name, "namespace": secretsNamespace, "labels": map[string]any{"app.kubernetes.io/managed-by": "tfjob-federator"}},
			"type":       "Opaque",
			"stringData": map[string]any{kubeconfigKey: string(kubeconfig)},
		})
		memberCluster := object(map[string]any{
			"apiVersion": "federation.tfjob.io/v1alpha1", "kind": "MemberCluster",
			"metadata": map[string]any{"name": member.name},
			"spec": map[string]any{
				"kubeconfigSecretRef": map[string]any{"name": member.name, "namespace": secretsNamespace, "key": kubeconfigKey},
				"exportServices":      true,
			},
		})
		for _, obj := range []*unstructured.Unstructured{secret, memberCluster} {
			if err := homeApplier.apply(ctx, obj); err != nil {
				return err
			}
		}
		logf("%s registered on home as a member", member.name)
	}
	return nil
}

func object(fields map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: fields}
}

// memberIdentity applies deploy/member-rbac.yaml on the member and returns a
// kubeconfig with a token of its ServiceAccount, through the member's proxy.
func memberIdentity(ctx context.Context, member *cluster, rbac string) ([]byte, error) {
	a, err := newApplier(member)
	if err != nil {
		return nil, err
	}
	if err := a.applyFile(ctx, rbac); err != nil {
		return nil, err
	}
	config, err := member.restConfig(member.direct)
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	seconds := int64(tokenSeconds)
	token, err := client.CoreV1().ServiceAccounts(secretsNamespace).CreateToken(ctx, memberAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", memberAccount, err)
	}
	kubeconfig := member.userKubeconfig()
	kubeconfig.AuthInfos = map[string]*clientcmdapi.AuthInfo{member.name: {Token: token.Status.Token}}
	return clientcmd.Write(*kubeconfig)
}

// column is a printer column of a CRD: its name, type and JSON path.
type column struct{ name, kind, path string }

// namespacedCRD is a CRD of one served version with a status subresource
// and a schema that keeps whatever it is given: the launcher's kinds are
// written by the controller and the test ground, which the tests check.
func namespacedCRD(group, version, kind, plural, shortName string, columns ...column) *unstructured.Unstructured {
	printed := make([]any, 0, len(columns))
	for _, c := range columns {
		printed = append(printed, map[string]any{"name": c.name, "type": c.kind, "jsonPath": c.path})
	}
	served := map[string]any{
		"name": version, "served": true, "storage": true, "subresources": map[string]any{"status": map[string]any{}},
		"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
	}
	if len(printed) > 0 {
		served["additionalPrinterColumns"] = printed
	}
	singular := strings.ToLower(kind)
	return object(map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names":    map[string]any{"plural": plural, "singular": singular, "kind": kind, "listKind": kind + "List", "shortNames": []any{shortName}},
			"versions": []any{served},
		},
	})
}
