package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// ScaledObjectDiscovery tells whether KEDA's ScaledObject kind is served by the cluster.
type ScaledObjectDiscovery interface {
	ScaledObjectsAvailable(ctx context.Context) (bool, error)
}

// RESTMapperDiscovery finds ScaledObject through a REST mapper (the manager's, which refreshes
// on a miss, so that installing KEDA after the operator is noticed).
type RESTMapperDiscovery struct {
	Mapper meta.RESTMapper
}

// ScaledObjectsAvailable reports whether the mapper knows keda.sh/v1alpha1 ScaledObject.
func (d RESTMapperDiscovery) ScaledObjectsAvailable(context.Context) (bool, error) {
	_, err := d.Mapper.RESTMapping(ScaledObjectGVK.GroupKind(), ScaledObjectGVK.Version)
	if meta.IsNoMatchError(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discover %s: %w", ScaledObjectGVK.Kind, err)
	}
	return true, nil
}

// PaymentChannelReconciler makes the cluster match each PaymentChannel.
type PaymentChannelReconciler struct {
	// Client reads cached objects and writes with server-side apply.
	Client client.Client
	// APIReader reads Secrets directly from the API server (they are watched by metadata
	// only, never cached in full).
	APIReader client.Reader
	// Recorder emits Events on the PaymentChannel.
	Recorder events.EventRecorder
	// Discovery finds KEDA; nil means KEDA is never available.
	Discovery ScaledObjectDiscovery
	// MigrationPollInterval requeues a channel whose migration Job is running, as a safety net
	// beside the Job watch. Zero means 30 s.
	MigrationPollInterval time.Duration
}

// reconcileState carries what the sub-reconcilers computed for the later ones.
type reconcileState struct {
	pc *callbackdv1alpha1.PaymentChannel

	configData   []byte
	configHash   string
	secretsHash  string
	databaseHash string

	// migrated is true when the migration Job of the desired image completed; the Deployment
	// is written only then (its existing revision keeps serving meanwhile).
	migrated bool
	// autoscaled is true when an autoscaler owns the replica count.
	autoscaled bool
	// kedaAvailable is true when the cluster serves ScaledObject.
	kedaAvailable bool
}

// subReconciler is one named step; it returns stop to skip the remaining steps (the status is
// still written) and a non-zero result to requeue.
type subReconciler struct {
	name string
	fn   func(ctx context.Context, st *reconcileState) (res ctrl.Result, stop bool, err error)
}

func (r *PaymentChannelReconciler) steps() []subReconciler {
	return []subReconciler{
		{"config", r.reconcileConfig},
		{"callbackd-base", r.reconcileCallbackdBase},
		{"redis", r.reconcileRedis},
		{"migration", r.reconcileMigration},
		{"deployment", r.reconcileDeployment},
		{"autoscaling", r.reconcileAutoscaling},
	}
}

// +kubebuilder:rbac:groups=callbackd.io,resources=paymentchannels,verbs=get;list;watch
// +kubebuilder:rbac:groups=callbackd.io,resources=paymentchannels/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=callbackd.io,resources=paymentchannels/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=configmaps;services;serviceaccounts,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=autoscaling,resources=horizontalpodautoscalers,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=keda.sh,resources=scaledobjects,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reads the channel, leaves a deleted one to the garbage collector (every child has
// the channel as its controlling owner; nothing outside the cluster needs cleaning, so there is
// no finalizer), runs the sub-reconcilers in order and writes the status once.
func (r *PaymentChannelReconciler) Reconcile(ctx context.Context, req reconcile.Request) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	original := &callbackdv1alpha1.PaymentChannel{}
	if err := r.Client.Get(ctx, req.NamespacedName, original); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !original.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	st := &reconcileState{pc: original.DeepCopy()}

	var (
		result  ctrl.Result
		stepErr error
	)
	for _, step := range r.steps() {
		res, stop, err := step.fn(ctx, st)
		if err != nil {
			stepErr = fmt.Errorf("reconcile %s: %w", step.name, err)
			logger.Error(err, "sub-reconciler failed", "step", step.name)
			break
		}
		if res.RequeueAfter > 0 && (result.RequeueAfter == 0 || res.RequeueAfter < result.RequeueAfter) {
			result.RequeueAfter = res.RequeueAfter
		}
		if stop {
			logger.V(1).Info("sub-reconciler stopped the pass", "step", step.name)
			break
		}
	}
	summarizeReady(st.pc)
	if stepErr != nil {
		setCondition(st.pc, callbackdv1alpha1.ConditionReady, metav1.ConditionFalse, ReasonReconcileError, "%v", stepErr)
	}
	if err := patchStatus(ctx, r.Client, original, st.pc); err != nil {
		if apierrors.IsConflict(err) {
			// Someone wrote the channel meanwhile; come back soon with fresh state.
			return ctrl.Result{RequeueAfter: time.Second}, nil
		}
		return result, errors.Join(stepErr, err)
	}
	return result, stepErr
}

