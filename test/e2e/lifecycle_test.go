package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// decodeObjects splits a multi-document YAML stream into objects.
func decodeObjects(t testing.TB, data []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode YAML: %v", err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// dryRunChart renders the chart with the default and the fully-specified values (test/chart's
// full-values.yaml) and has this cluster's API server validate every object with a server-side
// dry run. The Prometheus Operator's CRDs are installed for it (test/chart's stand-ins) and
// removed afterwards; the chart's own CRD is the one helm installed.
func (e *e2e) dryRunChart(t *testing.T) {
	ctx := e.ctx(t, 3*time.Minute)
	chartTest := filepath.Join(repoRoot(t), "test", "chart", "testdata")
	raw, err := os.ReadFile(filepath.Join(chartTest, "monitoring-crds", "monitoring.coreos.com.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crds []*unstructured.Unstructured
	for _, o := range decodeObjects(t, raw) {
		if err := e.k8s.Create(ctx, o); err != nil {
			t.Fatalf("install CRD %s: %v", o.GetName(), err)
		}
		crds = append(crds, o)
	}
	defer func() {
		for _, o := range crds {
			if err := e.k8s.Delete(context.Background(), o); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("remove CRD %s: %v", o.GetName(), err)
			}
		}
	}()
	for _, o := range crds {
		eventually(t, time.Minute, "CRD "+o.GetName()+" established", func(ctx context.Context) (bool, string) {
			crd := &apiextensionsv1.CustomResourceDefinition{}
			if err := e.k8s.Get(ctx, types.NamespacedName{Name: o.GetName()}, crd); err != nil {
				return false, err.Error()
			}
			for _, c := range crd.Status.Conditions {
				if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
					return true, ""
				}
			}
			return false, "not established"
		})
	}
	// The API server's discovery must know the new kinds before the dry run.
	mapper := e.k8s.RESTMapper()
	for _, values := range []struct {
		name  string
		files []string
	}{
		{"defaults", nil},
		{"full", []string{filepath.Join(chartTest, "full-values.yaml")}},
	} {
		t.Run(values.name, func(t *testing.T) {
			args := []string{"template", releaseName, chartDir(t), "--namespace", releaseNamespace}
			for _, f := range values.files {
				args = append(args, "--values", f)
			}
			out, err := e.helm.run(ctx, args...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeObjects(t, []byte(out))
			if len(objs) < 5 {
				t.Fatalf("expected the chart to render its objects, got %d", len(objs))
			}
			for _, o := range objs {
				gvk := o.GroupVersionKind()
				eventually(t, 30*time.Second, "the API server to serve "+gvk.String(), func(context.Context) (bool, string) {
					if _, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
						return false, err.Error()
					}
					return true, ""
				})
				// Create for new objects, update for the release's own: both dry-run.
				err := e.k8s.Create(ctx, o.DeepCopy(), client.DryRunAll)
				if apierrors.IsAlreadyExists(err) {
					cur := &unstructured.Unstructured{}
					cur.SetGroupVersionKind(gvk)
					if err = e.k8s.Get(ctx, client.ObjectKeyFromObject(o), cur); err == nil {
						upd := o.DeepCopy()
						upd.SetResourceVersion(cur.GetResourceVersion())
						err = e.k8s.Update(ctx, upd, client.DryRunAll)
					}
				}
				if err != nil {
					t.Errorf("expected the API server to accept %s %s/%s (dry run), got: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
				}
			}
			t.Logf("%s values: %d rendered objects accepted by the API server", values.name, len(objs))
		})
	}
}

// channelKinds are the kinds the operator creates for a channel.
var channelKinds = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
	{Version: "v1", Resource: "pods"},
	{Version: "v1", Resource: "services"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "persistentvolumeclaims"},
	{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"},
	{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"},
}

// deleteDataChannel deletes the config/samples channel and waits until the garbage collector has
// removed every object the operator created for it (the Redis volumes' claims included).
func (e *e2e) deleteDataChannel(t *testing.T) {
	ctx := e.ctx(t, 3*time.Minute)
	pc := &callbackdv1alpha1.PaymentChannel{ObjectMeta: metav1.ObjectMeta{Namespace: dataNamespace, Name: dataChannel}}
	started := time.Now()
	if err := e.k8s.Delete(ctx, pc); err != nil {
		t.Fatalf("delete PaymentChannel %s: %v", dataChannel, err)
	}
	dyn, err := dynamic.NewForConfig(quiet(e.cluster.Config))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "nothing of channel "+dataChannel+" left in "+dataNamespace, func(ctx context.Context) (bool, string) {
		left := e.channelLeftovers(ctx, dyn)
		return len(left) == 0, strings.Join(left, ", ")
	})
	t.Logf("channel %s and all its children gone %v after the delete", dataChannel, time.Since(started).Round(time.Millisecond))
}

// channelLeftovers lists what still exists of the data channel: its own objects by label, plus
// the Redis claims (named data-<channel>-redis-N by the StatefulSet controller).
func (e *e2e) channelLeftovers(ctx context.Context, dyn dynamic.Interface) []string {
	var left []string
	for _, gvr := range channelKinds {
		list, err := dyn.Resource(gvr).Namespace(dataNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			left = append(left, fmt.Sprintf("%s: %v", gvr.Resource, err))
			continue
		}
		for _, o := range list.Items {
			if o.GetLabels()["callbackd.io/channel"] == dataChannel || strings.HasPrefix(o.GetName(), dataChannel) ||
				strings.HasPrefix(o.GetName(), "data-"+dataChannel) {
				left = append(left, gvr.Resource+"/"+o.GetName())
			}
		}
	}
	pc := &callbackdv1alpha1.PaymentChannel{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: dataChannel}, pc); err == nil {
		left = append(left, "paymentchannel/"+dataChannel)
	}
	return left
}

// ignoredLeftover says which objects in the release namespace are not the release's: what
// Kubernetes itself puts in every namespace, and events.
func ignoredLeftover(resource string, o unstructured.Unstructured) bool {
	switch {
	case resource == "events" || resource == "events.events.k8s.io":
		return true
	case resource == "configmaps" && o.GetName() == "kube-root-ca.crt":
		return true
	case resource == "serviceaccounts" && o.GetName() == "default":
		return true
	case resource == "leases.coordination.k8s.io" && o.GetName() == leaseName:
		// The operator's leader-election Lease: written by the running operator, not by the
		// chart, and never deleted by controller-runtime (it is released, not removed). Helm
		// cannot know it; it goes with the namespace. Reported by helmUninstall, not a failure.
		return true
	}
	return false
}

// helmUninstall stops the operator (the release's reconciler), uninstalls the release and fails
// on anything of ours left in the cluster: every namespaced object in the release namespace
// (all listable kinds, found through discovery) except what Kubernetes itself keeps there, the
// chart's cluster-scoped RBAC, and the persistent volume claims of the Redis groups.
// PaymentChannel's CRD stays by Helm's rule for crds/ (never deleted on uninstall, so that
// custom resources are not lost by accident); that is logged, not a failure.
func (e *e2e) helmUninstall(t *testing.T) {
	ctx := e.ctx(t, 5*time.Minute)
	if err := e.operator.stop(30 * time.Second); err != nil {
		t.Errorf("expected the operator to stop on SIGTERM: %v", err)
	}
	started := time.Now()
	if _, err := e.helm.run(ctx, "uninstall", releaseName, "--namespace", releaseNamespace, "--wait", "--timeout", "3m"); err != nil {
		t.Fatalf("expected helm uninstall to succeed, got: %v", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(quiet(e.cluster.Config))
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(quiet(e.cluster.Config))
	if err != nil {
		t.Fatal(err)
	}
	resources, err := discovery.ServerPreferredNamespacedResources(dc)
	if err != nil {
		t.Fatalf("discover namespaced resources: %v", err)
	}
	var last []string
	eventually(t, 3*time.Minute, "nothing of the release left", func(ctx context.Context) (bool, string) {
		last = e.releaseLeftovers(ctx, t, dyn, resources)
		return len(last) == 0, strings.Join(last, ", ")
	})
	t.Logf("helm uninstall: nothing of the release left after %v (checked every namespaced kind in %s, cluster RBAC, volume claims)",
		time.Since(started).Round(time.Millisecond), releaseNamespace)
	lease := &unstructured.Unstructured{}
	lease.SetGroupVersionKind(schema.GroupVersionKind{Group: "coordination.k8s.io", Version: "v1", Kind: "Lease"})
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: releaseNamespace, Name: leaseName}, lease); err == nil {
		t.Logf("left by the operator, not the chart: Lease %s/%s (leader election; released on shutdown, never deleted; goes with the namespace)", releaseNamespace, leaseName)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Name: "paymentchannels.callbackd.io"}, crd); err == nil {
		t.Logf("kept by Helm's CRD policy (crds/ is never deleted on uninstall): CustomResourceDefinition %s", crd.Name)
	}
}

