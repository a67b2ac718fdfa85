package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// Under kwok no pod runs, so the operator's Redis and Sentinel start scripts and configuration
// would go untested by the cluster. checkRedisBootstrap runs them for real: every pod of the two
// StatefulSets becomes a local process, started with the container's own command (sh and the
// script from the rendered ConfigMap), its environment from the pod template, and its mounts as
// local folders. What a pod has and a local process lacks is given by shims:
//
//   - cluster DNS: each pod gets its own loopback address (127.x.y.z, the whole 127/8 is
//     loopback), and a redis-cli shim on PATH resolves <pod>.<service>.<namespace>.svc to it;
//   - the pod's network namespace: a redis-server shim adds "bind <its address>" and swaps the
//     pod DNS names in the configuration for the addresses (Sentinel resolves names itself);
//   - the mounts: the scripts' and configurations' absolute paths (/config, /run/..., /data) are
//     rewritten to the local folders.
//
// Ports stay 6379 and 26379, as the scripts assume. The pods start in StatefulSet order, each
// once its readiness probe (the container's own command) passes. The check: instance 0 is the
// master, every other instance replicates from it, and every Sentinel monitors it with the
// configured quorum and sees the replicas and the other Sentinels.
func (e *e2e) checkRedisBootstrap(t *testing.T) {
	ctx := e.ctx(t, 4*time.Minute)
	var sts [2]*appsv1.StatefulSet
	for i, name := range []string{dataChannel + "-redis", dataChannel + "-sentinel"} {
		sts[i] = &appsv1.StatefulSet{}
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: name}, sts[i]); err != nil {
			t.Fatal(err)
		}
	}
	configMap := func(name string) *corev1.ConfigMap {
		cm := &corev1.ConfigMap{}
		if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: name}, cm); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	runRedisBootstrap(ctx, t, dataNamespace, configMap, sts[0], sts[1], filepath.Join(e.workDir, "redis-pods"))
}