// apply writes one child with server-side apply under the operator's field owner, taking over
// fields another manager set (the operator is the source of truth for what it declares).
func (r *PaymentChannelReconciler) apply(ctx context.Context, obj runtime.ApplyConfiguration) error {
	if err := r.Client.Apply(ctx, obj, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	return nil
}

// reconcileConfig reads the referenced Secrets and renders and validates the callbackd
// configuration. A missing Secret or an invalid configuration stops the pass: nothing is rolled
// out that callbackd would refuse.
func (r *PaymentChannelReconciler) reconcileConfig(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	secretsHash, err := hashSecrets(ctx, r.APIReader, pc, mountsFor(pc).all)
	if ref, ok := asSecretReference(err); ok {
		setCondition(pc, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionFalse, ref.reason, "%s", ref.msg)
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, err
	}
	dbHash, err := hashSecrets(ctx, r.APIReader, pc, []secretMount{*mountsFor(pc).database})
	if err != nil {
		return ctrl.Result{}, true, err
	}
	data, configHash, err := renderConfig(pc)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if err := validateRenderedConfig(data); err != nil {
		setCondition(pc, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionFalse, ReasonInvalidConfig,
			"callbackd would refuse the rendered configuration: %v", err)
		return ctrl.Result{}, true, nil
	}
	st.configData, st.configHash, st.secretsHash, st.databaseHash = data, configHash, secretsHash, dbHash
	setCondition(pc, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionTrue, ReasonConfigRendered,
		"configuration %s rendered from the spec and %d referenced Secrets", configHash, len(referencedSecretNames(pc)))

	if r.Discovery != nil {
		if st.kedaAvailable, err = r.Discovery.ScaledObjectsAvailable(ctx); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	switch pc.Spec.Autoscaling.Mode {
	case callbackdv1alpha1.AutoscalingHPA:
		st.autoscaled = true
	case callbackdv1alpha1.AutoscalingKEDA:
		st.autoscaled = st.kedaAvailable
	}
	return ctrl.Result{}, false, nil
}

// reconcileCallbackdBase applies the children that need no gate: the ServiceAccount, Service,
// PodDisruptionBudget, NetworkPolicy and the rendered ConfigMap. The ConfigMap may change under
// running pods: they read it at start, and the Deployment's config-hash annotation moves only
// when the Deployment itself is allowed to roll.
func (r *PaymentChannelReconciler) reconcileCallbackdBase(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	for _, obj := range []runtime.ApplyConfiguration{
		buildServiceAccount(pc),
		buildCallbackdService(pc),
		buildCallbackdPDB(pc),
		buildCallbackdNetworkPolicy(pc),
		buildConfigMap(pc, st.configData),
	} {
		if err := r.apply(ctx, obj); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	return ctrl.Result{}, false, nil
}

// reconcileRedis applies the managed Sentinel topology (or removes it when the channel no
// longer manages one) and reports RedisReady. It never touches who is master: Sentinel decides.
func (r *PaymentChannelReconciler) reconcileRedis(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	managedObjects := []client.Object{
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: redisName(pc), Namespace: pc.Namespace}},
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: sentinelName(pc), Namespace: pc.Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: redisName(pc), Namespace: pc.Namespace}},
		&corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: sentinelName(pc), Namespace: pc.Namespace}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: redisName(pc), Namespace: pc.Namespace}},
		&policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: sentinelName(pc), Namespace: pc.Namespace}},
		&networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: redisName(pc), Namespace: pc.Namespace}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: redisConfigName(pc), Namespace: pc.Namespace}},
	}
	if pc.Spec.Redis.Mode != callbackdv1alpha1.RedisManaged {
		for _, obj := range managedObjects {
			if err := r.deleteOwned(ctx, pc, obj); err != nil {
				return ctrl.Result{}, true, err
			}
		}
		if pc.Spec.Redis.Mode == callbackdv1alpha1.RedisExternal {
			setCondition(pc, callbackdv1alpha1.ConditionRedisReady, metav1.ConditionTrue, ReasonRedisExternal, "Redis is external; callbackd skips the Redis gate whenever it is unreachable")
		} else {
			setCondition(pc, callbackdv1alpha1.ConditionRedisReady, metav1.ConditionTrue, ReasonRedisDisabled, "Redis is disabled; the database gates alone keep exactly-once")
		}
		return ctrl.Result{}, false, nil
	}
	for _, obj := range []runtime.ApplyConfiguration{
		buildRedisConfigMap(pc),
		buildHeadlessService(pc, redisName(pc), ComponentRedis, redisPort),
		buildHeadlessService(pc, sentinelName(pc), ComponentSentinel, sentinelPort),
		buildRedisStatefulSet(pc),
		buildSentinelStatefulSet(pc),
		buildRedisPDB(pc, redisName(pc), ComponentRedis),
		buildRedisPDB(pc, sentinelName(pc), ComponentSentinel),
		buildRedisNetworkPolicy(pc),
	} {
		if err := r.apply(ctx, obj); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	var notReady []string
	for _, name := range []string{redisName(pc), sentinelName(pc)} {
		sts := &appsv1.StatefulSet{}
		if err := r.Client.Get(ctx, types.NamespacedName{Namespace: pc.Namespace, Name: name}, sts); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("get StatefulSet %s: %w", name, err)
		}
		want := ptr.Deref(sts.Spec.Replicas, 1)
		if sts.Status.ObservedGeneration < sts.Generation || sts.Status.ReadyReplicas < want {
			notReady = append(notReady, fmt.Sprintf("%s %d/%d ready", name, sts.Status.ReadyReplicas, want))
		}
	}
	if len(notReady) > 0 {
		setCondition(pc, callbackdv1alpha1.ConditionRedisReady, metav1.ConditionFalse, ReasonRedisProgressing, "%v", notReady)
	} else {
		setCondition(pc, callbackdv1alpha1.ConditionRedisReady, metav1.ConditionTrue, ReasonRedisReady, "Redis and Sentinel are ready")
	}
	return ctrl.Result{}, false, nil
}

