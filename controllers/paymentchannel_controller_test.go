package controllers

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// childLists are the kinds the operator creates; every object of these kinds in a test
// namespace must be controlled by the channel.
func childLists() map[string]client.ObjectList {
	return map[string]client.ObjectList{
		"ConfigMap":               &corev1.ConfigMapList{},
		"Service":                 &corev1.ServiceList{},
		"ServiceAccount":          &corev1.ServiceAccountList{},
		"Deployment":              &appsv1.DeploymentList{},
		"StatefulSet":             &appsv1.StatefulSetList{},
		"Job":                     &batchv1.JobList{},
		"PodDisruptionBudget":     &policyv1.PodDisruptionBudgetList{},
		"NetworkPolicy":           &networkingv1.NetworkPolicyList{},
		"HorizontalPodAutoscaler": &autoscalingv2.HorizontalPodAutoscalerList{},
	}
}

// children returns "Kind/name" → object for every object of the child kinds in ns, skipping
// what Kubernetes itself puts in every namespace.
func children(t *testing.T, c client.Client, ns string) map[string]client.Object {
	t.Helper()
	out := map[string]client.Object{}
	for kind, list := range childLists() {
		if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			t.Fatalf("list %s: %v", kind, err)
		}
		items, err := meta.ExtractList(list)
		if err != nil {
			t.Fatalf("extract %s: %v", kind, err)
		}
		for _, item := range items {
			obj := item.(client.Object)
			if kind == "ConfigMap" && obj.GetName() == "kube-root-ca.crt" || kind == "ServiceAccount" && obj.GetName() == "default" {
				continue
			}
			out[kind+"/"+obj.GetName()] = obj
		}
	}
	return out
}

// getChannel re-reads a channel.
func getChannel(t *testing.T, c client.Client, ns, name string) *callbackdv1alpha1.PaymentChannel {
	t.Helper()
	pc := &callbackdv1alpha1.PaymentChannel{}
	pc.Namespace, pc.Name = ns, name
	get(t, c, pc)
	return pc
}

// setJobStatus plays the Job controller, which envtest does not run.
func setJobStatus(t *testing.T, c client.Client, ns, name string, succeed bool) {
	t.Helper()
	job := &batchv1.Job{}
	job.Namespace, job.Name = ns, name
	get(t, c, job)
	now := metav1.Now()
	start := metav1.NewTime(now.Add(-10 * time.Second))
	job.Status.StartTime = &start
	if succeed {
		job.Status.Succeeded = 1
		job.Status.CompletionTime = &now
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"},
			{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "CompletionsReached", Message: "Reached expected number of succeeded pods"},
		}
	} else {
		job.Status.Failed = migrationBackoffLimit + 1
		job.Status.Conditions = []batchv1.JobCondition{
			{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
			{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, LastProbeTime: now, LastTransitionTime: now, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"},
		}
	}
	if err := c.Status().Update(context.Background(), job); err != nil {
		t.Fatalf("set status of Job %s (succeed=%v): %v", name, succeed, err)
	}
}

// condition returns a channel's condition or fails.
func condition(t *testing.T, pc *callbackdv1alpha1.PaymentChannel, typ string) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(pc.Status.Conditions, typ)
	if c == nil {
		t.Fatalf("condition %s: expected it in the status, got conditions %+v", typ, pc.Status.Conditions)
	}
	return *c
}

func expectCondition(t *testing.T, pc *callbackdv1alpha1.PaymentChannel, typ string, status metav1.ConditionStatus, reason string) metav1.Condition {
	t.Helper()
	c := condition(t, pc, typ)
	if c.Status != status || c.Reason != reason {
		t.Fatalf("condition %s: expected %s/%s, got %s/%s (%s)", typ, status, reason, c.Status, c.Reason, c.Message)
	}
	if c.ObservedGeneration != pc.Generation {
		t.Fatalf("condition %s: expected observedGeneration %d, got %d", typ, pc.Generation, c.ObservedGeneration)
	}
	return c
}

// deploymentImage returns the callbackd image of the channel's Deployment.
func deploymentImage(t *testing.T, c client.Client, pc *callbackdv1alpha1.PaymentChannel) string {
	t.Helper()
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = pc.Namespace, callbackdName(pc)
	get(t, c, d)
	return d.Spec.Template.Spec.Containers[0].Image
}