// runRedisBootstrap runs the pods of the Redis and Sentinel StatefulSets locally (see
// checkRedisBootstrap), checks the topology they build and stops them.
func runRedisBootstrap(ctx context.Context, t *testing.T, namespace string, configMap func(name string) *corev1.ConfigMap,
	redisSts, sentinelSts *appsv1.StatefulSet, root string) {
	redisCLI, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli is not installed; run hack/deps.sh (or apt-get install redis-tools): %v", err)
	}
	redisServer, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed; run hack/deps.sh: %v", err)
	}
	sts := [2]*appsv1.StatefulSet{redisSts, sentinelSts}
	shimDir := filepath.Join(root, "bin")

	// One loopback address per pod, in a block chosen at random so that parallel runs differ.
	var b [2]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	block := fmt.Sprintf("127.%d.%d.", 100+int(b[0])%100, b[1])
	var pods []*redisPod
	hosts := map[string]string{}
	for i, s := range sts {
		service := s.Spec.ServiceName
		port := 6379
		if i == 1 {
			port = 26379
		}
		for n := range int(ptr.Deref(s.Spec.Replicas, 1)) {
			p := &redisPod{name: fmt.Sprintf("%s-%d", s.Name, n), sts: s, port: port}
			p.host = fmt.Sprintf("%s.%s.%s.svc", p.name, service, namespace)
			p.ip = fmt.Sprintf("%s%d", block, len(pods)+10)
			p.dir = filepath.Join(root, p.name)
			hosts[p.host] = p.ip
			pods = append(pods, p)
		}
	}
	var hostsFile strings.Builder
	for _, h := range sortedKeys(hosts) {
		fmt.Fprintf(&hostsFile, "%s %s\n", h, hosts[h])
	}
	writeFileT(t, filepath.Join(root, "hosts"), []byte(hostsFile.String()), 0o644)
	writeFileT(t, filepath.Join(shimDir, "redis-cli"), []byte(redisCLIShim), 0o755)
	writeFileT(t, filepath.Join(shimDir, "redis-server"), []byte(redisServerShim), 0o755)

	started := time.Now()
	var procs []*localProcess
	defer func() {
		for i := len(procs) - 1; i >= 0; i-- {
			// Throwaway servers: no graceful drain needed (a replica waiting on SIGTERM for its
			// master would only slow the run down).
			if err := procs[i].kill(); err != nil {
				t.Errorf("stop %s: %v", procs[i].name, err)
			}
		}
	}()
	for _, p := range pods {
		c := p.sts.Spec.Template.Spec.Containers[0]
		// The mounts: the ConfigMap projected into /config, the rest empty folders.
		var rewrites []string // sed expressions applied to configuration files by the shim
		for _, vm := range c.VolumeMounts {
			local := filepath.Join(p.dir, vm.MountPath)
			if err := os.MkdirAll(local, 0o700); err != nil {
				t.Fatal(err)
			}
			rewrites = append(rewrites, fmt.Sprintf(`s# %s\(/\|$\)# %s\1#g`, regexp.QuoteMeta(vm.MountPath), local))
			for _, v := range p.sts.Spec.Template.Spec.Volumes {
				if v.Name != vm.Name || v.ConfigMap == nil {
					continue
				}
				cm := configMap(v.ConfigMap.Name)
				for k, data := range cm.Data {
					writeFileT(t, filepath.Join(local, k), []byte(p.localPaths(data, c.VolumeMounts)), 0o600)
				}
			}
		}
		for h, ip := range hosts {
			rewrites = append(rewrites, fmt.Sprintf(`s#%s#%s#g`, regexp.QuoteMeta(h), ip))
		}
		rewrites = append(rewrites, `s#^bind .*#bind `+p.ip+`#`, `$a bind `+p.ip)
		writeFileT(t, filepath.Join(p.dir, "rewrite.sed"), []byte(strings.Join(rewrites, "\n")+"\n"), 0o600)

		env := append(filteredEnv("REDIS", "PATH", "HOSTNAME"),
			"PATH="+shimDir+string(os.PathListSeparator)+os.Getenv("PATH"),
			"HOSTNAME="+p.name,
			"SHIM_HOSTS="+filepath.Join(root, "hosts"),
			"SHIM_SELF_IP="+p.ip,
			"SHIM_POD_DIR="+p.dir,
			"SHIM_REDIS_CLI="+redisCLI,
			"SHIM_REDIS_SERVER="+redisServer,
		)
		for _, ev := range c.Env {
			switch {
			case ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && ev.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
				env = append(env, ev.Name+"="+namespace)
			case ev.ValueFrom != nil && ev.ValueFrom.FieldRef != nil && ev.ValueFrom.FieldRef.FieldPath == "metadata.name":
				env = append(env, ev.Name+"="+p.name)
			case ev.ValueFrom == nil:
				env = append(env, ev.Name+"="+ev.Value)
			default:
				t.Fatalf("the %s container's env %s comes from %v, which this test does not provide", p.name, ev.Name, ev.ValueFrom)
			}
		}
		cmdline := append(append([]string(nil), c.Command...), c.Args...)
		for i := range cmdline {
			cmdline[i] = p.localPaths(cmdline[i], c.VolumeMounts)
		}
		p.start = func(run int) *localProcess {
			logPath := filepath.Join(p.dir, fmt.Sprintf("out-%d.log", run))
			proc := startLocal(t, p.name, resolveCommand(t, cmdline[0]), cmdline[1:], env, logPath, func(s string) string { return s })
			procs = append(procs, proc)
			// OrderedReady: the next pod starts once this one's readiness probe passes.
			probe := c.ReadinessProbe
			if probe == nil || probe.Exec == nil {
				t.Fatalf("expected an exec readiness probe on %s, got %+v", p.name, probe)
			}
			eventually(t, time.Minute, p.name+" ready ("+strings.Join(probe.Exec.Command, " ")+")", func(ctx context.Context) (bool, string) {
				if proc.exited() {
					t.Fatalf("%s exited: %v\n%s", p.name, proc.waitErr, tailFile(logPath, 20))
				}
				cmd := exec.CommandContext(ctx, filepath.Join(shimDir, filepath.Base(probe.Exec.Command[0])), probe.Exec.Command[1:]...)
				cmd.Env = env
				out, err := cmd.CombinedOutput()
				return err == nil && strings.TrimSpace(string(out)) == "PONG", strings.TrimSpace(string(out))
			})
			return proc
		}
		p.proc = p.start(0)
	}
	t.Logf("%d Redis and Sentinel pods started from the rendered scripts in %v (addresses %sN)", len(pods), time.Since(started).Round(time.Millisecond), block)

	// The topology they built.
	instances := int(ptr.Deref(sts[0].Spec.Replicas, 1))
	master := pods[0]
	rdb := redis.NewClient(&redis.Options{Addr: master.ip + ":6379"})
	defer rdb.Close()
	eventually(t, time.Minute, fmt.Sprintf("%s master with %d replicas linked", master.name, instances-1), func(ctx context.Context) (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		return infoField(info, "role") == "master" && infoField(info, "connected_slaves") == strconv.Itoa(instances-1), oneLine(info)
	})
	for _, p := range pods[1:instances] {
		c := redis.NewClient(&redis.Options{Addr: p.ip + ":6379"})
		// The first full sync waits for the master's diskless-sync delay (5 s by default).
		eventually(t, time.Minute, p.name+" a replica of "+master.name+" with its link up", func(ctx context.Context) (bool, string) {
			info, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return false, err.Error()
			}
			return infoField(info, "role") == "slave" && infoField(info, "master_host") == master.ip &&
				infoField(info, "master_link_status") == "up", oneLine(info)
		})
		c.Close()
	}
	quorum := ""
	for _, ev := range sts[1].Spec.Template.Spec.Containers[0].Env {
		if ev.Name == "QUORUM" {
			quorum = ev.Value
		}
	}
	masterName := ""
	for _, ev := range sts[1].Spec.Template.Spec.Containers[0].Env {
		if ev.Name == "MASTER_NAME" {
			masterName = ev.Value
		}
	}
	sentinels := pods[instances:]
	for _, s := range sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: s.ip + ":26379"})
		eventually(t, time.Minute, s.name+" monitoring the master with every replica and Sentinel known", func(ctx context.Context) (bool, string) {
			m, err := sc.Master(ctx, masterName).Result()
			if err != nil {
				return false, err.Error()
			}
			ok := m["ip"] == master.ip && m["port"] == "6379" && m["quorum"] == quorum &&
				m["num-slaves"] == strconv.Itoa(instances-1) && m["num-other-sentinels"] == strconv.Itoa(len(sentinels)-1) &&
				m["flags"] == "master"
			return ok, fmt.Sprintf("%v", m)
		})
		sc.Close()
	}
	t.Logf("bootstrap verified: %s master, %d replicas linked, %d Sentinels monitoring %q with quorum %s", master.name, instances-1, len(sentinels), masterName, quorum)

	// Failover, then the old master's restart: Sentinel promotes a replica (the configured
	// down-after and failover timeouts), and the restarted pod must ask the Sentinels and come
	// back as a replica of the new master, never reclaiming the role.
	started = time.Now()
	if err := master.proc.kill(); err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0].ip + ":26379"})
	defer sc.Close()
	var newMaster string
	eventually(t, 90*time.Second, "the Sentinels to promote a replica after "+master.name+" died", func(ctx context.Context) (bool, string) {
		addr, err := sc.GetMasterAddrByName(ctx, masterName).Result()
		if err != nil || len(addr) != 2 {
			return false, fmt.Sprintf("%v %v", addr, err)
		}
		newMaster = addr[0]
		return newMaster != master.ip, "still " + newMaster
	})
	t.Logf("failover to %s in %v", newMaster, time.Since(started).Round(time.Millisecond))
	master.proc = master.start(1)
	eventually(t, time.Minute, "the restarted "+master.name+" a replica of the new master "+newMaster, func(ctx context.Context) (bool, string) {
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return false, err.Error()
		}
		return infoField(info, "role") == "slave" && infoField(info, "master_host") == newMaster &&
			infoField(info, "master_link_status") == "up", oneLine(info)
	})
	t.Logf("restarted %s rejoined as a replica of %s", master.name, newMaster)
}