// reconcileMigration runs the migration Job of the desired (database, image) pair and decides
// whether the Deployment may move: only once that Job completed. A failed Job leaves the running
// Deployment alone, sets SchemaMigrated=False with the Job's reason and emits an Event.
func (r *PaymentChannelReconciler) reconcileMigration(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	image := pc.Spec.Callbackd.Image
	desired, err := buildMigrationJob(pc, image, st.databaseHash)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	name := *desired.Name
	pc.Status.MigrationJob = name

	job := &batchv1.Job{}
	err = r.Client.Get(ctx, types.NamespacedName{Namespace: pc.Namespace, Name: name}, job)
	switch {
	case apierrors.IsNotFound(err):
		if err := r.apply(ctx, desired); err != nil {
			return ctrl.Result{}, true, err
		}
		log.FromContext(ctx).Info("started schema migration", "job", name, "image", image)
		setCondition(pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationRunning, "migration Job %s for image %s started", name, image)
		return ctrl.Result{RequeueAfter: r.migrationPoll()}, false, nil
	case err != nil:
		return ctrl.Result{}, true, fmt.Errorf("get migration Job %s: %w", name, err)
	}

	state, cond := jobState(job)
	switch state {
	case migrationComplete:
		st.migrated = true
		pc.Status.Image = image
		setCondition(pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionTrue, ReasonMigrationComplete, "migration Job %s for image %s completed", name, image)
		return ctrl.Result{}, false, r.deleteStaleMigrations(ctx, pc, name)
	case migrationFailed:
		msg := fmt.Sprintf("migration Job %s for image %s failed (%s): %s; the previous Deployment keeps serving", name, image, cond.Reason, cond.Message)
		prev := meta.FindStatusCondition(pc.Status.Conditions, callbackdv1alpha1.ConditionSchemaMigrated)
		if prev == nil || prev.Reason != ReasonMigrationFailed || prev.Message != msg {
			if r.Recorder != nil {
				r.Recorder.Eventf(pc, job, corev1.EventTypeWarning, ReasonMigrationFailed, "Migrate", "%s", msg)
			}
		}
		setCondition(pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationFailed, "%s", msg)
		return ctrl.Result{}, false, nil
	default:
		setCondition(pc, callbackdv1alpha1.ConditionSchemaMigrated, metav1.ConditionFalse, ReasonMigrationRunning, "migration Job %s for image %s is running", name, image)
		return ctrl.Result{RequeueAfter: r.migrationPoll()}, false, nil
	}
}

