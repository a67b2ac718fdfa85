package controllers

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// installKEDACRD installs the ScaledObject stand-in CRD once in the shared API server.
func installKEDACRD(t *testing.T, c client.Client) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "keda-scaledobject-crd.yaml"))
	if err != nil {
		t.Fatalf("read CRD: %v", err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(data, crd); err != nil {
		t.Fatalf("decode CRD: %v", err)
	}
	if err := c.Create(context.Background(), crd); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD: %v", err)
	}
	eventually(t, "ScaledObject CRD established", 20*time.Second, func() (bool, string) {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(ScaledObjectGVK.GroupVersion().WithKind("ScaledObjectList"))
		err := c.List(context.Background(), list)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

// TestKEDAScaledObjectReplacesHPA: with KEDA served, mode keda creates a ScaledObject and no
// HPA; switching to hpa swaps them — never both.
func TestKEDAScaledObjectReplacesHPA(t *testing.T) {
	kc := kube(t)
	installKEDACRD(t, kc)
	ns := newNamespace(t, kc)
	r := newReconciler(t, kc)
	r.Discovery = fakeDiscovery(true)

	pc := newChannel(ns, "keda")
	pc.Spec.Autoscaling = callbackdv1alpha1.AutoscalingSpec{Mode: callbackdv1alpha1.AutoscalingKEDA, MinReplicas: 2, MaxReplicas: 6}
	pc = startChannel(t, kc, r, pc)
	expectCondition(t, pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionTrue, ReasonKEDAConfigured)

	so := &unstructured.Unstructured{}
	so.SetGroupVersionKind(ScaledObjectGVK)
	so.SetNamespace(ns)
	so.SetName(callbackdName(pc))
	get(t, kc, so)
	if ref := metav1.GetControllerOf(so); ref == nil || ref.UID != pc.UID {
		t.Fatalf("ScaledObject: expected the channel as controller, got %+v", ref)
	}
	if got, _, _ := unstructured.NestedInt64(so.Object, "spec", "maxReplicaCount"); got != 6 {
		t.Fatalf("ScaledObject maxReplicaCount: expected 6, got %d", got)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	hpa.Namespace, hpa.Name = ns, callbackdName(pc)
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa); !apierrors.IsNotFound(err) {
		t.Fatalf("HPA with KEDA: expected none, got %v", err)
	}

	// A second reconcile leaves the ScaledObject untouched.
	rv := so.GetResourceVersion()
	reconcileOnce(t, r, pc)
	get(t, kc, so)
	if so.GetResourceVersion() != rv {
		t.Fatalf("ScaledObject resourceVersion: expected %s kept, got %s", rv, so.GetResourceVersion())
	}

	pc = getChannel(t, kc, ns, pc.Name)
	pc.Spec.Autoscaling.Mode = callbackdv1alpha1.AutoscalingHPA
	if err := kc.Update(context.Background(), pc); err != nil {
		t.Fatalf("switch to hpa: %v", err)
	}
	reconcileOnce(t, r, pc)
	get(t, kc, hpa)
	if err := kc.Get(context.Background(), client.ObjectKeyFromObject(so), so); !apierrors.IsNotFound(err) {
		t.Fatalf("ScaledObject after switching to hpa: expected it deleted, got %v", err)
	}
}
