package faults

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// masterNode returns the data node Sentinel names as master, and its index.
func masterNode(t *testing.T, e *Env) (*testenv.RedisNode, int) {
	t.Helper()
	addr := e.Redis.MasterAddr()
	i := e.NodeIndexOf(addr)
	if i < 0 {
		t.Fatalf("no Redis node behind the master address %s Sentinel reports", addr)
	}
	return e.Redis.Nodes()[i], i
}

// Scenario 1: the Redis master is killed (SIGKILL) in the middle of a storm spread over two
// callbackd processes, and Sentinel promotes the replica. Requests in the outage fall through to
// the database gates; every notification ends applied exactly once; the Redis gate works again
// on the new master.
func TestScenario1RedisMasterKilled(t *testing.T) {
	const orders, copies = 300, 3
	e := NewEnv(t, EnvOptions{Redis: true, Replicas: 1})
	a := e.StartCallbackd("a", CallbackdOptions{})
	b := e.StartCallbackd("b", CallbackdOptions{})
	ns := e.NewPayments("s1", orders)
	e.RegisterOrders(a, ns)
	watch := e.WatchSentinel()
	master, mi := masterNode(t, e)
	oldAddr := e.Redis.MasterAddr()

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var started atomic.Int64
	stormDone := make(chan []Op, 1)
	go func() {
		stormDone <- e.Storm(ctx, ns, StormOptions{Targets: []*Callbackd{a, b}, Copies: copies, Concurrency: 16,
			Pace: 4 * time.Millisecond, Started: &started})
	}()
	for started.Load() < orders*copies/4 {
		time.Sleep(5 * time.Millisecond)
	}
	killedAt := time.Now()
	master.Kill(t)
	newAddr := e.Redis.WaitForMaster(t, oldAddr, 60*time.Second)
	promoted := time.Since(killedAt)
	startedAtPromotion := started.Load()
	<-stormDone
	retries := e.ProviderRetries(ctx, ns, []*Callbackd{a, b}, 100)

	// The Redis gate comes back on the new master: fresh notifications leave their marks there.
	newNode := e.Redis.Nodes()[e.NodeIndexOf(newAddr)]
	before := countMarks(t, newNode.Addr)
	fresh := e.NewPayments("s1-after", 20)
	e.RegisterOrders(a, fresh)
	for _, n := range fresh {
		e.Send(ctx, a, n, "msg_fresh_"+n.OrderNo, "after-failover")
	}
	retries2 := e.ProviderRetries(ctx, fresh, []*Callbackd{a, b}, 50)
	gateBack := countMarks(t, newNode.Addr) - before

	switches := watch.Switches()
	degraded := e.MetricsByLabel("callbackd_redis_degraded_total", "reason")
	var degradedTotal float64
	for _, v := range degraded {
		degradedTotal += v
	}
	t.Logf("scenario 1: master redis-%d (%s) SIGKILLed after %d of %d deliveries had started; %s promoted after %v (%d started by then); provider retries: %+v, fresh after failover: %+v",
		mi, oldAddr, orders*copies/4, orders*copies, newAddr, promoted.Round(time.Millisecond), startedAtPromotion, retries, retries2)
	t.Logf("scenario 1: duplicates stopped per gate %s; redis degraded %s",
		FormatCounts(e.MetricsByLabel("callbackd_duplicates_stopped_total", "gate")), FormatCounts(degraded))
	r := e.Check("scenario 1", append(ns, fresh...), CheckOptions{Faults: []Fault{
		{Name: fmt.Sprintf("SIGKILL of the Redis master redis-%d", mi),
			Evidence: fmt.Sprintf("Sentinel +switch-master events %q; new master %s; process running=%v", switches, newAddr, master.Running()),
			Happened: len(switches) > 0 && newAddr != oldAddr && !master.Running()},
		{Name: "callbackd fell back to the database gates",
			Evidence: fmt.Sprintf("callbackd_redis_degraded_total=%.0f", degradedTotal), Happened: degradedTotal > 0},
		{Name: "the Redis gate works on the new master",
			Evidence: fmt.Sprintf("%d SUCCESS marks on the new master %s", gateBack, newAddr), Happened: gateBack > 0},
	}})
	RequireOK(t, r)
}