// startChannel creates the Secrets and the channel, reconciles, completes the first migration
// and reconciles again, so that the whole topology exists.
func startChannel(t *testing.T, c client.Client, r *PaymentChannelReconciler, pc *callbackdv1alpha1.PaymentChannel) *callbackdv1alpha1.PaymentChannel {
	t.Helper()
	createSecrets(t, c, pc.Namespace)
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}
	reconcileOnce(t, r, pc)
	got := getChannel(t, c, pc.Namespace, pc.Name)
	if got.Status.MigrationJob == "" {
		t.Fatalf("status.migrationJob: expected the first migration Job's name, got none")
	}
	setJobStatus(t, c, pc.Namespace, got.Status.MigrationJob, true)
	reconcileOnce(t, r, pc)
	return getChannel(t, c, pc.Namespace, pc.Name)
}

// TestReconcileCreatesEveryChildWithOwnerReferences is acceptance points 2 and 3: a reconcile
// creates every child, each controlled by the channel (so Kubernetes' garbage collector removes
// them with it: envtest runs no collector, hence the owner-reference check), and deleting the
// channel is not blocked by any finalizer.
func TestReconcileCreatesEveryChildWithOwnerReferences(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	pc := newChannel(ns, "wechat")
	pc.Spec.Autoscaling.Mode = callbackdv1alpha1.AutoscalingHPA
	createSecrets(t, c, ns)
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}

	// First pass: everything but the Deployment; the Deployment waits for the migration.
	reconcileOnce(t, r, pc)
	got := getChannel(t, c, ns, "wechat")
	expectCondition(t, got, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionTrue, ReasonConfigRendered)
	expectCondition(t, got, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationRunning)
	expectCondition(t, got, callbackdv1alpha1.ConditionCallbackdAvailable, metav1.ConditionFalse, ReasonWaitingForMigration)
	if _, ok := children(t, c, ns)["Deployment/wechat-callbackd"]; ok {
		t.Fatalf("Deployment: expected none before the first migration completed, got one")
	}

	setJobStatus(t, c, ns, got.Status.MigrationJob, true)
	reconcileOnce(t, r, pc)
	got = getChannel(t, c, ns, "wechat")

	want := []string{
		"ConfigMap/wechat-callbackd-config",
		"ConfigMap/wechat-redis-config",
		"Service/wechat-callbackd",
		"Service/wechat-redis",
		"Service/wechat-sentinel",
		"ServiceAccount/wechat-callbackd",
		"Deployment/wechat-callbackd",
		"StatefulSet/wechat-redis",
		"StatefulSet/wechat-sentinel",
		"Job/" + got.Status.MigrationJob,
		"PodDisruptionBudget/wechat-callbackd",
		"PodDisruptionBudget/wechat-redis",
		"PodDisruptionBudget/wechat-sentinel",
		"NetworkPolicy/wechat-callbackd",
		"NetworkPolicy/wechat-redis",
		"HorizontalPodAutoscaler/wechat-callbackd",
	}
	all := children(t, c, ns)
	for _, key := range want {
		if _, ok := all[key]; !ok {
			t.Errorf("child %s: expected it to exist, got none", key)
		}
	}
	if len(all) != len(want) {
		var keys []string
		for k := range all {
			keys = append(keys, k)
		}
		t.Errorf("children: expected exactly %d, got %d: %v", len(want), len(all), keys)
	}
	for key, obj := range all {
		ref := metav1.GetControllerOf(obj)
		if ref == nil || ref.UID != got.UID || ref.Kind != "PaymentChannel" || !ptr.Deref(ref.BlockOwnerDeletion, false) {
			t.Errorf("child %s: expected a blocking controller reference to PaymentChannel %s (uid %s), got %+v", key, got.Name, got.UID, ref)
		}
	}
	if len(got.Finalizers) != 0 {
		t.Errorf("finalizers: expected none (nothing outside the cluster to clean up), got %v", got.Finalizers)
	}

	if err := c.Delete(context.Background(), got); err != nil {
		t.Fatalf("delete channel: %v", err)
	}
	eventually(t, "channel deleted", 10*time.Second, func() (bool, string) {
		err := c.Get(context.Background(), client.ObjectKeyFromObject(got), &callbackdv1alpha1.PaymentChannel{})
		return apierrors.IsNotFound(err), fmt.Sprintf("get: %v", err)
	})
	// A reconcile of the deleted channel is a no-op, not an error.
	reconcileOnce(t, r, pc)
}

