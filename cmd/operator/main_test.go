package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// TestOperatorBinary runs the built operator against a real kube-apiserver: it becomes ready,
// serves metrics, takes the leader-election Lease, logs JSON, and reconciles a PaymentChannel
// (its first migration Job appears).
func TestOperatorBinary(t *testing.T) {
	cfg := testenv.StartEnvtest(t, filepath.Join("..", "..", "config", "crd", "bases"))
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(callbackdv1alpha1.AddToScheme(scheme))
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	dir := t.TempDir()
	kubeconfig := writeKubeconfig(t, cfg, filepath.Join(dir, "kubeconfig"))
	bin := filepath.Join(dir, "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, goTool(), "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build the operator: %v\n%s", err, out)
	}

	probes, metrics := freePort(t), freePort(t)
	var logs syncBuffer
	// The process gets its own context: the cleanup stops it with SIGTERM and checks the exit.
	procCtx, stopProc := context.WithCancel(context.Background())
	t.Cleanup(stopProc)
	cmd := exec.CommandContext(procCtx, bin,
		"--kubeconfig", kubeconfig,
		"--leader-elect", "--leader-election-namespace", "default",
		"--health-probe-bind-address", probes,
		"--metrics-bind-address", metrics, "--metrics-secure=false",
	)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the operator: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("operator exit after SIGTERM: expected a clean exit, got %v", err)
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("operator: expected it to stop within 30s of SIGTERM")
		}
		if t.Failed() {
			t.Logf("operator log:\n%s", logs.String())
		}
	})

	waitFor(t, "readyz 200", func() (bool, string) { return httpOK(ctx, "http://"+probes+"/readyz") })
	waitFor(t, "metrics 200", func() (bool, string) { return httpOK(ctx, "http://"+metrics+"/metrics") })
	waitFor(t, "leader-election Lease held", func() (bool, string) {
		lease := &coordinationv1.Lease{}
		err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "callback-platform-operator.callbackd.io"}, lease)
		if err != nil {
			return false, err.Error()
		}
		holder := ""
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "", "no holder"
	})

	for name, data := range map[string]map[string]string{
		"db":    {"dsn": "postgres://callbackd@db.example/callbackd"},
		"hooks": {"current": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"},
	} {
		if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, StringData: data}); err != nil {
			t.Fatalf("create Secret %s: %v", name, err)
		}
	}
	pc := &callbackdv1alpha1.PaymentChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "hooks"},
		Spec: callbackdv1alpha1.PaymentChannelSpec{
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderStandardWebhooks,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "acct_1"},
			},
			Keys:      callbackdv1alpha1.ChannelKeys{WebhookSecrets: []callbackdv1alpha1.SecretKeyRef{{Name: "hooks", Key: "current"}}},
			Database:  callbackdv1alpha1.DatabaseSpec{DSNSecret: callbackdv1alpha1.SecretKeyRef{Name: "db", Key: "dsn"}},
			Callbackd: callbackdv1alpha1.CallbackdSpec{Image: "registry.example/callbackd:v1"},
		},
	}
	if err := c.Create(ctx, pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}
	waitFor(t, "first migration Job started by the running operator", func() (bool, string) {
		got := &callbackdv1alpha1.PaymentChannel{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pc), got); err != nil {
			return false, err.Error()
		}
		return got.Status.MigrationJob != "" && got.Status.ObservedGeneration == got.Generation, fmt.Sprintf("status %+v", got.Status)
	})
	if first, _, _ := strings.Cut(logs.String(), "\n"); !strings.HasPrefix(first, "{") {
		t.Fatalf("logs: expected JSON lines, got %q", first)
	}
	if strings.Contains(logs.String(), "whsec_") || strings.Contains(logs.String(), "postgres://") {
		t.Fatalf("logs: expected no secret material, found some")
	}
}

func writeKubeconfig(t *testing.T, cfg *rest.Config, path string) string {
	t.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	kc.CurrentContext = "envtest"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatalf("write kubeconfig: %v", err)
	}
	return path
}

func httpOK(ctx context.Context, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not reached within 60s (last: %s)", what, last)
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// syncBuffer is a bytes.Buffer safe for the process's writes and the test's reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
