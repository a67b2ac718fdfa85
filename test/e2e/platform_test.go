// Package e2e runs the whole platform on a local simulated cluster (`make e2e`): a kwok cluster
// of real control-plane processes (internal/kwokenv), the Helm chart installed with helm, the
// operator binary running locally as the chart's ServiceAccount, the samples reconciled, and the
// data plane (callbackd, configured from what the operator rendered into the cluster) under a
// paysim storm against real PostgreSQL and Redis Sentinel. It is not part of `make test`.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/kwokenv"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The channels the test reconciles: the chart's two samples in the release namespace, and the
// WeChat Pay sample of config/samples (HPA-autoscaled) in its own namespace with real test keys,
// which also carries the data plane.
const (
	dataNamespace = "payments"
	dataChannel   = "wechat-main"
)

// e2e is what the steps share.
type e2e struct {
	t       *testing.T
	tm      *timings
	cluster *kwokenv.Cluster
	k8s     client.Client
	helm    *helmRunner
	binDir  string
	workDir string
	pg      *testenv.Postgres
	redis   *testenv.RedisGroup

	operator    *localProcess
	operatorLog string
	data        *dataPlaneChannel
}

func newScheme(t testing.TB) *runtime.Scheme {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := callbackdv1alpha1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestPlatformOnKwok is the acceptance run of issue 7, step by step; a step that fails stops the
// run (later steps depend on it), and the cluster and every local process are removed whatever
// happened.
func TestPlatformOnKwok(t *testing.T) {
	e := &e2e{t: t, tm: newTimings(), workDir: t.TempDir()}
	t.Cleanup(func() { e.tm.report(t) })
	root := repoRoot(t)

	// The binaries build while the servers and the cluster start.
	e.binDir = filepath.Join(e.workDir, "bin")
	buildDone := make(chan error, 1)
	go func() {
		done := e.tm.track("go build ./cmd/operator ./cmd/callbackd (in parallel)")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		buildDone <- buildBinaries(ctx, root, e.binDir, "./cmd/operator", "./cmd/callbackd")
		done()
	}()
	e.helm = nil
	helmBinary(t) // installs ./bin/helm when missing

	done := e.tm.track("PostgreSQL + Redis (1 replica, 3 Sentinels) on loopback")
	e.pg = testenv.StartPostgres(t)
	e.redis = testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	done()

	done = e.tm.track("kwok cluster: kwokctl create cluster + 2 nodes Ready")
	e.cluster = kwokenv.Start(t, kwokenv.Options{Nodes: 2})
	done()
	t.Logf("cluster %s started in %v (kwokctl create cluster --runtime binary, 2 simulated nodes)", e.cluster.Name, e.cluster.StartDuration.Round(time.Millisecond))
	k8s, err := client.New(e.cluster.Config, client.Options{Scheme: newScheme(t)})
	if err != nil {
		t.Fatalf("client for the cluster: %v", err)
	}
	e.k8s = k8s
	e.helm = newHelm(t, e.cluster.Kubeconfig)

	done = e.tm.track("wait for the build")
	if err := <-buildDone; err != nil {
		t.Fatalf("build the binaries: %v", err)
	}
	done()

	steps := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"pre-provisioned volumes for the Redis StatefulSets", e.createVolumes},
		{"helm install (chart with samples)", e.helmInstall},
		{"operator runs locally as the chart's ServiceAccount", e.startOperator},
		{"data-plane channel from config/samples with test keys", e.applyDataChannel},
		{"chart samples reconciled: Job, Deployment, Redis, Ready", e.checkChartSamples},
		{"config/samples channel reconciled (HPA)", e.checkDataChannel},
		{"keys Secret rotation rolls the Deployment", e.rotateSecret},
		{"data plane: callbackd from the rendered config under a paysim storm", e.runDataPlane},
		{"rendered Redis/Sentinel config and start scripts on real redis-server", e.checkRedisBootstrap},
		{"server-side dry run of the rendered chart (default, full values)", e.dryRunChart},
		{"helm upgrade with changed values", e.helmUpgrade},
		{"deleting the channel removes its children", e.deleteDataChannel},
		{"helm uninstall leaves nothing behind", e.helmUninstall},
		{"operator used only what the chart's RBAC grants", e.checkOperatorLog},
	}
	for _, s := range steps {
		done := e.tm.track(s.name)
		ok := t.Run(s.name, s.fn)
		done()
		if !ok {
			t.Fatalf("step %q failed; the later steps depend on it", s.name)
		}
	}
}