func (r *PaymentChannelReconciler) migrationPoll() time.Duration {
	if r.MigrationPollInterval > 0 {
		return r.MigrationPollInterval
	}
	return 30 * time.Second
}

// deleteStaleMigrations removes the finished migration Jobs of earlier (database, image) pairs
// once a newer one completed.
func (r *PaymentChannelReconciler) deleteStaleMigrations(ctx context.Context, pc *callbackdv1alpha1.PaymentChannel, current string) error {
	jobs := &batchv1.JobList{}
	if err := r.Client.List(ctx, jobs, client.InNamespace(pc.Namespace), client.MatchingLabels(selectorLabels(pc, ComponentMigration))); err != nil {
		return fmt.Errorf("list migration Jobs: %w", err)
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if job.Name == current || !metav1.IsControlledBy(job, pc) {
			continue
		}
		if state, _ := jobState(job); state == migrationRunning {
			continue
		}
		if err := r.Client.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete stale migration Job %s: %w", job.Name, err)
		}
	}
	return nil
}

// reconcileDeployment applies the callbackd Deployment when the migration gate allows it, and
// reports CallbackdAvailable. With an autoscaler active it never writes replicas.
func (r *PaymentChannelReconciler) reconcileDeployment(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	key := types.NamespacedName{Namespace: pc.Namespace, Name: callbackdName(pc)}
	current := &appsv1.Deployment{}
	if err := r.Client.Get(ctx, key, current); apierrors.IsNotFound(err) {
		current = nil
	} else if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("get Deployment %s: %w", key.Name, err)
	}

	if st.migrated {
		in := deploymentInputs{
			Image:       pc.Spec.Callbackd.Image,
			ConfigHash:  st.configHash,
			SecretsHash: st.secretsHash,
		}
		switch {
		case !st.autoscaled && pc.Spec.Autoscaling.Mode == callbackdv1alpha1.AutoscalingOff:
			in.Replicas = ptr.To(ptr.Deref(pc.Spec.Callbackd.Replicas, 2))
		case !st.autoscaled:
			// KEDA was asked for but is not installed: hold the autoscaling floor.
			in.Replicas = ptr.To(pc.Spec.Autoscaling.MinReplicas)
		case current != nil && ownsReplicas(current, FieldOwner):
			if err := r.handOffReplicas(ctx, current); err != nil {
				return ctrl.Result{}, true, err
			}
		}
		desired := buildDeployment(pc, in)
		if err := r.apply(ctx, desired); err != nil {
			return ctrl.Result{}, true, err
		}
		current = &appsv1.Deployment{}
		if err := r.Client.Get(ctx, key, current); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("get Deployment %s: %w", key.Name, err)
		}
	}

	if current == nil {
		setCondition(pc, callbackdv1alpha1.ConditionCallbackdAvailable, metav1.ConditionFalse, ReasonWaitingForMigration,
			"the Deployment is created once the first schema migration completes")
		return ctrl.Result{}, false, nil
	}
	pc.Status.Replicas = current.Status.Replicas
	pc.Status.ReadyReplicas = current.Status.ReadyReplicas
	if len(current.Spec.Template.Spec.Containers) > 0 {
		pc.Status.Image = current.Spec.Template.Spec.Containers[0].Image
	}
	available := false
	for _, c := range current.Status.Conditions {
		if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue {
			available = true
		}
	}
	if available && current.Status.ObservedGeneration >= current.Generation {
		setCondition(pc, callbackdv1alpha1.ConditionCallbackdAvailable, metav1.ConditionTrue, ReasonDeploymentAvailable,
			"%d of %d callbackd pods ready", current.Status.ReadyReplicas, current.Status.Replicas)
	} else {
		setCondition(pc, callbackdv1alpha1.ConditionCallbackdAvailable, metav1.ConditionFalse, ReasonDeploymentProgress,
			"%d of %d callbackd pods ready", current.Status.ReadyReplicas, ptr.Deref(current.Spec.Replicas, 1))
	}
	return ctrl.Result{}, false, nil
}

