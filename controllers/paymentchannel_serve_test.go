package controllers

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestRenderedConfigServes is acceptance point 4: what the operator writes to the API server
// (the ConfigMap, the Deployment's and the Job's volumes, mounts and arguments, the referenced
// Secrets) is turned into files exactly where the pods would see them (under a temporary root),
// then the Job's `callbackd migrate` and the Deployment's `callbackd serve` run against real
// PostgreSQL and Redis Sentinel servers until the readiness probe answers 200. The only edits
// are the ones a pod does not need: the mount root, and loopback listen addresses instead of
// every interface on fixed ports.
func TestRenderedConfigServes(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)
	r := newReconciler(t, c)
	pg := testenv.StartPostgres(t)
	dsn := pg.NewDatabase(t, "operator_serve")
	redis := testenv.StartRedis(t, testenv.RedisOptions{Replicas: 1, Sentinels: 3})
	bin := buildCallbackd(t)

	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		t.Fatalf("random secret: %v", err)
	}
	for name, data := range map[string]map[string]string{
		"db":         {"dsn": dsn},
		"hooks":      {"current": "whsec_" + base64.StdEncoding.EncodeToString(secret)},
		"api-tokens": {"tokens": "serve-test-token\n"},
	} {
		if err := c.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}); err != nil {
			t.Fatalf("create Secret %s: %v", name, err)
		}
	}
	pc := &callbackdv1alpha1.PaymentChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hooks"},
		Spec: callbackdv1alpha1.PaymentChannelSpec{
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderStandardWebhooks,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"},
			},
			Keys:              callbackdv1alpha1.ChannelKeys{WebhookSecrets: []callbackdv1alpha1.SecretKeyRef{{Name: "hooks", Key: "current"}}},
			Database:          callbackdv1alpha1.DatabaseSpec{DSNSecret: callbackdv1alpha1.SecretKeyRef{Name: "db", Key: "dsn"}},
			MerchantAPITokens: &callbackdv1alpha1.SecretKeyRef{Name: "api-tokens", Key: "tokens"},
			Callbackd:         callbackdv1alpha1.CallbackdSpec{Image: testImageV1},
			Redis: callbackdv1alpha1.RedisSpec{Mode: callbackdv1alpha1.RedisExternal, External: &callbackdv1alpha1.ExternalRedis{
				SentinelAddrs: redis.SentinelAddrs(), MasterName: redis.MasterName}},
		},
	}
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}
	reconcileOnce(t, r, pc)
	got := getChannel(t, c, ns, pc.Name)
	expectCondition(t, got, callbackdv1alpha1.ConditionConfigValid, metav1.ConditionTrue, ReasonConfigRendered)

	root := t.TempDir()
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	apiAddr := fmt.Sprintf("127.0.0.1:%d", freeLoopbackPort(t))
	rewritePaths := func(s string) string { return strings.ReplaceAll(s, "/etc/callbackd/", root+"/etc/callbackd/") }
	rewrite := func(s string) string {
		s = rewritePaths(s)
		s = strings.Replace(s, "\nlisten: "+listenAddr+"\n", "\nlisten: "+apiAddr+"\n", 1)
		return strings.Replace(s, "\nmetricsListen: "+metricsListenAddr+"\n", "\nmetricsListen: "+metricsAddr+"\n", 1)
	}

	// The migration Job, as the kubelet would run it.
	job := &batchv1.Job{}
	job.Namespace, job.Name = ns, got.Status.MigrationJob
	get(t, c, job)
	materialize(t, c, ns, root, job.Spec.Template.Spec, rewrite)
	migrate := job.Spec.Template.Spec.Containers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, rewriteArgs(migrate.Args, rewritePaths)...)
	cmd.Env = withoutCallbackdEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("callbackd %s: expected success, got %v\n%s", strings.Join(migrate.Args, " "), err, redactSecret(out, secret))
	}
	setJobStatus(t, c, ns, job.Name, true)
	reconcileOnce(t, r, pc)

	// The Deployment's pod.
	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, callbackdName(pc)
	get(t, c, d)
	materialize(t, c, ns, root, d.Spec.Template.Spec, rewrite)
	serve := d.Spec.Template.Spec.Containers[0]
	rendered, err := os.ReadFile(rewritePaths(configFilePath))
	if err != nil {
		t.Fatalf("read the materialized config: %v", err)
	}
	for _, want := range []string{"\nlisten: " + apiAddr + "\n", "\nmetricsListen: " + metricsAddr + "\n"} {
		if !strings.Contains(string(rendered), want) {
			t.Fatalf("materialized config: expected the loopback address line %q, got:\n%s", strings.TrimSpace(want), rendered)
		}
	}
	var log bytes.Buffer
	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	cmd = exec.CommandContext(serveCtx, bin, rewriteArgs(serve.Args, rewritePaths)...)
	// Cancel asks for a graceful stop; the cleanup below waits for it.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.Env = withoutCallbackdEnv()
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start callbackd serve: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if t.Failed() {
				t.Logf("callbackd serve exit: %v", err)
			}
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			err := <-exited
			t.Errorf("callbackd serve: expected it to stop within 20s of SIGTERM, had to kill it (%v)", err)
		}
		if t.Failed() {
			t.Logf("callbackd serve log:\n%s", redactSecret(log.Bytes(), secret))
		}
	})

	probe := serve.ReadinessProbe.HTTPGet
	url := "http://" + metricsAddr + probe.Path
	httpClient := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			t.Fatalf("callbackd serve: exited before ready: %v", err)
		default:
		}
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatalf("probe request: %v", err)
		}
		resp, err := httpClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("readiness probe %s: expected 200 within 60s, last got %s", probe.Path, last)
}