// ctx returns a context bounded by d for one step.
func (e *e2e) ctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// pvLabel marks the volumes the test pre-provisions, standing in for a storage provisioner
// (kwok simulates pods, not storage): the Redis StatefulSets' claims bind to them.
const pvLabel = "e2e.callbackd.io/fixture"

func (e *e2e) createVolumes(t *testing.T) {
	ctx := e.ctx(t, time.Minute)
	// 3 channels x 3 Redis instances, plus a spare for a recreated claim.
	for i := range 10 {
		pv := &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("e2e-pv-%02d", i), Labels: map[string]string{pvLabel: "true"}},
			Spec: corev1.PersistentVolumeSpec{
				Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
				AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
				PersistentVolumeSource: corev1.PersistentVolumeSource{
					HostPath: &corev1.HostPathVolumeSource{Path: fmt.Sprintf("/var/lib/e2e-simulated/pv-%02d", i)},
				},
			},
		}
		if err := e.k8s.Create(ctx, pv); err != nil {
			t.Fatalf("create PersistentVolume %s: %v", pv.Name, err)
		}
	}
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = e.k8s.DeleteAllOf(ctx, &corev1.PersistentVolume{}, client.MatchingLabels{pvLabel: "true"})
	})
}

func (e *e2e) helmInstall(t *testing.T) {
	ctx := e.ctx(t, 6*time.Minute)
	out, err := e.helm.run(ctx, "install", releaseName, chartDir(t),
		"--namespace", releaseNamespace, "--create-namespace",
		"--set", "samples.enabled=true",
		"--wait", "--timeout", "5m")
	if err != nil {
		t.Fatalf("expected helm install to succeed, got: %v", err)
	}
	t.Logf("helm install:\n%s", firstLines(out, 8))
	dep := e.operatorDeployment(ctx, t)
	e.waitPodsRunning(t, releaseNamespace, dep.Spec.Selector.MatchLabels, int(ptr.Deref(dep.Spec.Replicas, 1)), 2*time.Minute)
}

// operatorDeployment is the chart's operator Deployment.
func (e *e2e) operatorDeployment(ctx context.Context, t *testing.T) *appsv1.Deployment {
	t.Helper()
	list := &appsv1.DeploymentList{}
	if err := e.k8s.List(ctx, list, client.InNamespace(releaseNamespace), client.MatchingLabels{
		"app.kubernetes.io/name": "callback-platform-operator", "app.kubernetes.io/instance": releaseName,
	}); err != nil {
		t.Fatalf("list the operator Deployment: %v", err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("expected one operator Deployment in %s, got %d", releaseNamespace, len(list.Items))
	}
	return &list.Items[0]
}

// waitPodsRunning waits until exactly want pods match the labels, all Running and Ready.
func (e *e2e) waitPodsRunning(t *testing.T, ns string, labels map[string]string, want int, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%d pods %v Running and Ready in %s", want, labels, ns), func(ctx context.Context) (bool, string) {
		pods := &corev1.PodList{}
		if err := e.k8s.List(ctx, pods, client.InNamespace(ns), client.MatchingLabels(labels)); err != nil {
			return false, err.Error()
		}
		running := 0
		var states []string
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				states = append(states, p.Name+"=Terminating")
				continue
			}
			states = append(states, p.Name+"="+string(p.Status.Phase))
			if p.Status.Phase == corev1.PodRunning && podReady(&p) {
				running++
			}
		}
		return running == want && len(states) == want, fmt.Sprintf("%d running of %v", running, states)
	})
}

