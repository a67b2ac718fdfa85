package controllers

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	appsv1ac "k8s.io/client-go/applyconfigurations/apps/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	networkingv1ac "k8s.io/client-go/applyconfigurations/networking/v1"
	policyv1ac "k8s.io/client-go/applyconfigurations/policy/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// callbackdTerminationGrace leaves callbackd's shutdown timeout (20 s by default) to drain
// in-flight callbacks, plus margin.
const callbackdTerminationGrace = 30

// deploymentInputs is what the Deployment builder needs beyond the channel: decisions and
// digests the sub-reconcilers computed from the cluster.
type deploymentInputs struct {
	// Image is the callbackd image whose schema migration completed.
	Image string
	// ConfigHash and SecretsHash go on the pod template.
	ConfigHash, SecretsHash string
	// Replicas is written only when autoscaling is off; nil leaves the count to the autoscaler.
	Replicas *int32
}

// buildDeployment is the callbackd Deployment.
func buildDeployment(pc *callbackdv1alpha1.PaymentChannel, in deploymentInputs) *appsv1ac.DeploymentApplyConfiguration {
	spec := appsv1ac.DeploymentSpec().
		WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentCallbackd))).
		WithRevisionHistoryLimit(5).
		// Never dip below the serving count during a rollout: providers retry, but every
		// failed answer costs a retry cycle.
		WithStrategy(appsv1ac.DeploymentStrategy().
			WithType(appsv1.RollingUpdateDeploymentStrategyType).
			WithRollingUpdate(appsv1ac.RollingUpdateDeployment().
				WithMaxUnavailable(intstr.FromInt32(0)).
				WithMaxSurge(intstr.FromString("25%")))).
		WithTemplate(callbackdPodTemplate(pc, in))
	if in.Replicas != nil {
		spec.WithReplicas(*in.Replicas)
	}
	return appsv1ac.Deployment(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(spec)
}

func callbackdPodTemplate(pc *callbackdv1alpha1.PaymentChannel, in deploymentInputs) *corev1ac.PodTemplateSpecApplyConfiguration {
	cd := pc.Spec.Callbackd
	mounts := mountsFor(pc)

	container := corev1ac.Container().
		WithName("callbackd").
		WithImage(in.Image).
		WithArgs("serve", "--config", configFilePath).
		WithPorts(
			corev1ac.ContainerPort().WithName("http").WithContainerPort(httpPort).WithProtocol(corev1.ProtocolTCP),
			corev1ac.ContainerPort().WithName("metrics").WithContainerPort(metricsPort).WithProtocol(corev1.ProtocolTCP),
		).
		WithStartupProbe(httpProbe("/healthz").WithPeriodSeconds(2).WithFailureThreshold(30)).
		WithLivenessProbe(httpProbe("/healthz").WithPeriodSeconds(10).WithFailureThreshold(3)).
		WithReadinessProbe(httpProbe("/readyz").WithPeriodSeconds(5).WithFailureThreshold(2)).
		WithResources(resources(cd.Resources)).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(configMountPath).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		)
	if cd.ImagePullPolicy != "" {
		container.WithImagePullPolicy(cd.ImagePullPolicy)
	}
	volumes := []*corev1ac.VolumeApplyConfiguration{
		configVolume(pc),
		corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource().WithMedium(corev1.StorageMediumMemory)),
	}
	for _, m := range mounts.all {
		container.WithVolumeMounts(corev1ac.VolumeMount().WithName(m.volume).WithMountPath(m.mountPath).WithReadOnly(true))
		volumes = append(volumes, secretVolume(m))
	}

	pod := podSpec(pc).
		WithServiceAccountName(callbackdName(pc)).
		WithTerminationGracePeriodSeconds(callbackdTerminationGrace).
		WithContainers(container).
		WithVolumes(volumes...).
		WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
			WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
				WithWeight(100).
				WithPodAffinityTerm(corev1ac.PodAffinityTerm().
					WithTopologyKey(corev1.LabelHostname).
					WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentCallbackd))))))).
		WithTopologySpreadConstraints(corev1ac.TopologySpreadConstraint().
			WithMaxSkew(1).
			WithTopologyKey(corev1.LabelTopologyZone).
			WithWhenUnsatisfiable(corev1.ScheduleAnyway).
			WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentCallbackd))))
	if len(cd.NodeSelector) > 0 {
		pod.WithNodeSelector(cd.NodeSelector)
	}
	for i := range cd.Tolerations {
		pod.WithTolerations(toleration(cd.Tolerations[i]))
	}

	return corev1ac.PodTemplateSpec().
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithAnnotations(map[string]string{
			AnnotationConfigHash:  in.ConfigHash,
			AnnotationSecretsHash: in.SecretsHash,
		}).
		WithSpec(pod)
}

