package controllers

import "testing"

func TestRedisBuildersGolden(t *testing.T) {
	pc := builderChannel()
	golden(t, "configmap-redis", buildRedisConfigMap(pc))
	golden(t, "service-redis", buildHeadlessService(pc, redisName(pc), ComponentRedis, redisPort))
	golden(t, "service-sentinel", buildHeadlessService(pc, sentinelName(pc), ComponentSentinel, sentinelPort))
	golden(t, "statefulset-redis", buildRedisStatefulSet(pc))
	golden(t, "statefulset-sentinel", buildSentinelStatefulSet(pc))
	golden(t, "pdb-redis", buildRedisPDB(pc, redisName(pc), ComponentRedis))
	golden(t, "pdb-sentinel", buildRedisPDB(pc, sentinelName(pc), ComponentSentinel))
	golden(t, "networkpolicy-redis", buildRedisNetworkPolicy(pc))
}