// waitDeploymentPods waits until the Deployment is rolled out and exactly its desired number of
// pods run, re-reading the desired number each time (an HPA may move it meanwhile).
func (e *e2e) waitDeploymentPods(t *testing.T, key types.NamespacedName, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "Deployment "+key.Name+" with all its pods Running and Ready", func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		if err := e.k8s.Get(ctx, key, d); err != nil {
			return false, err.Error()
		}
		if ok, why := deploymentRolledOut(d); !ok {
			return false, why
		}
		want := int(ptr.Deref(d.Spec.Replicas, 1))
		pods := &corev1.PodList{}
		if err := e.k8s.List(ctx, pods, client.InNamespace(key.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
			return false, err.Error()
		}
		running := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(&p) {
				running++
			}
		}
		return running == want && len(pods.Items) == want, fmt.Sprintf("%d of %d pods running (want %d): %v", running, len(pods.Items), want, podPhases(pods.Items))
	})
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// channelState waits for a channel's children the way a person checks them after applying it.
type channelExpect struct {
	namespace, name string
	hpa             bool
}

// checkChannelChildren checks the migration Job completed through its simulated pod, the
// Deployment rolled out with every pod Running, and Service, PDB, (HPA), Redis and Sentinel
// StatefulSets exist with their pods Running.
func (e *e2e) checkChannelChildren(t *testing.T, x channelExpect) {
	t.Helper()
	pc := &callbackdv1alpha1.PaymentChannel{}
	key := types.NamespacedName{Namespace: x.namespace, Name: x.name}

	var jobName string
	eventually(t, time.Minute, "the operator to create the migration Job of "+x.name, func(ctx context.Context) (bool, string) {
		if err := e.k8s.Get(ctx, key, pc); err != nil {
			return false, err.Error()
		}
		jobName = pc.Status.MigrationJob
		if jobName == "" {
			return false, "status.migrationJob empty; conditions " + conditionsString(pc)
		}
		return true, ""
	})
	eventually(t, 2*time.Minute, "migration Job "+jobName+" to complete (its simulated pod Succeeded)", func(ctx context.Context) (bool, string) {
		job := &batchv1.Job{}
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: x.namespace, Name: jobName}, job); err != nil {
			return false, err.Error()
		}
		for _, c := range job.Status.Conditions {
			if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprintf("succeeded=%d active=%d failed=%d", job.Status.Succeeded, job.Status.Active, job.Status.Failed)
	})
	pods := &corev1.PodList{}
	ctx := e.ctx(t, time.Minute)
	if err := e.k8s.List(ctx, pods, client.InNamespace(x.namespace), client.MatchingLabels{"job-name": jobName}); err != nil {
		t.Fatalf("list the migration pods: %v", err)
	}
	if len(pods.Items) == 0 || pods.Items[0].Status.Phase != corev1.PodSucceeded {
		t.Errorf("expected the migration Job's pod Succeeded, got %d pods %v", len(pods.Items), podPhases(pods.Items))
	}

	depKey := types.NamespacedName{Namespace: x.namespace, Name: x.name + "-callbackd"}
	dep := &appsv1.Deployment{}
	eventually(t, 2*time.Minute, "Deployment "+depKey.Name+" rolled out", func(ctx context.Context) (bool, string) {
		if err := e.k8s.Get(ctx, depKey, dep); err != nil {
			return false, err.Error()
		}
		return deploymentRolledOut(dep)
	})
	e.waitDeploymentPods(t, depKey, time.Minute)

	for _, obj := range []client.Object{
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: x.name + "-callbackd"}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: x.name + "-callbackd"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: x.name + "-callbackd-config"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: x.name + "-redis"}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: x.name + "-sentinel"}},
	} {
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: x.namespace, Name: obj.GetName()}, obj); err != nil {
			t.Errorf("expected %T %s/%s, got: %v", obj, x.namespace, obj.GetName(), err)
		}
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	err := e.k8s.Get(ctx, types.NamespacedName{Namespace: x.namespace, Name: x.name + "-callbackd"}, hpa)
	switch {
	case x.hpa && err != nil:
		t.Errorf("expected HorizontalPodAutoscaler %s-callbackd, got: %v", x.name, err)
	case x.hpa && hpa.Spec.ScaleTargetRef.Name != depKey.Name:
		t.Errorf("expected the HPA to scale Deployment %s, got %s", depKey.Name, hpa.Spec.ScaleTargetRef.Name)
	case !x.hpa && !apierrors.IsNotFound(err):
		t.Errorf("expected no HPA for a channel without autoscaling, got err=%v", err)
	}
	for _, sts := range []string{x.name + "-redis", x.name + "-sentinel"} {
		s := &appsv1.StatefulSet{}
		eventually(t, 3*time.Minute, "StatefulSet "+sts+" ready", func(ctx context.Context) (bool, string) {
			if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: x.namespace, Name: sts}, s); err != nil {
				return false, err.Error()
			}
			want := ptr.Deref(s.Spec.Replicas, 1)
			return s.Status.ReadyReplicas == want && s.Status.ObservedGeneration >= s.Generation,
				fmt.Sprintf("%d/%d ready", s.Status.ReadyReplicas, want)
		})
		e.waitPodsRunning(t, x.namespace, s.Spec.Selector.MatchLabels, int(ptr.Deref(s.Spec.Replicas, 1)), time.Minute)
	}
}