// TestSecondReconcileChangesNothing: reconciling an unchanged channel writes nothing, so no
// resourceVersion moves (server-side apply of identical intent is a no-op, and an unchanged
// status is not written).
func TestSecondReconcileChangesNothing(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	for _, mode := range []callbackdv1alpha1.AutoscalingMode{callbackdv1alpha1.AutoscalingHPA, callbackdv1alpha1.AutoscalingOff} {
		pc := newChannel(ns, "steady-"+string(mode))
		pc.Spec.Autoscaling.Mode = mode
		if mode == callbackdv1alpha1.AutoscalingHPA {
			startChannel(t, c, r, pc)
		} else {
			// startChannel created the Secrets for the first channel; create only this one.
			if err := c.Create(context.Background(), pc); err != nil {
				t.Fatalf("create channel: %v", err)
			}
			reconcileOnce(t, r, pc)
			setJobStatus(t, c, ns, getChannel(t, c, ns, pc.Name).Status.MigrationJob, true)
			reconcileOnce(t, r, pc)
		}
	}

	before := map[string]string{}
	for key, obj := range children(t, c, ns) {
		before[key] = obj.GetResourceVersion()
	}
	if len(before) < 16 {
		t.Fatalf("children before the second reconcile: expected the full topology of two channels, got %d objects", len(before))
	}
	channelsBefore := map[string]string{}
	for _, name := range []string{"steady-off", "steady-hpa"} {
		channelsBefore[name] = getChannel(t, c, ns, name).ResourceVersion
	}

	for _, name := range []string{"steady-off", "steady-hpa"} {
		reconcileOnce(t, r, &callbackdv1alpha1.PaymentChannel{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}})
	}

	after := children(t, c, ns)
	if len(after) != len(before) {
		t.Fatalf("children: expected the same %d objects, got %d", len(before), len(after))
	}
	for key, obj := range after {
		if obj.GetResourceVersion() != before[key] {
			t.Errorf("%s: expected resourceVersion %s to stay, got %s", key, before[key], obj.GetResourceVersion())
		}
	}
	for name, rv := range channelsBefore {
		if got := getChannel(t, c, ns, name).ResourceVersion; got != rv {
			t.Errorf("PaymentChannel %s: expected resourceVersion %s to stay, got %s", name, rv, got)
		}
	}
}

