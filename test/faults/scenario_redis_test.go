package faults

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

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
