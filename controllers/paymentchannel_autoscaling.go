package controllers

import (
	"fmt"
	"strconv"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	autoscalingv2ac "k8s.io/client-go/applyconfigurations/autoscaling/v2"
	"k8s.io/utils/ptr"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// ScaledObjectGVK is KEDA's ScaledObject, used only when discovery finds it.
var ScaledObjectGVK = schema.GroupVersionKind{Group: "keda.sh", Version: "v1alpha1", Kind: "ScaledObject"}

// Scaling behaviour: a retry storm is met at once (double, or four more pods, every 15 s),
// and capacity is given back slowly (one pod a minute after ten quiet minutes, or
// spec.autoscaling.scaleDownStabilizationSeconds), because providers resend in waves and a
// scale-down between two waves only costs the next one.
const (
	scaleUpPeriodSeconds        = 15
	scaleUpPercent              = 100
	scaleUpPods                 = 4
	scaleDownStabilizationSecs  = 600
	scaleDownPeriodSeconds      = 60
	scaleDownPods               = 1
	kedaDefaultPollingInterval  = 15
	kedaCooldownPeriodInSeconds = 300
)

// buildHPA is the autoscaling/v2 HorizontalPodAutoscaler of callbackd.
func buildHPA(pc *callbackdv1alpha1.PaymentChannel) *autoscalingv2ac.HorizontalPodAutoscalerApplyConfiguration {
	as := pc.Spec.Autoscaling
	metrics := []*autoscalingv2ac.MetricSpecApplyConfiguration{
		autoscalingv2ac.MetricSpec().
			WithType(autoscalingv2.ResourceMetricSourceType).
			WithResource(autoscalingv2ac.ResourceMetricSource().
				WithName(corev1.ResourceCPU).
				WithTarget(autoscalingv2ac.MetricTarget().
					WithType(autoscalingv2.UtilizationMetricType).
					WithAverageUtilization(as.TargetCPUUtilization))),
	}
	if pm := as.PodMetric; pm != nil {
		metrics = append(metrics, autoscalingv2ac.MetricSpec().
			WithType(autoscalingv2.PodsMetricSourceType).
			WithPods(autoscalingv2ac.PodsMetricSource().
				WithMetric(autoscalingv2ac.MetricIdentifier().WithName(pm.Name)).
				WithTarget(autoscalingv2ac.MetricTarget().
					WithType(autoscalingv2.AverageValueMetricType).
					WithAverageValue(pm.TargetAverageValue))))
	}
	return autoscalingv2ac.HorizontalPodAutoscaler(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(autoscalingv2ac.HorizontalPodAutoscalerSpec().
			WithScaleTargetRef(autoscalingv2ac.CrossVersionObjectReference().
				WithAPIVersion("apps/v1").WithKind("Deployment").WithName(callbackdName(pc))).
			WithMinReplicas(as.MinReplicas).
			WithMaxReplicas(as.MaxReplicas).
			WithMetrics(metrics...).
			WithBehavior(hpaBehavior(as)))
}

// scaleDownStabilization is the channel's scale-down window in seconds.
func scaleDownStabilization(as callbackdv1alpha1.AutoscalingSpec) int32 {
	return ptr.Deref(as.ScaleDownStabilizationSeconds, scaleDownStabilizationSecs)
}

func hpaBehavior(as callbackdv1alpha1.AutoscalingSpec) *autoscalingv2ac.HorizontalPodAutoscalerBehaviorApplyConfiguration {
	return autoscalingv2ac.HorizontalPodAutoscalerBehavior().
		WithScaleUp(autoscalingv2ac.HPAScalingRules().
			WithStabilizationWindowSeconds(0).
			WithSelectPolicy(autoscalingv2.MaxChangePolicySelect).
			WithPolicies(
				autoscalingv2ac.HPAScalingPolicy().WithType(autoscalingv2.PercentScalingPolicy).WithValue(scaleUpPercent).WithPeriodSeconds(scaleUpPeriodSeconds),
				autoscalingv2ac.HPAScalingPolicy().WithType(autoscalingv2.PodsScalingPolicy).WithValue(scaleUpPods).WithPeriodSeconds(scaleUpPeriodSeconds),
			)).
		WithScaleDown(autoscalingv2ac.HPAScalingRules().
			WithStabilizationWindowSeconds(scaleDownStabilization(as)).
			WithSelectPolicy(autoscalingv2.MinChangePolicySelect).
			WithPolicies(
				autoscalingv2ac.HPAScalingPolicy().WithType(autoscalingv2.PodsScalingPolicy).WithValue(scaleDownPods).WithPeriodSeconds(scaleDownPeriodSeconds),
			))
}

// buildScaledObject is the KEDA ScaledObject of callbackd: CPU, plus the per-pod metric read
// from Prometheus (summed over the channel's pods; KEDA divides by the target). It carries the
// same HPA behaviour, which KEDA passes to the HPA it manages.
func buildScaledObject(pc *callbackdv1alpha1.PaymentChannel) *unstructured.Unstructured {
	as := pc.Spec.Autoscaling
	polling := int64(kedaDefaultPollingInterval)
	if as.KEDA != nil && as.KEDA.PollingInterval > 0 {
		polling = int64(as.KEDA.PollingInterval)
	}
	triggers := []any{
		map[string]any{
			"type":       "cpu",
			"metricType": "Utilization",
			"metadata":   map[string]any{"value": strconv.Itoa(int(as.TargetCPUUtilization))},
		},
	}
	if pm := as.PodMetric; pm != nil && as.KEDA != nil && as.KEDA.PrometheusServerAddress != "" {
		triggers = append(triggers, map[string]any{
			"type": "prometheus",
			"metadata": map[string]any{
				"serverAddress": as.KEDA.PrometheusServerAddress,
				"query":         fmt.Sprintf(`sum(%s{namespace=%q,channel=%q})`, pm.Name, pc.Namespace, pc.Name),
				"threshold":     pm.TargetAverageValue.String(),
			},
		})
	}
	labels := map[string]any{}
	for k, v := range objectLabels(pc, ComponentCallbackd) {
		labels[k] = v
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": ScaledObjectGVK.GroupVersion().String(),
		"kind":       ScaledObjectGVK.Kind,
		"metadata": map[string]any{
			"name":      callbackdName(pc),
			"namespace": pc.Namespace,
			"labels":    labels,
			"ownerReferences": []any{map[string]any{
				"apiVersion":         callbackdv1alpha1.GroupVersion.String(),
				"kind":               "PaymentChannel",
				"name":               pc.Name,
				"uid":                string(pc.UID),
				"controller":         true,
				"blockOwnerDeletion": true,
			}},
		},
		"spec": map[string]any{
			"scaleTargetRef": map[string]any{
				"apiVersion": "apps/v1",
				"kind":       "Deployment",
				"name":       callbackdName(pc),
			},
			"minReplicaCount": int64(as.MinReplicas),
			"maxReplicaCount": int64(as.MaxReplicas),
			"pollingInterval": polling,
			"cooldownPeriod":  int64(kedaCooldownPeriodInSeconds),
			"advanced": map[string]any{
				"horizontalPodAutoscalerConfig": map[string]any{
					"behavior": map[string]any{
						"scaleUp": map[string]any{
							"stabilizationWindowSeconds": int64(0),
							"selectPolicy":               string(autoscalingv2.MaxChangePolicySelect),
							"policies": []any{
								map[string]any{"type": "Percent", "value": int64(scaleUpPercent), "periodSeconds": int64(scaleUpPeriodSeconds)},
								map[string]any{"type": "Pods", "value": int64(scaleUpPods), "periodSeconds": int64(scaleUpPeriodSeconds)},
							},
						},
						"scaleDown": map[string]any{
							"stabilizationWindowSeconds": int64(scaleDownStabilization(as)),
							"selectPolicy":               string(autoscalingv2.MinChangePolicySelect),
							"policies": []any{
								map[string]any{"type": "Pods", "value": int64(scaleDownPods), "periodSeconds": int64(scaleDownPeriodSeconds)},
							},
						},
					},
				},
			},
			"triggers": triggers,
		},
	}}
	return u
}