// replicasHandOffOwner co-owns a Deployment's replicas for the moment autoscaling is switched
// on, so that the operator's next apply (without replicas) releases the field instead of
// resetting it to the default of 1; the autoscaler's next change then takes it over.
const replicasHandOffOwner = FieldOwner + "-replicas-handoff"

func (r *PaymentChannelReconciler) handOffReplicas(ctx context.Context, d *appsv1.Deployment) error {
	ac := appsv1ac.Deployment(d.Name, d.Namespace).
		WithSpec(appsv1ac.DeploymentSpec().WithReplicas(ptr.Deref(d.Spec.Replicas, 1)))
	if err := r.Client.Apply(ctx, ac, client.FieldOwner(replicasHandOffOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("hand replicas of Deployment %s over to the autoscaler: %w", d.Name, err)
	}
	return nil
}

// ownsReplicas reports whether manager's apply owns spec.replicas of d.
func ownsReplicas(d *appsv1.Deployment, manager string) bool {
	for _, mf := range d.ManagedFields {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields); err != nil {
			continue
		}
		if _, ok := fields.Spec["f:replicas"]; ok {
			return true
		}
	}
	return false
}

// reconcileAutoscaling keeps exactly the requested autoscaler: an HPA, a KEDA ScaledObject (when
// the cluster serves the kind), or none — never two.
func (r *PaymentChannelReconciler) reconcileAutoscaling(ctx context.Context, st *reconcileState) (ctrl.Result, bool, error) {
	pc := st.pc
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: callbackdName(pc), Namespace: pc.Namespace}}
	scaledObject := &unstructured.Unstructured{}
	scaledObject.SetGroupVersionKind(ScaledObjectGVK)
	scaledObject.SetNamespace(pc.Namespace)
	scaledObject.SetName(callbackdName(pc))

	wantHPA := pc.Spec.Autoscaling.Mode == callbackdv1alpha1.AutoscalingHPA
	wantKEDA := pc.Spec.Autoscaling.Mode == callbackdv1alpha1.AutoscalingKEDA && st.kedaAvailable
	if !wantHPA {
		if err := r.deleteOwned(ctx, pc, hpa); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	if !wantKEDA && st.kedaAvailable {
		if err := r.deleteOwned(ctx, pc, scaledObject); err != nil {
			return ctrl.Result{}, true, err
		}
	}
	switch {
	case wantHPA:
		if err := r.apply(ctx, buildHPA(pc)); err != nil {
			return ctrl.Result{}, true, err
		}
		if err := r.Client.Get(ctx, client.ObjectKeyFromObject(hpa), hpa); err != nil {
			return ctrl.Result{}, true, fmt.Errorf("get HPA %s: %w", hpa.Name, err)
		}
		// The HPA says when it cannot act (no metrics, no scale target); until its controller
		// has written a status, it is configured and nothing more is known.
		for _, c := range hpa.Status.Conditions {
			if (c.Type == autoscalingv2.AbleToScale || c.Type == autoscalingv2.ScalingActive) && c.Status == corev1.ConditionFalse {
				setCondition(pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionFalse, ReasonHPAInactive,
					"HorizontalPodAutoscaler %s is %s=False (%s): %s", hpa.Name, c.Type, c.Reason, c.Message)
				return ctrl.Result{}, false, nil
			}
		}
		setCondition(pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionTrue, ReasonHPAConfigured,
			"HorizontalPodAutoscaler scales callbackd between %d and %d replicas", pc.Spec.Autoscaling.MinReplicas, pc.Spec.Autoscaling.MaxReplicas)
	case wantKEDA:
		if err := r.apply(ctx, client.ApplyConfigurationFromUnstructured(buildScaledObject(pc))); err != nil {
			return ctrl.Result{}, true, err
		}
		setCondition(pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionTrue, ReasonKEDAConfigured,
			"KEDA ScaledObject scales callbackd between %d and %d replicas", pc.Spec.Autoscaling.MinReplicas, pc.Spec.Autoscaling.MaxReplicas)
	case pc.Spec.Autoscaling.Mode == callbackdv1alpha1.AutoscalingKEDA:
		setCondition(pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionFalse, ReasonKEDAUnavailable,
			"autoscaling.mode is keda but the cluster does not serve %s; holding %d replicas", ScaledObjectGVK.GroupKind(), pc.Spec.Autoscaling.MinReplicas)
	default:
		setCondition(pc, callbackdv1alpha1.ConditionScaling, metav1.ConditionTrue, ReasonAutoscalingOff,
			"autoscaling is off; %d replicas", ptr.Deref(pc.Spec.Callbackd.Replicas, 2))
	}
	return ctrl.Result{}, false, nil
}