// TestAutoscalerOwnsReplicas: with autoscaling on, a replica count the HPA set survives
// reconciles, and switching autoscaling on does not reset the running count to 1.
func TestAutoscalerOwnsReplicas(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)

	pc := newChannel(ns, "scaled")
	pc.Spec.Callbackd.Replicas = ptr.To[int32](3)
	pc = startChannel(t, c, r, pc)
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, callbackdName(pc)
	get(t, c, d)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Fatalf("replicas with autoscaling off: expected spec.callbackd.replicas 3, got %d", got)
	}

	// Switch autoscaling on: the count stays where it was until the HPA moves it.
	pc.Spec.Autoscaling.Mode = callbackdv1alpha1.AutoscalingHPA
	if err := c.Update(context.Background(), pc); err != nil {
		t.Fatalf("switch autoscaling on: %v", err)
	}
	reconcileOnce(t, r, pc)
	get(t, c, d)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Fatalf("replicas after switching autoscaling on: expected 3 kept, got %d", got)
	}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{}
	hpa.Namespace, hpa.Name = ns, callbackdName(pc)
	get(t, c, hpa)
	expectCondition(t, getChannel(t, c, ns, pc.Name), callbackdv1alpha1.ConditionScaling, metav1.ConditionTrue, ReasonHPAConfigured)

	// The HPA controller reports it has no metrics: Scaling follows.
	now := metav1.Now()
	hpa.Status.Conditions = []autoscalingv2.HorizontalPodAutoscalerCondition{
		{Type: autoscalingv2.AbleToScale, Status: corev1.ConditionTrue, Reason: "SucceededGetScale", LastTransitionTime: now},
		{Type: autoscalingv2.ScalingActive, Status: corev1.ConditionFalse, Reason: "FailedGetResourceMetric", Message: "no metrics returned", LastTransitionTime: now},
	}
	if err := c.Status().Update(context.Background(), hpa); err != nil {
		t.Fatalf("set HPA status: %v", err)
	}
	reconcileOnce(t, r, pc)
	cond := expectCondition(t, getChannel(t, c, ns, pc.Name), callbackdv1alpha1.ConditionScaling, metav1.ConditionFalse, ReasonHPAInactive)
	if !strings.Contains(cond.Message, "FailedGetResourceMetric") {
		t.Fatalf("Scaling message: expected the HPA's reason FailedGetResourceMetric, got %q", cond.Message)
	}

	// The HPA scales to 7 through the scale subresource, as the HPA controller does.
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 7}}
	if err := c.SubResource("scale").Update(context.Background(), d, client.WithSubResourceBody(scale)); err != nil {
		t.Fatalf("scale like the HPA: %v", err)
	}
	for range 2 {
		reconcileOnce(t, r, pc)
	}
	get(t, c, d)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 7 {
		t.Fatalf("replicas after reconciles: expected the HPA's 7 left alone, got %d", got)
	}
	if ownsReplicas(d, FieldOwner) {
		t.Fatalf("managed fields: expected %s not to own spec.replicas while autoscaling is on", FieldOwner)
	}

	// Switching back off restores the declared count and removes the HPA.
	pc = getChannel(t, c, ns, pc.Name)
	pc.Spec.Autoscaling.Mode = callbackdv1alpha1.AutoscalingOff
	if err := c.Update(context.Background(), pc); err != nil {
		t.Fatalf("switch autoscaling off: %v", err)
	}
	reconcileOnce(t, r, pc)
	get(t, c, d)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 3 {
		t.Fatalf("replicas after switching autoscaling off: expected 3, got %d", got)
	}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(hpa), hpa); !apierrors.IsNotFound(err) {
		t.Fatalf("HPA after switching autoscaling off: expected it deleted, got %v", err)
	}
}

// TestKEDAUnavailableFallsBack: asking for KEDA on a cluster without it creates no autoscaler,
// holds minReplicas, and says so in the Scaling condition.
func TestKEDAUnavailableFallsBack(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	pc := newChannel(ns, "keda")
	pc.Spec.Autoscaling = callbackdv1alpha1.AutoscalingSpec{Mode: callbackdv1alpha1.AutoscalingKEDA, MinReplicas: 4, MaxReplicas: 8}
	got := startChannel(t, c, r, pc)
	expectCondition(t, got, callbackdv1alpha1.ConditionScaling, metav1.ConditionFalse, ReasonKEDAUnavailable)
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, callbackdName(pc)
	get(t, c, d)
	if got := ptr.Deref(d.Spec.Replicas, -1); got != 4 {
		t.Fatalf("replicas without KEDA: expected minReplicas 4, got %d", got)
	}
	if _, ok := children(t, c, ns)["HorizontalPodAutoscaler/"+callbackdName(pc)]; ok {
		t.Fatalf("HPA: expected none when KEDA was asked for, got one")
	}
}

