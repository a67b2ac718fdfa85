package e2e

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/seed-1cff2221/callback-platform/internal/kwokenv"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestKwokenvLifecycle checks the cluster harness itself: a cluster comes up with its nodes,
// scales, and Close leaves no process and no folder behind.
func TestKwokenvLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, err := kwokenv.New(ctx, kwokenv.Options{Nodes: 1, Log: testLog{t}})
	if err != nil {
		t.Fatalf("kwokenv.New: %v", err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = c.Close()
		}
	})
	t.Logf("cluster %s up in %v", c.Name, c.StartDuration.Round(time.Millisecond))
	if pids := c.PIDs(); len(pids) < 5 {
		t.Errorf("expected at least 5 cluster processes (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok), got %v", pids)
	}
	started := time.Now()
	if err := c.ScaleNodes(ctx, 3); err != nil {
		t.Fatalf("scale to 3 nodes: %v", err)
	}
	if err := c.ScaleNodes(ctx, 2); err != nil {
		t.Fatalf("scale down to 2 nodes: %v", err)
	}
	t.Logf("scaled 1 -> 3 -> 2 nodes in %v", time.Since(started).Round(time.Millisecond))
	dir := c.Dir
	closed = true
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if pids := testenv.ProcessesUnder(dir); len(pids) != 0 {
		t.Errorf("expected no process left after Close, got %v", pids)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("expected the cluster folder %s removed, got %v", dir, err)
	}
}

// testLog sends writes to t.Log.
type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}