// deleteOwned deletes obj (named by its name and namespace) if it exists and the channel
// controls it; an object someone else created under the same name is left alone.
func (r *PaymentChannelReconciler) deleteOwned(ctx context.Context, pc *callbackdv1alpha1.PaymentChannel, obj client.Object) error {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil
		}
		return fmt.Errorf("get %T %s: %w", obj, obj.GetName(), err)
	}
	if !metav1.IsControlledBy(obj, pc) {
		return nil
	}
	if err := r.Client.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete %T %s: %w", obj, obj.GetName(), err)
	}
	return nil
}

// SetupWithManager registers the controller: it watches PaymentChannels, every kind it owns
// (so a changed or deleted child is put back), and Secrets by metadata only, mapped through the
// secretNamesField index to the channels that reference them.
// maxConcurrentReconciles bounds the channels reconciled at once.
func (r *PaymentChannelReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, maxConcurrentReconciles int) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &callbackdv1alpha1.PaymentChannel{}, secretNamesField, secretNamesIndexer); err != nil {
		return fmt.Errorf("index PaymentChannels by Secret: %w", err)
	}
	secret := &metav1.PartialObjectMetadata{}
	secret.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	b := ctrl.NewControllerManagedBy(mgr).
		For(&callbackdv1alpha1.PaymentChannel{}).
		Owns(&corev1.ConfigMap{}).
		Owns(&corev1.Service{}).
		Owns(&corev1.ServiceAccount{}).
		Owns(&appsv1.Deployment{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&batchv1.Job{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Owns(&autoscalingv2.HorizontalPodAutoscaler{}).
		WatchesMetadata(secret, handler.EnqueueRequestsFromMapFunc(r.channelsForSecret)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(maxConcurrentReconciles, 1)})
	if r.Discovery != nil {
		ok, err := r.Discovery.ScaledObjectsAvailable(ctx)
		if err != nil {
			return err
		}
		if ok {
			so := &unstructured.Unstructured{}
			so.SetGroupVersionKind(ScaledObjectGVK)
			b = b.Owns(so)
		}
	}
	return b.Complete(r)
}

// channelsForSecret maps a Secret event to the channels that reference the Secret.
func (r *PaymentChannelReconciler) channelsForSecret(ctx context.Context, obj client.Object) []reconcile.Request {
	list := &callbackdv1alpha1.PaymentChannelList{}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingFields{secretNamesField: obj.GetName()}); err != nil {
		log.FromContext(ctx).Error(err, "list PaymentChannels referencing a Secret", "secret", obj.GetName())
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, pc := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pc.Namespace, Name: pc.Name}})
	}
	return reqs
}