func deploymentRolledOut(d *appsv1.Deployment) (bool, string) {
	want := ptr.Deref(d.Spec.Replicas, 1)
	s := d.Status
	ok := s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want && s.AvailableReplicas == want
	return ok, fmt.Sprintf("generation %d observed %d, replicas %d updated %d available %d (want %d)",
		d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want)
}

func podPhases(pods []corev1.Pod) []string {
	var out []string
	for _, p := range pods {
		out = append(out, p.Name+"="+string(p.Status.Phase))
	}
	return out
}

func conditionsString(pc *callbackdv1alpha1.PaymentChannel) string {
	var parts []string
	for _, c := range pc.Status.Conditions {
		parts = append(parts, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(parts, " ")
}

// waitCondition waits until the channel's condition typ has status (for the current generation).
func (e *e2e) waitCondition(t *testing.T, ns, name, typ string, status metav1.ConditionStatus, timeout time.Duration) *callbackdv1alpha1.PaymentChannel {
	t.Helper()
	pc := &callbackdv1alpha1.PaymentChannel{}
	eventually(t, timeout, fmt.Sprintf("channel %s/%s %s=%s", ns, name, typ, status), func(ctx context.Context) (bool, string) {
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, pc); err != nil {
			return false, err.Error()
		}
		c := meta.FindStatusCondition(pc.Status.Conditions, typ)
		return c != nil && c.Status == status && c.ObservedGeneration == pc.Generation, conditionsString(pc)
	})
	return pc
}

func (e *e2e) checkChartSamples(t *testing.T) {
	for _, name := range []string{"sample-wechat", "sample-alipay"} {
		e.checkChannelChildren(t, channelExpect{namespace: releaseNamespace, name: name})
		pc := e.waitCondition(t, releaseNamespace, name, callbackdv1alpha1.ConditionReady, metav1.ConditionTrue, 2*time.Minute)
		t.Logf("%s: %s", name, conditionsString(pc))
	}
}

// checkDataChannel checks the config/samples channel. It is autoscaled by an HPA on the pod
// metric callbackd_inflight; this cluster serves no custom metrics API, so the HPA reports
// ScalingActive=False, and the operator must say so (Scaling=False) while every other condition
// is True: Ready=False names Scaling alone.
func (e *e2e) checkDataChannel(t *testing.T) {
	e.checkChannelChildren(t, channelExpect{namespace: dataNamespace, name: dataChannel, hpa: true})
	for _, typ := range []string{callbackdv1alpha1.ConditionConfigValid, callbackdv1alpha1.ConditionSchemaMigrated,
		callbackdv1alpha1.ConditionRedisReady, callbackdv1alpha1.ConditionCallbackdAvailable} {
		e.waitCondition(t, dataNamespace, dataChannel, typ, metav1.ConditionTrue, 2*time.Minute)
	}
	pc := e.waitCondition(t, dataNamespace, dataChannel, callbackdv1alpha1.ConditionScaling, metav1.ConditionFalse, 2*time.Minute)
	ready := meta.FindStatusCondition(pc.Status.Conditions, callbackdv1alpha1.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || !strings.Contains(ready.Message, callbackdv1alpha1.ConditionScaling) ||
		strings.Contains(ready.Message, callbackdv1alpha1.ConditionCallbackdAvailable) {
		t.Errorf("expected Ready=False naming only Scaling (no custom metrics API for the HPA here), got %+v", ready)
	}
	t.Logf("%s: %s", dataChannel, conditionsString(pc))

	// The HPA owns the replica count: even without metrics it lifts the Deployment to its floor,
	// and the operator never writes it back.
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	key := types.NamespacedName{Namespace: dataNamespace, Name: dataChannel + "-callbackd"}
	eventually(t, time.Minute, "the HPA to hold the Deployment at its floor", func(ctx context.Context) (bool, string) {
		d := &appsv1.Deployment{}
		if err := e.k8s.Get(ctx, key, d); err != nil {
			return false, err.Error()
		}
		if err := e.k8s.Get(ctx, key, hpa); err != nil {
			return false, err.Error()
		}
		min := ptr.Deref(hpa.Spec.MinReplicas, 1)
		var conds []string
		for _, c := range hpa.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
		return ptr.Deref(d.Spec.Replicas, 1) >= min && hpa.Status.DesiredReplicas >= min,
			fmt.Sprintf("Deployment replicas %d, HPA min %d desired %d, conditions %v", ptr.Deref(d.Spec.Replicas, 1), min, hpa.Status.DesiredReplicas, conds)
	})
	e.waitDeploymentPods(t, key, time.Minute)
}

// rotateSecret adds a second WeChat Pay public key to the channel's public-keys Secret (the
// first half of a key rotation) and checks that the Deployment's pod template moves to a new
// secrets hash, with the same config hash, and rolls out.
func (e *e2e) rotateSecret(t *testing.T) {
	ctx := e.ctx(t, 3*time.Minute)
	depKey := types.NamespacedName{Namespace: dataNamespace, Name: dataChannel + "-callbackd"}
	before := &appsv1.Deployment{}
	if err := e.k8s.Get(ctx, depKey, before); err != nil {
		t.Fatal(err)
	}
	const hashKey, configKey = "callbackd.io/secrets-hash", "callbackd.io/config-hash"
	oldHash := before.Spec.Template.Annotations[hashKey]
	if oldHash == "" {
		t.Fatalf("expected the pod template annotation %s, got annotations %v", hashKey, before.Spec.Template.Annotations)
	}
	oldRS := e.replicaSetNames(ctx, t, before)

	secret := &corev1.Secret{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: e.data.publicKeysSecret}, secret); err != nil {
		t.Fatal(err)
	}
	serial, pemBytes := newPublicKeyPEM(t)
	secret.Data[serial+".pem"] = pemBytes
	started := time.Now()
	if err := e.k8s.Update(ctx, secret); err != nil {
		t.Fatalf("update Secret %s: %v", secret.Name, err)
	}
	after := &appsv1.Deployment{}
	eventually(t, time.Minute, "the pod template's "+hashKey+" to change", func(ctx context.Context) (bool, string) {
		if err := e.k8s.Get(ctx, depKey, after); err != nil {
			return false, err.Error()
		}
		h := after.Spec.Template.Annotations[hashKey]
		return h != oldHash, "still " + h
	})
	if got, want := after.Spec.Template.Annotations[configKey], before.Spec.Template.Annotations[configKey]; got != want {
		t.Errorf("expected the config hash unchanged by a key rotation (%s), got %s", want, got)
	}
	eventually(t, 2*time.Minute, "the rotated Deployment rolled out", func(ctx context.Context) (bool, string) {
		if err := e.k8s.Get(ctx, depKey, after); err != nil {
			return false, err.Error()
		}
		return deploymentRolledOut(after)
	})
	e.waitDeploymentPods(t, depKey, time.Minute)
	newRS := e.replicaSetNames(ctx, t, after)
	if !slices.ContainsFunc(newRS, func(n string) bool { return !slices.Contains(oldRS, n) }) {
		t.Errorf("expected a new ReplicaSet after the rotation, had %v, have %v", oldRS, newRS)
	}
	t.Logf("Secret %s rotated: secrets hash %s -> %s, new pods Running in %v (ReplicaSets %v -> %v)",
		secret.Name, oldHash, after.Spec.Template.Annotations[hashKey], time.Since(started).Round(time.Millisecond), oldRS, newRS)
}

func (e *e2e) replicaSetNames(ctx context.Context, t *testing.T, d *appsv1.Deployment) []string {
	t.Helper()
	list := &appsv1.ReplicaSetList{}
	if err := e.k8s.List(ctx, list, client.InNamespace(d.Namespace), client.MatchingLabels(d.Spec.Selector.MatchLabels)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, rs := range list.Items {
		names = append(names, rs.Name)
	}
	slices.Sort(names)
	return names
}

func (e *e2e) helmUpgrade(t *testing.T) {
	ctx := e.ctx(t, 6*time.Minute)
	if _, err := e.helm.run(ctx, "upgrade", releaseName, chartDir(t), "--namespace", releaseNamespace,
		"--reuse-values", "--set", "replicaCount=3", "--set", "operator.logLevel=DEBUG",
		"--set", "operator.maxConcurrentReconciles=2", "--wait", "--timeout", "5m"); err != nil {
		t.Fatalf("expected helm upgrade to succeed, got: %v", err)
	}
	dep := e.operatorDeployment(ctx, t)
	if got := ptr.Deref(dep.Spec.Replicas, 0); got != 3 {
		t.Errorf("expected the operator Deployment at 3 replicas after the upgrade, got %d", got)
	}
	args := dep.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{"--log-level=DEBUG", "--max-concurrent-reconciles=2"} {
		if !slices.Contains(args, want) {
			t.Errorf("expected the upgraded operator args to hold %s, got %v", want, args)
		}
	}
	e.waitPodsRunning(t, releaseNamespace, dep.Spec.Selector.MatchLabels, 3, 2*time.Minute)
	out, err := e.helm.run(ctx, "history", releaseName, "--namespace", releaseNamespace, "--output", "json")
	if err != nil {
		t.Fatal(err)
	}
	var hist []struct {
		Revision int    `json:"revision"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal([]byte(out), &hist); err != nil {
		t.Fatalf("decode helm history: %v\n%s", err, out)
	}
	if len(hist) != 2 || hist[1].Revision != 2 || hist[1].Status != "deployed" {
		t.Errorf("expected revision 2 deployed, got %+v", hist)
	}
	// The samples the release owns stay Ready across the upgrade.
	for _, name := range []string{"sample-wechat", "sample-alipay"} {
		e.waitCondition(t, releaseNamespace, name, callbackdv1alpha1.ConditionReady, metav1.ConditionTrue, time.Minute)
	}
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func writeFileT(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
}