// redisPod is one pod of the Redis or Sentinel StatefulSet, run locally.
type redisPod struct {
	name, host, ip, dir string
	sts                 *appsv1.StatefulSet
	port                int
	start               func(run int) *localProcess
	proc                *localProcess
}

// localPaths rewrites the container's mount paths in s (a script, a command-line argument) to
// the pod's local folders.
func (p *redisPod) localPaths(s string, mounts []corev1.VolumeMount) string {
	for _, vm := range mounts {
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_./-])` + regexp.QuoteMeta(vm.MountPath) + `(/|$|[^A-Za-z0-9_.-])`)
		s = re.ReplaceAllString(s, "${1}"+filepath.Join(p.dir, vm.MountPath)+"${2}")
	}
	return s
}

// resolveCommand finds a container command (sh) on this machine.
func resolveCommand(t testing.TB, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		t.Fatalf("the container runs %s, not found here: %v", name, err)
	}
	return p
}

func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// redisCLIShim resolves pod DNS names through $SHIM_HOSTS, connects a host-less call (the
// readiness probe) to the pod's own address, and runs the real redis-cli.
const redisCLIShim = `#!/bin/sh
host=""
n=$#
i=0
while [ "$i" -lt "$n" ]; do
  a=$1; shift; i=$((i + 1))
  if [ "$a" = "-h" ]; then
    host=$1; shift; i=$((i + 1))
    continue
  fi
  set -- "$@" "$a"
done
if [ -z "$host" ]; then
  host=$SHIM_SELF_IP
else
  ip=$(awk -v h="$host" '$1 == h { print $2 }' "$SHIM_HOSTS")
  if [ -n "$ip" ]; then host=$ip; fi
  case "$host" in
    127.*) ;;
    *) echo "shim: cannot resolve $host" >&2; exit 1 ;;
  esac
fi
exec "$SHIM_REDIS_CLI" -h "$host" "$@"
`

// redisServerShim rewrites the configuration file it is given (pod DNS names to addresses,
// mount paths to local folders, bind to the pod's address) and runs the real redis-server.
const redisServerShim = `#!/bin/sh
set -eu
conf=$1; shift
sed -f "$SHIM_POD_DIR/rewrite.sed" "$conf" > "$conf.local"
exec "$SHIM_REDIS_SERVER" "$conf.local" "$@"
`
