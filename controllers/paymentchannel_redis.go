package controllers

import (
	"strconv"

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

// redisUID is the redis user of the official image; the containers start redis-server
// directly as that user instead of through the image's root entrypoint.
const redisUID = 999

// The managed topology's scripts. They decide the master only at start-up and only from what
// the Sentinels (or, before any Sentinel knows the group, the Redis servers themselves) report:
// after bootstrap Sentinel alone decides failover, and a restarted pod never reclaims the
// master role from the one Sentinel promoted.
const redisStartScript = `#!/bin/sh
set -eu
self="${HOSTNAME}.${REDIS_SERVICE}.${NAMESPACE}.svc"
master=""
i=0
while [ "$i" -lt "$SENTINELS" ]; do
  host="${SENTINEL_SERVICE}-${i}.${SENTINEL_SERVICE}.${NAMESPACE}.svc"
  reply=$(redis-cli -h "$host" -p 26379 --raw sentinel get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n 1 || true)
  if [ -n "$reply" ]; then master="$reply"; break; fi
  i=$((i + 1))
done
if [ -z "$master" ]; then
  # No Sentinel knows the group yet: bootstrap with instance 0 as the master.
  master="${REDIS_SERVICE}-0.${REDIS_SERVICE}.${NAMESPACE}.svc"
fi
cp /config/redis.conf /run/redis/redis.conf
{
  echo "replica-announce-ip ${self}"
  echo "replica-announce-port 6379"
  if [ "$master" != "$self" ]; then echo "replicaof ${master} 6379"; fi
} >> /run/redis/redis.conf
exec redis-server /run/redis/redis.conf
`

const sentinelStartScript = `#!/bin/sh
set -eu
self="${HOSTNAME}.${SENTINEL_SERVICE}.${NAMESPACE}.svc"
master=""
i=0
while [ -z "$master" ] && [ "$i" -lt "$SENTINELS" ]; do
  host="${SENTINEL_SERVICE}-${i}.${SENTINEL_SERVICE}.${NAMESPACE}.svc"
  if [ "$host" != "$self" ]; then
    master=$(redis-cli -h "$host" -p 26379 --raw sentinel get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n 1 || true)
  fi
  i=$((i + 1))
done
i=0
while [ -z "$master" ] && [ "$i" -lt "$INSTANCES" ]; do
  host="${REDIS_SERVICE}-${i}.${REDIS_SERVICE}.${NAMESPACE}.svc"
  if redis-cli -h "$host" -p 6379 role 2>/dev/null | head -n 1 | grep -qx master; then master="$host"; fi
  i=$((i + 1))
done
if [ -z "$master" ]; then
  master="${REDIS_SERVICE}-0.${REDIS_SERVICE}.${NAMESPACE}.svc"
fi
# Sentinel refuses a monitor line whose host does not resolve: wait for the master's DNS name.
until redis-cli -h "$master" -p 6379 ping >/dev/null 2>&1; do sleep 2; done
cat > /run/sentinel/sentinel.conf <<EOF
port 26379
dir /run/sentinel
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip ${self}
sentinel announce-port 26379
sentinel monitor ${MASTER_NAME} ${master} 6379 ${QUORUM}
sentinel down-after-milliseconds ${MASTER_NAME} 5000
sentinel failover-timeout ${MASTER_NAME} 60000
sentinel parallel-syncs ${MASTER_NAME} 1
EOF
exec redis-server /run/sentinel/sentinel.conf --sentinel
`

// redisConf persists with the append-only file: a restarted instance keeps its success marks.
// Every key callbackd writes has a TTL, so under memory pressure the soonest-expiring go first.
const redisConf = `port 6379
bind * -::*
protected-mode no
dir /data
appendonly yes
appendfsync everysec
maxmemory-policy volatile-ttl
`

// buildRedisConfigMap holds the Redis configuration and the start scripts of both StatefulSets.
func buildRedisConfigMap(pc *callbackdv1alpha1.PaymentChannel) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(redisConfigName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentRedis)).
		WithOwnerReferences(ownerReference(pc)).
		WithData(map[string]string{
			"redis.conf":        redisConf,
			"redis-start.sh":    redisStartScript,
			"sentinel-start.sh": sentinelStartScript,
		})
}