// TestMigrationGate is the migration part of acceptance point 2: a new image rolls only after
// its migration Job completes, and a failed Job keeps the old Deployment with
// SchemaMigrated=False, the Job's reason, and an Event.
func TestMigrationGate(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	pc := startChannel(t, c, r, newChannel(ns, "gate"))
	expectCondition(t, pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionTrue, ReasonMigrationComplete)
	if got := deploymentImage(t, c, pc); got != testImageV1 {
		t.Fatalf("image: expected %s, got %s", testImageV1, got)
	}
	firstJob := pc.Status.MigrationJob

	// v2: a new Job; the Deployment keeps v1 while it runs.
	pc.Spec.Callbackd.Image = testImageV2
	if err := c.Update(context.Background(), pc); err != nil {
		t.Fatalf("update image: %v", err)
	}
	reconcileOnce(t, r, pc)
	pc = getChannel(t, c, ns, "gate")
	if pc.Status.MigrationJob == firstJob {
		t.Fatalf("migration Job for %s: expected a new Job, got the old %s", testImageV2, firstJob)
	}
	expectCondition(t, pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationRunning)
	if got := deploymentImage(t, c, pc); got != testImageV1 {
		t.Fatalf("image while migrating: expected %s kept, got %s", testImageV1, got)
	}
	if pc.Status.ObservedGeneration != pc.Generation {
		t.Fatalf("observedGeneration: expected %d, got %d", pc.Generation, pc.Status.ObservedGeneration)
	}
	job := &batchv1.Job{}
	job.Namespace, job.Name = ns, pc.Status.MigrationJob
	get(t, c, job)
	if got := job.Spec.Template.Spec.Containers[0].Image; got != testImageV2 {
		t.Fatalf("migration Job image: expected %s, got %s", testImageV2, got)
	}
	if got := job.Spec.Template.Spec.Containers[0].Args; strings.Join(got, " ") != "migrate --config "+configFilePath {
		t.Fatalf("migration Job args: expected [migrate --config %s], got %v", configFilePath, got)
	}

	// Complete: the Deployment rolls to v2 and the old Job is cleaned up.
	setJobStatus(t, c, ns, pc.Status.MigrationJob, true)
	reconcileOnce(t, r, pc)
	pc = getChannel(t, c, ns, "gate")
	expectCondition(t, pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionTrue, ReasonMigrationComplete)
	if got := deploymentImage(t, c, pc); got != testImageV2 {
		t.Fatalf("image after the migration completed: expected %s, got %s", testImageV2, got)
	}
	if pc.Status.Image != testImageV2 {
		t.Fatalf("status.image: expected %s, got %s", testImageV2, pc.Status.Image)
	}
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: firstJob}, &batchv1.Job{}); !apierrors.IsNotFound(err) {
		t.Fatalf("first migration Job: expected it deleted once a newer one completed, got %v", err)
	}

	// v3 fails: v2 keeps serving; the condition carries the Job's reason; an Event is emitted.
	pc.Spec.Callbackd.Image = "registry.example/callbackd:v3"
	if err := c.Update(context.Background(), pc); err != nil {
		t.Fatalf("update image: %v", err)
	}
	reconcileOnce(t, r, pc)
	pc = getChannel(t, c, ns, "gate")
	failedJob := pc.Status.MigrationJob
	setJobStatus(t, c, ns, failedJob, false)
	reconcileOnce(t, r, pc)
	pc = getChannel(t, c, ns, "gate")
	cond := expectCondition(t, pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationFailed)
	if !strings.Contains(cond.Message, "BackoffLimitExceeded") || !strings.Contains(cond.Message, failedJob) {
		t.Fatalf("SchemaMigrated message: expected the Job %s and its reason BackoffLimitExceeded, got %q", failedJob, cond.Message)
	}
	expectCondition(t, pc, callbackdv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonMigrationFailed)
	if got := deploymentImage(t, c, pc); got != testImageV2 {
		t.Fatalf("image after a failed migration: expected %s kept, got %s", testImageV2, got)
	}
	eventually(t, "MigrationFailed Event", 10*time.Second, func() (bool, string) {
		list := &eventsv1.EventList{}
		if err := c.List(context.Background(), list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Reason == ReasonMigrationFailed && e.Regarding.Name == "gate" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none a MigrationFailed warning about gate", len(list.Items))
	})
}

// TestMissingSecretStopsTheRollout: a channel whose Secret is missing reports ConfigValid=False
// naming the Secret (never its content) and creates no workload.
func TestMissingSecretStopsTheRollout(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	pc := newChannel(ns, "nosecret")
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}
	reconcileOnce(t, r, pc)
	got := getChannel(t, c, ns, "nosecret")
	cond := expectCondition(t, got, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionFalse, ReasonSecretNotFound)
	if !strings.Contains(cond.Message, `"db"`) && !strings.Contains(cond.Message, `"wechat-keys"`) {
		t.Fatalf("ConfigValid message: expected the missing Secret's name, got %q", cond.Message)
	}
	expectCondition(t, got, callbackdv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonSecretNotFound)
	if all := children(t, c, ns); len(all) != 0 {
		t.Fatalf("children: expected none while a Secret is missing, got %d", len(all))
	}
}