func (e *e2e) releaseLeftovers(ctx context.Context, t *testing.T, dyn dynamic.Interface, resources []*metav1.APIResourceList) []string {
	var left []string
	for _, rl := range resources {
		gv, err := schema.ParseGroupVersion(rl.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range rl.APIResources {
			if !slices.Contains(r.Verbs, "list") || strings.Contains(r.Name, "/") {
				continue
			}
			name := r.Name
			if gv.Group != "" {
				name += "." + gv.Group
			}
			list, err := dyn.Resource(gv.WithResource(r.Name)).Namespace(releaseNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				if apierrors.IsNotFound(err) || apierrors.IsMethodNotSupported(err) {
					continue
				}
				left = append(left, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			for _, o := range list.Items {
				if !ignoredLeftover(name, o) {
					left = append(left, name+"/"+o.GetName())
				}
			}
		}
	}
	for _, gvr := range []schema.GroupVersionResource{
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	} {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + releaseName})
		if err != nil {
			left = append(left, fmt.Sprintf("%s: %v", gvr.Resource, err))
			continue
		}
		for _, o := range list.Items {
			left = append(left, gvr.Resource+"/"+o.GetName())
		}
	}
	pvcs, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}).List(ctx, metav1.ListOptions{})
	if err != nil {
		left = append(left, "persistentvolumeclaims: "+err.Error())
	} else {
		for _, o := range pvcs.Items {
			left = append(left, "persistentvolumeclaims/"+o.GetNamespace()+"/"+o.GetName())
		}
	}
	return left
}

// quiet returns a copy of cfg that drops the API server's deprecation warnings (listing every
// kind includes v1 Endpoints, deprecated in favour of EndpointSlices).
func quiet(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.WarningHandler = rest.NoWarnings{}
	return c
}
