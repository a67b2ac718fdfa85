package controllers

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

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

// TestRedisScriptsParse: the start scripts are valid POSIX sh (the image's /bin/sh).
func TestRedisScriptsParse(t *testing.T) {
	for name, script := range map[string]string{"redis-start.sh": redisStartScript, "sentinel-start.sh": sentinelStartScript} {
		cmd := exec.CommandContext(context.Background(), "sh", "-n")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: expected valid sh, got %v: %s", name, err, out)
		}
	}
}