// materialize writes every ConfigMap and Secret volume of pod under root at its mount path,
// with the content the API server holds, as the kubelet would.
func materialize(t *testing.T, c client.Client, ns, root string, pod corev1.PodSpec, rewrite func(string) string) {
	t.Helper()
	mountOf := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mountOf[m.Name] = m.MountPath
	}
	for _, v := range pod.Volumes {
		dir := filepath.Join(root, mountOf[v.Name])
		files := map[string][]byte{}
		var items []corev1.KeyToPath
		switch {
		case v.ConfigMap != nil:
			cm := &corev1.ConfigMap{}
			cm.Namespace, cm.Name = ns, v.ConfigMap.Name
			get(t, c, cm)
			for k, val := range cm.Data {
				files[k] = []byte(rewrite(val))
			}
			items = v.ConfigMap.Items
		case v.Secret != nil:
			s := &corev1.Secret{}
			s.Namespace, s.Name = ns, v.Secret.SecretName
			get(t, c, s)
			files = s.Data
			items = v.Secret.Items
		default:
			continue
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatalf("create mount %s: %v", dir, err)
		}
		if items == nil {
			for k := range files {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			data, ok := files[it.Key]
			if !ok {
				t.Fatalf("volume %s: key %s missing from its source", v.Name, it.Key)
			}
			if err := os.WriteFile(filepath.Join(dir, it.Path), data, 0o600); err != nil {
				t.Fatalf("write %s: %v", it.Path, err)
			}
		}
	}
}

func rewriteArgs(args []string, rewrite func(string) string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = rewrite(a)
	}
	return out
}

// buildCallbackd builds cmd/callbackd for this test.
func buildCallbackd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "callbackd")
	goBin := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			goBin = p
		}
	}
	out, err := exec.CommandContext(context.Background(), goBin, "build", "-o", bin, "github.com/seed-1cff2221/callback-platform/cmd/callbackd").CombinedOutput()
	if err != nil {
		t.Fatalf("build cmd/callbackd: %v\n%s", err, out)
	}
	return bin
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func freeLoopbackPort(t *testing.T) int {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// withoutCallbackdEnv drops CALLBACKD_ overrides a developer may have exported, so that the
// rendered file alone decides.
func withoutCallbackdEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CALLBACKD_") {
			env = append(env, kv)
		}
	}
	return env
}

// redactSecret keeps the webhook secret out of test output.
func redactSecret(out, secret []byte) string {
	return strings.ReplaceAll(string(out), base64.StdEncoding.EncodeToString(secret), "[redacted]")
}