// countMarks counts the SUCCESS marks on the Redis node at addr.
func countMarks(t *testing.T, addr string) int {
	t.Helper()
	keys, err := RedisKeys(addr)
	if err != nil {
		t.Fatalf("read callbackd's keys on %s: %v", addr, err)
	}
	n := 0
	for _, v := range keys {
		if v == "SUCCESS" {
			n++
		}
	}
	return n
}

// Scenario 2: Redis split brain. The old master is partitioned from the Sentinels and the
// replica (through its infra proxy) together with callbackd a, which also loses the Sentinels
// and the replica; callbackd b loses the old master. The Sentinels promote the replica, which b
// then uses, while a keeps claiming keys on the old master. The same notifications go to a and b
// at the same time: both Redis masters accept SET NX for the same keys (measured: keys with two
// holders), and the database gates must still apply each exactly once. After the heal the old
// master becomes a replica and the provider's retries converge.
func TestScenario2RedisSplitBrain(t *testing.T) {
	const warm, split = 100, 100
	e := NewEnv(t, EnvOptions{Redis: true, Replicas: 1, InfraProxies: true})
	opts := CallbackdOptions{RedisTimeout: 250 * time.Millisecond}
	a := e.StartCallbackd("a", opts)
	b := e.StartCallbackd("b", opts)
	both := []*Callbackd{a, b}
	warmNs := e.NewPayments("s2-warm", warm)
	splitNs := e.NewPayments("s2-split", split)
	e.RegisterOrders(a, append(append([]Notification(nil), warmNs...), splitNs...))
	watch := e.WatchSentinel()
	old, oi := masterNode(t, e)
	if oi != 0 {
		t.Fatalf("expected redis-0 to be the initial master, Sentinel names redis-%d", oi)
	}
	replica := e.Redis.Nodes()[1]
	oldAnnounced := e.Redis.MasterAddr()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// Warm up: both processes hold connections to the master.
	e.Storm(ctx, warmNs, StormOptions{Targets: both, Copies: 2, Concurrency: 16, Phase: "before-partition"})
	preOld := keySet(t, old.Addr)

	// The partition: {old master, a} | {Sentinels, replica, b}.
	partitionedAt := time.Now()
	e.Infra[0].SetMode(Partition)
	SetMode(Partition, a.Links.Sentinels...)
	a.Links.Redis[1].SetMode(Partition)
	b.Links.Redis[0].SetMode(Partition)
	newAnnounced := e.Redis.WaitForMaster(t, oldAnnounced, 60*time.Second)
	promoted := time.Since(partitionedAt)
	if e.NodeIndexOf(newAnnounced) != 1 {
		t.Fatalf("expected the replica redis-1 to be promoted, Sentinel names %s", newAnnounced)
	}
	// b follows the switch: wait until a probe through b leaves its mark on the new master.
	probes := e.NewPayments("s2-probe", 30)
	e.RegisterOrders(b, probes)
	basePromoted := countMarks(t, replica.Addr)
	probesUsed := 0
	for _, p := range probes {
		probesUsed++
		e.Send(ctx, b, p, "msg_probe_"+p.OrderNo, "probe")
		if countMarks(t, replica.Addr) > basePromoted {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	bOnNew := countMarks(t, replica.Addr) > basePromoted

	// The split: every notification to a and b at the same moment, twice.
	upBefore := a.Links.Redis[0].Stats().BytesUp
	for round := range 2 {
		Parallel(len(splitNs), 16, func(i int) {
			n := splitNs[i]
			done := make(chan struct{})
			go func() {
				e.Send(ctx, a, n, fmt.Sprintf("msg_%s_a%d", n.OrderNo, round), "split")
				close(done)
			}()
			e.Send(ctx, b, n, fmt.Sprintf("msg_%s_b%d", n.OrderNo, round), "split")
			<-done
		})
	}
	aTalkedToOld := a.Links.Redis[0].Stats().BytesUp - upBefore
	onOld := newKeys(t, old.Addr, preOld)
	onNew := newKeys(t, replica.Addr, preOld)
	twoHolders := 0
	for k := range onOld {
		if onNew[k] {
			twoHolders++
		}
	}
	oldRole := role(t, old.Addr)

	// Heal: the Sentinels demote the old master; its split-brain writes are discarded.
	healedAt := time.Now()
	for _, p := range append(append([]*Proxy{e.Infra[0]}, a.Links.All()...), b.Links.All()...) {
		p.SetMode(Pass)
	}
	WaitFor(t, 60*time.Second, "the old master redis-0 demoted to a replica after the heal", func() bool {
		return role(t, old.Addr) == "slave"
	})
	demoted := time.Since(healedAt)
	retries := e.ProviderRetries(ctx, append(append(append([]Notification(nil), warmNs...), splitNs...), probes[:probesUsed]...), both, 100)

	switches := watch.Switches()
	t.Logf("scenario 2: partition {redis-0, a} | {sentinels, redis-1, b}; %s promoted after %v; b on the new master=%v after %d probes; during the split a sent %d bytes to the old master (role %s); %d of %d split keys got two holders (keys claimed on the old master %d, on the new %d); old master demoted %v after the heal; provider retries %+v",
		newAnnounced, promoted.Round(time.Millisecond), bOnNew, probesUsed, aTalkedToOld, oldRole, twoHolders, split, len(onOld), len(onNew), demoted.Round(time.Millisecond), retries)
	t.Logf("scenario 2: duplicates stopped per gate %s; redis degraded %s",
		FormatCounts(e.MetricsByLabel("callbackd_duplicates_stopped_total", "gate")), FormatCounts(e.MetricsByLabel("callbackd_redis_degraded_total", "reason")))
	t.Logf("scenario 2: links: %s | %s | %s | %s", e.Infra[0], a.Links.Redis[0], a.Links.Sentinels[0], b.Links.Redis[0])
	r := e.Check("scenario 2", append(append(append([]Notification(nil), warmNs...), splitNs...), probes[:probesUsed]...), CheckOptions{Faults: []Fault{
		{Name: "partition of the old master from the Sentinels and the replica",
			Evidence: fmt.Sprintf("+switch-master %q, infra link held %d chunks", switches, e.Infra[0].Stats().Held),
			Happened: len(switches) > 0 && newAnnounced != oldAnnounced},
		{Name: "split brain: two masters accepting claims for the same keys",
			Evidence: fmt.Sprintf("%d of %d keys with a holder on both masters; old master role during the split %q; b on the new master %v", twoHolders, split, oldRole, bOnNew),
			Happened: twoHolders > 0 && oldRole == "master" && bOnNew},
		{Name: "heal: the old master rejoins as a replica",
			Evidence: fmt.Sprintf("redis-0 role %q after %v", role(t, old.Addr), demoted.Round(time.Millisecond)), Happened: role(t, old.Addr) == "slave"},
	}})
	RequireOK(t, r)
}

// keySet returns callbackd's keys on the node at addr.
func keySet(t *testing.T, addr string) map[string]bool {
	t.Helper()
	keys, err := RedisKeys(addr)
	if err != nil {
		t.Fatalf("read callbackd's keys on %s: %v", addr, err)
	}
	out := map[string]bool{}
	for k := range keys {
		out[k] = true
	}
	return out
}

// newKeys returns the keys on addr that are not in before.
func newKeys(t *testing.T, addr string, before map[string]bool) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for k := range keySet(t, addr) {
		if !before[k] {
			out[k] = true
		}
	}
	return out
}

// role is the INFO replication role of the node at addr ("master", "slave", or the error).
func role(t *testing.T, addr string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return "error: " + err.Error()
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "role:"); ok {
			return v
		}
	}
	return "unknown"
}

