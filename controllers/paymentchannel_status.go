package controllers

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// Condition reasons. They are constants so that alerts and tooling can match on them; the
// message carries the detail.
const (
	ReasonAllReady            = "AllReady"
	ReasonConfigRendered      = "ConfigRendered"
	ReasonInvalidConfig       = "InvalidConfig"
	ReasonSecretNotFound      = reasonSecretNotFound
	ReasonSecretKeyNotFound   = reasonSecretKeyNotFound
	ReasonMigrationRunning    = "MigrationRunning"
	ReasonMigrationComplete   = "MigrationComplete"
	ReasonMigrationFailed     = "MigrationFailed"
	ReasonRedisReady          = "RedisReady"
	ReasonRedisProgressing    = "RedisProgressing"
	ReasonRedisExternal       = "RedisExternal"
	ReasonRedisDisabled       = "RedisDisabled"
	ReasonDeploymentAvailable = "DeploymentAvailable"
	ReasonDeploymentProgress  = "DeploymentProgressing"
	ReasonWaitingForMigration = "WaitingForMigration"
	ReasonAutoscalingOff      = "AutoscalingOff"
	ReasonHPAConfigured       = "HPAConfigured"
	ReasonHPAInactive         = "HPAInactive"
	ReasonKEDAConfigured      = "KEDAConfigured"
	ReasonKEDAUnavailable     = "KEDAUnavailable"
	ReasonNotReconciled       = "NotReconciled"
	ReasonReconcileError      = "ReconcileError"
)

// readyDependencies are the conditions Ready summarizes, in the order a person fixes them.
var readyDependencies = []string{
	callbackdv1alpha1.ConditionConfigValid,
	callbackdv1alpha1.ConditionSchemaMigrated,
	callbackdv1alpha1.ConditionRedisReady,
	callbackdv1alpha1.ConditionCallbackdAvailable,
	callbackdv1alpha1.ConditionScaling,
}

// setCondition records one condition for the generation being reconciled. Its
// lastTransitionTime moves only when the status does.
func setCondition(pc *callbackdv1alpha1.PaymentChannel, typ string, status metav1.ConditionStatus, reason, format string, args ...any) {
	meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            fmt.Sprintf(format, args...),
		ObservedGeneration: pc.Generation,
	})
}

// summarizeReady sets Ready from the other conditions: True when all are True; otherwise False
// with the reason of the first that is not, and the list of those that are not in the message.
// A condition this pass did not reach is reported as not reconciled.
func summarizeReady(pc *callbackdv1alpha1.PaymentChannel) {
	var notReady []string
	reason := ""
	for _, typ := range readyDependencies {
		c := meta.FindStatusCondition(pc.Status.Conditions, typ)
		if c == nil || c.ObservedGeneration != pc.Generation {
			setCondition(pc, typ, metav1.ConditionUnknown, ReasonNotReconciled, "not reconciled yet for generation %d", pc.Generation)
			c = meta.FindStatusCondition(pc.Status.Conditions, typ)
		}
		if c.Status != metav1.ConditionTrue {
			notReady = append(notReady, typ)
			if reason == "" {
				reason = c.Reason
			}
		}
	}
	if len(notReady) == 0 {
		setCondition(pc, callbackdv1alpha1.ConditionReady, metav1.ConditionTrue, ReasonAllReady, "the channel is serving")
		return
	}
	setCondition(pc, callbackdv1alpha1.ConditionReady, metav1.ConditionFalse, reason, "not ready: %s", strings.Join(notReady, ", "))
}

// patchStatus writes pc.Status when it differs from original's, as a merge patch carrying
// original's resourceVersion (an optimistic lock: a concurrent writer makes it fail with a
// conflict, and the next reconcile recomputes from fresh state). An unchanged status is not
// written at all, so a steady channel causes no API writes.
func patchStatus(ctx context.Context, c client.Client, original, pc *callbackdv1alpha1.PaymentChannel) error {
	pc.Status.ObservedGeneration = pc.Generation
	if equality.Semantic.DeepEqual(original.Status, pc.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(original, client.MergeFromWithOptimisticLock{})
	if err := c.Status().Patch(ctx, pc, patch); err != nil {
		return fmt.Errorf("patch status of PaymentChannel %s/%s: %w", pc.Namespace, pc.Name, err)
	}
	return nil
}