// buildHeadlessService governs a StatefulSet and gives each pod the stable DNS name that Redis
// and Sentinel announce. Not-ready addresses are published so that peers resolve each other
// while the group bootstraps.
func buildHeadlessService(pc *callbackdv1alpha1.PaymentChannel, name, component string, port int32) *corev1ac.ServiceApplyConfiguration {
	return corev1ac.Service(name, pc.Namespace).
		WithLabels(objectLabels(pc, component)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(corev1ac.ServiceSpec().
			WithClusterIP(corev1.ClusterIPNone).
			WithPublishNotReadyAddresses(true).
			WithSelector(selectorLabels(pc, component)).
			WithPorts(corev1ac.ServicePort().WithName(component).WithPort(port).
				WithTargetPort(intstr.FromString(component)).WithProtocol(corev1.ProtocolTCP)))
}

// redisEnv is what both start scripts read.
func redisEnv(pc *callbackdv1alpha1.PaymentChannel) []*corev1ac.EnvVarApplyConfiguration {
	m := pc.Spec.Redis.Managed
	return []*corev1ac.EnvVarApplyConfiguration{
		corev1ac.EnvVar().WithName("NAMESPACE").WithValueFrom(corev1ac.EnvVarSource().
			WithFieldRef(corev1ac.ObjectFieldSelector().WithFieldPath("metadata.namespace"))),
		corev1ac.EnvVar().WithName("REDIS_SERVICE").WithValue(redisName(pc)),
		corev1ac.EnvVar().WithName("SENTINEL_SERVICE").WithValue(sentinelName(pc)),
		corev1ac.EnvVar().WithName("MASTER_NAME").WithValue(redisMasterName),
		corev1ac.EnvVar().WithName("INSTANCES").WithValue(strconv.Itoa(int(m.Instances))),
		corev1ac.EnvVar().WithName("SENTINELS").WithValue(strconv.Itoa(int(m.Sentinels))),
		corev1ac.EnvVar().WithName("QUORUM").WithValue(strconv.Itoa(int(m.Quorum))),
	}
}

func redisPodSpec(pc *callbackdv1alpha1.PaymentChannel, component string) *corev1ac.PodSpecApplyConfiguration {
	return corev1ac.PodSpec().
		WithAutomountServiceAccountToken(false).
		WithEnableServiceLinks(false).
		WithSecurityContext(corev1ac.PodSecurityContext().
			WithRunAsNonRoot(true).
			WithRunAsUser(redisUID).
			WithRunAsGroup(redisUID).
			WithFSGroup(redisUID).
			WithSeccompProfile(corev1ac.SeccompProfile().WithType(corev1.SeccompProfileTypeRuntimeDefault))).
		WithAffinity(corev1ac.Affinity().WithPodAntiAffinity(corev1ac.PodAntiAffinity().
			WithPreferredDuringSchedulingIgnoredDuringExecution(corev1ac.WeightedPodAffinityTerm().
				WithWeight(100).
				WithPodAffinityTerm(corev1ac.PodAffinityTerm().
					WithTopologyKey(corev1.LabelHostname).
					WithLabelSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, component))))))).
		WithVolumes(corev1ac.Volume().WithName("config").WithConfigMap(corev1ac.ConfigMapVolumeSource().
			WithName(redisConfigName(pc)).WithDefaultMode(0o555)))
}

func redisCLIProbe(port int, args ...string) *corev1ac.ProbeApplyConfiguration {
	cmd := append([]string{"redis-cli", "-p", strconv.Itoa(port)}, args...)
	return corev1ac.Probe().
		WithExec(corev1ac.ExecAction().WithCommand(cmd...)).
		WithPeriodSeconds(5).
		WithTimeoutSeconds(2).
		WithFailureThreshold(3)
}

// buildRedisStatefulSet is the Redis replication group: instance 0 is the bootstrap master, the
// others its replicas, each with a persistent volume.
func buildRedisStatefulSet(pc *callbackdv1alpha1.PaymentChannel) *appsv1ac.StatefulSetApplyConfiguration {
	m := pc.Spec.Redis.Managed
	container := corev1ac.Container().
		WithName("redis").
		WithImage(m.Image).
		WithCommand("sh", "/config/redis-start.sh").
		WithEnv(redisEnv(pc)...).
		WithPorts(corev1ac.ContainerPort().WithName(ComponentRedis).WithContainerPort(redisPort).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(redisCLIProbe(redisPort, "ping")).
		WithLivenessProbe(redisCLIProbe(redisPort, "ping").WithInitialDelaySeconds(15)).
		WithResources(resources(m.Resources)).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath("/config").WithReadOnly(true),
			corev1ac.VolumeMount().WithName("run").WithMountPath("/run/redis"),
			corev1ac.VolumeMount().WithName("data").WithMountPath("/data"),
		)
	pvc := corev1ac.PersistentVolumeClaim("data", "").
		WithSpec(corev1ac.PersistentVolumeClaimSpec().
			WithAccessModes(corev1.ReadWriteOnce).
			WithResources(corev1ac.VolumeResourceRequirements().
				WithRequests(corev1.ResourceList{corev1.ResourceStorage: m.Storage.Size})))
	if m.Storage.StorageClassName != nil {
		pvc.Spec.WithStorageClassName(*m.Storage.StorageClassName)
	}
	return appsv1ac.StatefulSet(redisName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentRedis)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(m.Instances).
			WithServiceName(redisName(pc)).
			WithPodManagementPolicy(appsv1.OrderedReadyPodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentRedis))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(objectLabels(pc, ComponentRedis)).
				WithSpec(redisPodSpec(pc, ComponentRedis).
					WithTerminationGracePeriodSeconds(30).
					WithContainers(container).
					WithVolumes(corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource())))).
			WithVolumeClaimTemplates(pvc).
			// The volumes go with the channel (the StatefulSet becomes their owner, and the
			// channel owns the StatefulSet); a scale-down keeps them for a scale-up.
			WithPersistentVolumeClaimRetentionPolicy(appsv1ac.StatefulSetPersistentVolumeClaimRetentionPolicy().
				WithWhenDeleted(appsv1.DeletePersistentVolumeClaimRetentionPolicyType).
				WithWhenScaled(appsv1.RetainPersistentVolumeClaimRetentionPolicyType)))
}