// Scenario 3: Redis slow (150 ms on every Redis link, above callbackd's 100 ms budget), refusing
// writes (min-replicas-to-write unmet: NOREPLICAS), and gone (every Redis and Sentinel link
// refused), each during a storm over two callbackd processes. The database gates carry the load:
// every notification still ends applied exactly once.
func TestScenario3RedisSlowRefusingGone(t *testing.T) {
	const orders, copies = 150, 3
	e := NewEnv(t, EnvOptions{Redis: true, Replicas: 1})
	a := e.StartCallbackd("a", CallbackdOptions{})
	b := e.StartCallbackd("b", CallbackdOptions{})
	both := []*Callbackd{a, b}
	master, _ := masterNode(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	degraded := func(reason string) float64 {
		return e.MetricsTotal("callbackd_redis_degraded_total", map[string]string{"reason": reason})
	}
	var all []Notification
	var faults []Fault
	phase := func(name string, inject, heal func() string, evidence func(before map[string]float64) (string, bool)) {
		ns := e.NewPayments("s3-"+name, orders)
		e.RegisterOrders(a, ns)
		all = append(all, ns...)
		before := e.MetricsByLabel("callbackd_redis_degraded_total", "reason")
		what := inject()
		start := time.Now()
		e.Storm(ctx, ns, StormOptions{Targets: both, Copies: copies, Concurrency: 16, Phase: name})
		took := time.Since(start)
		ev, ok := evidence(before)
		healed := heal()
		faults = append(faults, Fault{Name: "Redis " + name + ": " + what, Evidence: fmt.Sprintf("%s; storm of %d requests took %v; %s", ev, orders*copies, took.Round(time.Millisecond), healed), Happened: ok})
	}
	redisLinks := append(a.Links.RedisSide(), b.Links.RedisSide()...)
	delta := func(before map[string]float64, reasons ...string) float64 {
		var d float64
		for _, r := range reasons {
			d += degraded(r) - before[r]
		}
		return d
	}

	phase("slow", func() string {
		for _, p := range redisLinks {
			p.SetLatency(150 * time.Millisecond)
		}
		return "150 ms latency on every Redis and Sentinel link (callbackd's budget is 100 ms)"
	}, func() string {
		for _, p := range redisLinks {
			p.SetLatency(0)
		}
		return "latency removed"
	}, func(before map[string]float64) (string, bool) {
		var delayed int64
		for _, p := range redisLinks {
			delayed += p.Stats().Delayed
		}
		d := delta(before, "claim_timeout", "mark_timeout", "release_timeout")
		return fmt.Sprintf("%d chunks delayed by the proxies; Redis timeouts counted by callbackd: %.0f", delayed, d), delayed > 0 && d > 0
	})

	rdb := redis.NewClient(&redis.Options{Addr: master.Addr, MaxRetries: -1})
	defer rdb.Close()
	phase("refusing-writes", func() string {
		if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "3").Err(); err != nil {
			t.Fatalf("CONFIG SET min-replicas-to-write 3: %v", err)
		}
		return "CONFIG SET min-replicas-to-write 3 with 1 replica (writes answer NOREPLICAS)"
	}, func() string {
		if err := rdb.ConfigSet(ctx, "min-replicas-to-write", "0").Err(); err != nil {
			t.Fatalf("CONFIG SET min-replicas-to-write 0: %v", err)
		}
		return "min-replicas-to-write back to 0"
	}, func(before map[string]float64) (string, bool) {
		err := rdb.Set(ctx, "faults:probe", "x", time.Second).Err()
		d := delta(before, "claim_error", "mark_error", "release_error")
		return fmt.Sprintf("a probe SET answered %v; Redis errors counted by callbackd: %.0f", err, d),
			err != nil && strings.Contains(err.Error(), "NOREPLICAS") && d > 0
	})

	phase("gone", func() string {
		SetMode(Refuse, redisLinks...)
		return "every Redis and Sentinel link refuses connections (RST)"
	}, func() string {
		SetMode(Pass, redisLinks...)
		return "links restored"
	}, func(before map[string]float64) (string, bool) {
		var refused, reset int64
		for _, p := range redisLinks {
			s := p.Stats()
			refused += s.Refused
			reset += s.Reset
		}
		d := delta(before, "claim_error", "claim_timeout", "mark_error", "mark_timeout")
		return fmt.Sprintf("proxies refused %d and reset %d connections; Redis failures counted by callbackd: %.0f", refused, reset, d),
			refused+reset > 0 && d > 0
	})

	retries := e.ProviderRetries(ctx, all, both, 100)
	t.Logf("scenario 3: provider retries %+v; duplicates stopped per gate %s; redis degraded %s", retries,
		FormatCounts(e.MetricsByLabel("callbackd_duplicates_stopped_total", "gate")), FormatCounts(e.MetricsByLabel("callbackd_redis_degraded_total", "reason")))
	RequireOK(t, e.Check("scenario 3", all, CheckOptions{Faults: faults}))
}