// podSpec is what every callbackd pod (server and migration) shares: no API token (callbackd
// never talks to Kubernetes), non-root, and the channel's pull secrets.
func podSpec(pc *callbackdv1alpha1.PaymentChannel) *corev1ac.PodSpecApplyConfiguration {
	pod := corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(nonRootUID).
			WithRunAsGroup(nonRootUID).
			WithFSGroup(nonRootUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault)))
	for _, s := range pc.Spec.Callbackd.ImagePullSecrets {
		pod.WithImagePullSecrets(corev1ac.LocalObjectReference().WithName(s.Name))
	}
	return pod
}

// containerSecurityContext is the restricted Pod Security Standard, plus a read-only root.
func containerSecurityContext() *corev1ac.SecurityContextApplyConfiguration {
	return corev1ac.SecurityContext().
		WithRunAsNonRoot(true).
		WithReadOnlyRootFilesystem(true).
		WithAllowPrivilegeEscalation(false).
		WithCapabilities(corev1ac.Capabilities().WithDrop("ALL"))
}

func httpProbe(path string) *corev1ac.ProbeApplyConfiguration {
	return corev1ac.Probe().
		WithHTTPGet(corev1ac.HTTPGetAction().WithPath(path).WithPort(intstr.FromString("metrics"))).
		WithTimeoutSeconds(2)
}

func configVolume(pc *callbackdv1alpha1.PaymentChannel) *corev1ac.VolumeApplyConfiguration {
	return corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().
		WithName(configMapName(pc)).
		WithDefaultMode(0o444))
}

// secretVolume mounts a referenced Secret; mode 0440 with the pods' fsGroup keeps keys
// readable by the callbackd user alone.
func secretVolume(m secretMount) *corev1ac.VolumeApplyConfiguration {
	src := corev1ac.SecretVolumeSource().WithSecretName(m.secret).WithDefaultMode(0o440)
	for _, it := range m.items {
		src.WithItems(corev1ac.KeyToPath().WithKey(it.Key).WithPath(it.Path))
	}
	return corev1ac.Volume().WithName(m.volume).WithSecret(src)
}

func resources(r corev1.ResourceRequirements) *corev1ac.ResourceRequirementsApplyConfiguration {
	ac := corev1ac.ResourceRequirements()
	if len(r.Requests) > 0 {
		ac.WithRequests(r.Requests)
	}
	if len(r.Limits) > 0 {
		ac.WithLimits(r.Limits)
	}
	return ac
}

func toleration(t corev1.Toleration) *corev1ac.TolerationApplyConfiguration {
	ac := corev1ac.Toleration()
	if t.Key != "" {
		ac.WithKey(t.Key)
	}
	if t.Operator != "" {
		ac.WithOperator(t.Operator)
	}
	if t.Value != "" {
		ac.WithValue(t.Value)
	}
	if t.Effect != "" {
		ac.WithEffect(t.Effect)
	}
	if t.TolerationSeconds != nil {
		ac.WithTolerationSeconds(*t.TolerationSeconds)
	}
	return ac
}

// buildCallbackdService exposes the provider- and merchant-facing API and the metrics port.
func buildCallbackdService(pc *callbackdv1alpha1.PaymentChannel) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(corev1ac.ServiceSpec().
			WithType(corev1.ServiceTypeClusterIP).
			WithSelector(selectorLabels(pc, ComponentCallbackd)).
			WithPorts(
				corev1ac.ServicePort().WithName("http").WithPort(80).WithTargetPort(intstr.FromString("http")).WithProtocol(corev1.ProtocolTCP),
				corev1ac.ServicePort().WithName("metrics").WithPort(metricsPort).WithTargetPort(intstr.FromString("metrics")).WithProtocol(corev1.ProtocolTCP),
			))
}

// buildServiceAccount is callbackd's own identity; it is granted nothing.
func buildServiceAccount(pc *callbackdv1alpha1.PaymentChannel) *corev1ac.ServiceAccountApplyConfiguration {
	return corev1ac.ServiceAccount(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithAutomountServiceAccountToken(false)
}

// buildCallbackdPDB lets a drain take one callbackd pod at a time (maxUnavailable, unlike
// minAvailable, never blocks a drain of a single-replica channel forever).
func buildCallbackdPDB(pc *callbackdv1alpha1.PaymentChannel) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentCallbackd))))
}

// buildCallbackdNetworkPolicy admits traffic to callbackd's two ports only. Providers call
// through the cluster's ingress from anywhere, so the sources stay open; egress (database,
// Redis, providers' query APIs, merchant endpoints) is not restricted here.
func buildCallbackdNetworkPolicy(pc *callbackdv1alpha1.PaymentChannel) *networkingv1ac.NetworkPolicyApplyConfiguration {
	return networkingv1ac.NetworkPolicy(callbackdName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentCallbackd))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(networkingv1ac.NetworkPolicyIngressRule().WithPorts(
				networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(httpPort)),
				networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(metricsPort)),
			)))
}