// buildSentinelStatefulSet is the Sentinel group watching the Redis replication group.
func buildSentinelStatefulSet(pc *callbackdv1alpha1.PaymentChannel) *appsv1ac.StatefulSetApplyConfiguration {
	m := pc.Spec.Redis.Managed
	container := corev1ac.Container().
		WithName("sentinel").
		WithImage(m.Image).
		WithCommand("sh", "/config/sentinel-start.sh").
		WithEnv(redisEnv(pc)...).
		WithPorts(corev1ac.ContainerPort().WithName(ComponentSentinel).WithContainerPort(sentinelPort).WithProtocol(corev1.ProtocolTCP)).
		WithReadinessProbe(redisCLIProbe(sentinelPort, "ping")).
		WithResources(resources(m.SentinelResources)).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath("/config").WithReadOnly(true),
			corev1ac.VolumeMount().WithName("run").WithMountPath("/run/sentinel"),
		)
	return appsv1ac.StatefulSet(sentinelName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentSentinel)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(appsv1ac.StatefulSetSpec().
			WithReplicas(m.Sentinels).
			WithServiceName(sentinelName(pc)).
			WithPodManagementPolicy(appsv1.ParallelPodManagement).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, ComponentSentinel))).
			WithTemplate(corev1ac.PodTemplateSpec().
				WithLabels(objectLabels(pc, ComponentSentinel)).
				WithSpec(redisPodSpec(pc, ComponentSentinel).
					WithTerminationGracePeriodSeconds(10).
					WithContainers(container).
					WithVolumes(corev1ac.Volume().WithName("run").WithEmptyDir(corev1ac.EmptyDirVolumeSource())))))
}

// buildRedisPDB keeps all but one pod of a group up during voluntary disruptions: a Sentinel
// quorum survives, and a drain never takes the master and its replicas at once.
func buildRedisPDB(pc *callbackdv1alpha1.PaymentChannel, name, component string) *policyv1ac.PodDisruptionBudgetApplyConfiguration {
	return policyv1ac.PodDisruptionBudget(name, pc.Namespace).
		WithLabels(objectLabels(pc, component)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(policyv1ac.PodDisruptionBudgetSpec().
			WithMaxUnavailable(intstr.FromInt32(1)).
			WithSelector(metav1ac.LabelSelector().WithMatchLabels(selectorLabels(pc, component))))
}

// buildRedisNetworkPolicy admits only the channel's own pods (callbackd, Redis, Sentinel) to
// the Redis and Sentinel ports: the managed Redis has no password, so the network is its fence.
func buildRedisNetworkPolicy(pc *callbackdv1alpha1.PaymentChannel) *networkingv1ac.NetworkPolicyApplyConfiguration {
	return networkingv1ac.NetworkPolicy(redisName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentRedis)).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(networkingv1ac.NetworkPolicySpec().
			WithPodSelector(metav1ac.LabelSelector().
				WithMatchLabels(map[string]string{LabelChannel: pc.Name}).
				WithMatchExpressions(metav1ac.LabelSelectorRequirement().
					WithKey(LabelComponent).
					WithOperator("In").
					WithValues(ComponentRedis, ComponentSentinel))).
			WithPolicyTypes(networkingv1.PolicyTypeIngress).
			WithIngress(networkingv1ac.NetworkPolicyIngressRule().
				WithFrom(networkingv1ac.NetworkPolicyPeer().WithPodSelector(
					metav1ac.LabelSelector().WithMatchLabels(map[string]string{LabelChannel: pc.Name}))).
				WithPorts(
					networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(redisPort)),
					networkingv1ac.NetworkPolicyPort().WithProtocol(corev1.ProtocolTCP).WithPort(intstr.FromInt32(sentinelPort)),
				)))
}
