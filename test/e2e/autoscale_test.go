package e2e

// Autoscaling on a simulated cluster: kwok simulates the callbackd pods' CPU usage (its
// ClusterResourceUsage "usage-from-annotation" reads the kwok.x-k8s.io/usage-cpu pod annotation)
// and serves it as each node's kubelet /metrics/resource; metrics-server (built from the Go module
// proxy by hack/k8s-binaries.sh, run by kwokctl) turns that into the resource metrics API; the
// kube-controller-manager's HPA controller scales the operator's callbackd Deployment.
//
// Every helper here is prefixed with "as" so that it cannot collide with the other e2e files.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/controllers"
	"github.com/seed-1cff2221/callback-platform/internal/kwokenv"
)

// The channel under test and its autoscaling bounds.
const (
	asNamespace   = "autoscale"
	asChannel     = "storm"
	asMinReplicas = 2
	asMaxReplicas = 5
	// asStormCPU and asCalmCPU are the simulated usages: 400% and 5% of the pods' CPU request
	// (100m in asChannelYAML; the HPA aims at 50% of it).
	asStormCPU = "400m"
	asCalmCPU  = "5m"
	// asUsageAnnotation is read by kwok's default ClusterResourceUsage (usage-from-annotation).
	asUsageAnnotation = "kwok.x-k8s.io/usage-cpu"
)

// asChannelYAML is a Standard Webhooks channel without Redis (the fewest moving parts), with the
// HPA on CPU between asMinReplicas and asMaxReplicas and no scale-down stabilization window, so
// that scale-down is bounded by the operator's one-pod-a-minute policy alone.
const asChannelYAML = `
apiVersion: callbackd.io/v1alpha1
kind: PaymentChannel
metadata:
  name: storm
  namespace: autoscale
spec:
  provider: standardwebhooks
  merchant:
    merchantID: acct_storm
  generic:
    orderNo: data.order_no
    amount: data.amount
    account: account
  keys:
    webhookSecrets:
    - {name: storm-secrets, key: current}
  database:
    dsnSecret: {name: storm-db, key: dsn}
  callbackd:
    image: ghcr.io/seed-1cff2221/callback-platform/callbackd:v0.1.0
    resources:
      requests: {cpu: 100m, memory: 64Mi}
  autoscaling:
    mode: hpa
    minReplicas: 2
    maxReplicas: 5
    targetCPUUtilization: 50
    scaleDownStabilizationSeconds: 0
  redis:
    mode: disabled
`

// TestAutoscaleOnKwok shows the HPA scaling callbackd up during a simulated CPU storm and back
// down afterwards, within the channel's bounds, while the operator reconciles all along without
// ever touching replicas.
func TestAutoscaleOnKwok(t *testing.T) {
	binDir, err := kwokenv.FindBinDir()
	if err != nil {
		t.Fatalf("autoscale: %v", err)
	}
	metricsServer := filepath.Join(binDir, "metrics-server")
	if st, err := os.Stat(metricsServer); err != nil || st.Mode()&0o111 == 0 {
		t.Fatalf("autoscale: metrics-server is not built in %s: run `hack/k8s-binaries.sh metrics` "+
			"(builds sigs.k8s.io/metrics-server v0.9.0 from the Go module proxy, a few minutes once): %v", binDir, err)
	}
	began := time.Now()
	cl := kwokenv.Start(t, kwokenv.Options{
		Nodes:  2,
		BinDir: binDir,
		ExtraArgs: []string{
			"--config=" + asKwokctlConfig(t, binDir),
			"--enable=metrics-server",
			"--metrics-server-binary=" + metricsServer,
			// The HPA acts every 5 s instead of 15 s, and counts a new pod's CPU at once (kwok's
			// pods are Ready within a second and report usage from the start).
			"--extra-args=kube-controller-manager=horizontal-pod-autoscaler-sync-period=5s",
			"--extra-args=kube-controller-manager=horizontal-pod-autoscaler-cpu-initialization-period=10s",
			"--extra-args=kube-controller-manager=horizontal-pod-autoscaler-initial-readiness-delay=5s",
		},
	})
	t.Logf("autoscale: cluster with metrics-server up in %s", cl.StartDuration.Round(time.Second))
	cs, err := cl.Clientset()
	if err != nil {
		t.Fatalf("autoscale: clientset: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	asLoopbackNodes(ctx, t, cs)
	asInstallCRDs(t, cl)
	asStartOperator(t, cl)
	asCreateChannel(ctx, t, cl, cs)

	depName := asChannel + "-callbackd"
	asEventually(ctx, t, 4*time.Minute, "the callbackd Deployment to run its "+fmt.Sprint(asMinReplicas)+" minimum pods", func(ctx context.Context) (bool, string) {
		d, err := cs.AppsV1().Deployments(asNamespace).Get(ctx, depName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ptr.Deref(d.Spec.Replicas, 1) == asMinReplicas && d.Status.ReadyReplicas == asMinReplicas,
			fmt.Sprintf("spec.replicas=%d ready=%d", ptr.Deref(d.Spec.Replicas, 1), d.Status.ReadyReplicas)
	})
	dep, err := cs.AppsV1().Deployments(asNamespace).Get(ctx, depName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("autoscale: get Deployment: %v", err)
	}
	selector, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		t.Fatalf("autoscale: Deployment selector: %v", err)
	}

	// From here on every spec.replicas the Deployment ever has is recorded.
	rec := asRecordReplicas(ctx, t, cs, depName)

	// Calm first: metrics flow through metrics-server to the HPA.
	usage := asUsageSetter(cs, selector)
	usage.set(asCalmCPU)
	markMetrics := time.Now()
	asEventually(ctx, t, 4*time.Minute, "the HPA to read the pods' CPU from metrics-server", func(ctx context.Context) (bool, string) {
		usage.apply(ctx)
		hpa, err := cs.AutoscalingV2().HorizontalPodAutoscalers(asNamespace).Get(ctx, depName, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		u := asCPUUtilization(hpa)
		return u != nil, asHPAState(hpa)
	})
	metricsAfter := time.Since(markMetrics)

	// The storm: every callbackd pod (also those the HPA adds) burns 4x its CPU request.
	usage.set(asStormCPU)
	rec.phase("storm")
	markUp := time.Now()
	reconcilesBefore := asReconciles(t)
	asEventually(ctx, t, 4*time.Minute, fmt.Sprintf("the HPA to scale callbackd up to its maximum %d", asMaxReplicas), func(ctx context.Context) (bool, string) {
		usage.apply(ctx)
		return asScaledTo(ctx, cs, depName, asMaxReplicas)
	})
	upAfter := time.Since(markUp)
	asHold(ctx, t, 20*time.Second, usage, cs, depName, asMaxReplicas)
	reconcilesStorm := asReconciles(t) - reconcilesBefore

	// The storm is over: usage drops to 5% of the request.
	usage.set(asCalmCPU)
	rec.phase("calm")
	markDown := time.Now()
	asEventually(ctx, t, 6*time.Minute, fmt.Sprintf("the HPA to scale callbackd back down to its minimum %d", asMinReplicas), func(ctx context.Context) (bool, string) {
		usage.apply(ctx)
		return asScaledTo(ctx, cs, depName, asMinReplicas)
	})
	downAfter := time.Since(markDown)
	asHold(ctx, t, 15*time.Second, usage, cs, depName, asMinReplicas)
	reconcilesAll := asReconciles(t) - reconcilesBefore

	timeline := rec.stop()
	t.Logf("autoscale: HPA had CPU metrics %s after the pods ran; scaled %d→%d in %s; %d→%d in %s; "+
		"operator reconciles: %.0f during the storm, %.0f in all; replicas timeline: %s; whole test %s",
		metricsAfter.Round(time.Second), asMinReplicas, asMaxReplicas, upAfter.Round(time.Second),
		asMaxReplicas, asMinReplicas, downAfter.Round(time.Second), reconcilesStorm, reconcilesAll,
		timeline, time.Since(began).Round(time.Second))

	if reconcilesStorm < 1 {
		t.Errorf("operator reconciles during the storm: want at least 1 (so that a reset would have shown), got %.0f", reconcilesStorm)
	}
	asCheckTimeline(t, timeline)
	d, err := cs.AppsV1().Deployments(asNamespace).Get(ctx, depName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("autoscale: get Deployment: %v", err)
	}
	for _, m := range asReplicasManagers(d) {
		if strings.HasPrefix(m, controllers.FieldOwner) {
			t.Errorf("Deployment spec.replicas at the end: want no field manager of the operator, got %s", m)
		}
	}
}

// asManifestURL names metrics-server's manifest for kwokctl. kwokctl downloads the manifests it
// is given by URL unless its cache already holds them, so the test puts the objects that
// hack/k8s-binaries.sh took from metrics-server's module source into the cache under this name
// and nothing is fetched (the .invalid domain cannot resolve).
const asManifestURL = "https://metrics-server.invalid/callback-platform/components.yaml"

// asKwokctlConfig writes a kwokctl configuration whose cache holds metrics-server's manifest.
func asKwokctlConfig(t *testing.T, binDir string) string {
	t.Helper()
	manifest, err := os.ReadFile(filepath.Join(binDir, "metrics-server-components.yaml"))
	if err != nil {
		t.Fatalf("autoscale: metrics-server's manifest is not cached in %s: run `hack/k8s-binaries.sh metrics`: %v", binDir, err)
	}
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	sum := sha256.Sum256([]byte(asManifestURL))
	cached := filepath.Join(cacheDir, "manifest", hex.EncodeToString(sum[:])+".yaml")
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatalf("autoscale: %v", err)
	}
	if err := os.WriteFile(cached, manifest, 0o644); err != nil {
		t.Fatalf("autoscale: %v", err)
	}
	conf := fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  cacheDir: %q
  metricsServerManifests:
  - %q
`, cacheDir, asManifestURL)
	path := filepath.Join(dir, "kwokctl.yaml")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatalf("autoscale: %v", err)
	}
	return path
}

// asLoopbackNodes gives every simulated node the InternalIP 127.0.0.1. kwokctl's node template
// hands out documentation addresses (192.0.2.x); metrics-server scrapes each node at its
// InternalIP and kubelet port, where the kwok controller serves every node's /metrics/resource
// (told apart by the node's metrics.k8s.io/resource-metrics-path annotation). On loopback, no
// scrape leaves the machine. kwok keeps an address that is already set.
func asLoopbackNodes(ctx context.Context, t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("autoscale: list nodes: %v (%d found)", err, len(nodes.Items))
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"addresses": []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
		{Type: corev1.NodeHostName, Address: "localhost"},
	}}})
	if err != nil {
		t.Fatalf("autoscale: %v", err)
	}
	for _, n := range nodes.Items {
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			t.Fatalf("autoscale: give node %s a loopback address: %v", n.Name, err)
		}
	}
}

// asInstallCRDs installs the PaymentChannel CRD from config/crd/bases.
func asInstallCRDs(t *testing.T, cl *kwokenv.Cluster) {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatalf("autoscale: repository root: %v", err)
	}
	if _, err := envtest.InstallCRDs(cl.Config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfPathMissing: true,
		MaxTime:            time.Minute,
	}); err != nil {
		t.Fatalf("autoscale: install the CRDs: %v", err)
	}
}

// asStartOperator runs the operator's controllers in this process (as cmd/operator wires them,
// without leader election and metrics serving) until the test ends.
func asStartOperator(t *testing.T, cl *kwokenv.Cluster) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatalf("autoscale: scheme: %v", err)
	}
	if err := callbackdv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatalf("autoscale: scheme: %v", err)
	}
	// The operator's log goes to a file whose tail is printed when the test fails.
	logPath := filepath.Join(t.TempDir(), "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("autoscale: operator log: %v", err)
	}
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo})))
	mgr, err := ctrl.NewManager(cl.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("autoscale: operator manager: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &controllers.PaymentChannelReconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder(controllers.FieldOwner),
		Discovery: controllers.RESTMapperDiscovery{Mapper: mgr.GetRESTMapper()},
	}
	setupCtx, setupCancel := context.WithTimeout(ctx, time.Minute)
	defer setupCancel()
	if err := r.SetupWithManager(setupCtx, mgr, 2); err != nil {
		cancel()
		t.Fatalf("autoscale: set up the PaymentChannel controller: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("autoscale: operator manager: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("autoscale: operator manager did not stop within 30s")
		}
		_ = logFile.Close()
		if t.Failed() {
			t.Logf("autoscale: tail of the operator log:\n%s", asTail(logPath, 30))
		}
	})
}

// asCreateChannel creates the namespace, the channel's Secrets and the PaymentChannel.
func asCreateChannel(ctx context.Context, t *testing.T, cl *kwokenv.Cluster, cs kubernetes.Interface) {
	t.Helper()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: asNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("autoscale: create namespace: %v", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatalf("autoscale: random key: %v", err)
	}
	secrets := map[string]map[string][]byte{
		"storm-secrets": {"current": []byte("whsec_" + base64.StdEncoding.EncodeToString(key))},
		// Never dialled: the simulated pods do not run.
		"storm-db": {"dsn": []byte("postgres://callbackd@127.0.0.1:1/storm?sslmode=disable")},
	}
	for name, data := range secrets {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: asNamespace}, Data: data}
		if _, err := cs.CoreV1().Secrets(asNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatalf("autoscale: create Secret %s: %v", name, err)
		}
	}
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(asChannelYAML), &obj); err != nil {
		t.Fatalf("autoscale: parse the PaymentChannel: %v", err)
	}
	c, err := client.New(cl.Config, client.Options{})
	if err != nil {
		t.Fatalf("autoscale: client: %v", err)
	}
	if err := c.Create(ctx, &unstructured.Unstructured{Object: obj}); err != nil {
		t.Fatalf("autoscale: create the PaymentChannel: %v", err)
	}
}

// asUsage keeps the simulated CPU usage annotation of every callbackd pod at one value.
type asUsage struct {
	cs       kubernetes.Interface
	selector labels.Selector
	mu       sync.Mutex
	value    string
}

func asUsageSetter(cs kubernetes.Interface, sel labels.Selector) *asUsage {
	return &asUsage{cs: cs, selector: sel}
}

func (u *asUsage) set(v string) {
	u.mu.Lock()
	u.value = v
	u.mu.Unlock()
}

// apply annotates the pods whose annotation differs (new pods included); errors are retried on
// the next call (a pod may be deleted between list and patch).
func (u *asUsage) apply(ctx context.Context) {
	u.mu.Lock()
	v := u.value
	u.mu.Unlock()
	pods, err := u.cs.CoreV1().Pods(asNamespace).List(ctx, metav1.ListOptions{LabelSelector: u.selector.String()})
	if err != nil {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{asUsageAnnotation: v}}})
	for _, p := range pods.Items {
		if p.Annotations[asUsageAnnotation] == v || p.DeletionTimestamp != nil {
			continue
		}
		_, _ = u.cs.CoreV1().Pods(asNamespace).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	}
}

// asScaledTo reports whether the HPA wants n replicas and the Deployment has n ready pods.
func asScaledTo(ctx context.Context, cs kubernetes.Interface, name string, n int32) (bool, string) {
	hpa, err := cs.AutoscalingV2().HorizontalPodAutoscalers(asNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	d, err := cs.AppsV1().Deployments(asNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	state := fmt.Sprintf("%s; Deployment spec.replicas=%d ready=%d", asHPAState(hpa), ptr.Deref(d.Spec.Replicas, 1), d.Status.ReadyReplicas)
	return hpa.Status.DesiredReplicas == n && ptr.Deref(d.Spec.Replicas, 1) == n && d.Status.ReadyReplicas == n, state
}

// asHold checks that the replicas stay at n for d while the operator keeps reconciling.
func asHold(ctx context.Context, t *testing.T, d time.Duration, u *asUsage, cs kubernetes.Interface, name string, n int32) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		u.apply(ctx)
		if ok, state := asScaledTo(ctx, cs, name, n); !ok {
			t.Errorf("autoscale: replicas left %d during a steady phase: %s", n, state)
			return
		}
		time.Sleep(time.Second)
	}
}

func asCPUUtilization(hpa *autoscalingv2.HorizontalPodAutoscaler) *int32 {
	for _, m := range hpa.Status.CurrentMetrics {
		if m.Type == autoscalingv2.ResourceMetricSourceType && m.Resource != nil && m.Resource.Name == corev1.ResourceCPU {
			return m.Resource.Current.AverageUtilization
		}
	}
	return nil
}

func asHPAState(hpa *autoscalingv2.HorizontalPodAutoscaler) string {
	cpu := "unknown"
	if u := asCPUUtilization(hpa); u != nil {
		cpu = fmt.Sprintf("%d%%", *u)
	}
	var conds []string
	for _, c := range hpa.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			conds = append(conds, fmt.Sprintf("%s=%s (%s)", c.Type, c.Status, c.Message))
		}
	}
	return fmt.Sprintf("HPA cpu=%s current=%d desired=%d %s", cpu, hpa.Status.CurrentReplicas, hpa.Status.DesiredReplicas, strings.Join(conds, "; "))
}

// asReconciles is the operator's reconcile count so far (controller-runtime's own counter).
func asReconciles(t *testing.T) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatalf("autoscale: gather operator metrics: %v", err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// asReplicasManagers are the field managers owning spec.replicas of d, as "manager/operation"
// plus "/subresource" when the write went through one (the HPA writes through scale).
func asReplicasManagers(d *appsv1.Deployment) []string {
	var owners []string
	for _, mf := range d.ManagedFields {
		if mf.FieldsV1 == nil {
			continue
		}
		var fieldSet struct {
			Spec map[string]json.RawMessage `json:"f:spec"`
		}
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fieldSet); err != nil {
			owners = append(owners, mf.Manager+"/unreadable")
			continue
		}
		if _, ok := fieldSet.Spec["f:replicas"]; ok {
			o := mf.Manager + "/" + string(mf.Operation)
			if mf.Subresource != "" {
				o += "/" + mf.Subresource
			}
			owners = append(owners, o)
		}
	}
	return owners
}

// asSample is one observed spec.replicas and the field managers that own it.
type asSample struct {
	Phase    string
	Replicas int32
	Owners   string
}

// asRecorder watches the Deployment and keeps every spec.replicas it sees, per phase.
type asRecorder struct {
	mu      sync.Mutex
	current string
	samples []asSample
	cancel  context.CancelFunc
	done    chan struct{}
}

func asRecordReplicas(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) *asRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	r := &asRecorder{current: "calm-before", cancel: cancel, done: make(chan struct{})}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	list, err := cs.AppsV1().Deployments(asNamespace).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil || len(list.Items) != 1 {
		cancel()
		t.Fatalf("autoscale: list the Deployment: %v (%d found)", err, len(list.Items))
	}
	r.add(&list.Items[0])
	rv := list.ResourceVersion
	go func() {
		defer close(r.done)
		for ctx.Err() == nil {
			w, err := cs.AppsV1().Deployments(asNamespace).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: rv})
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					rv = "" // too old: start from the current state
					break
				}
				if d, ok := ev.Object.(*appsv1.Deployment); ok {
					rv = d.ResourceVersion
					r.add(d)
				}
			}
			w.Stop()
		}
	}()
	t.Cleanup(r.stopQuietly)
	return r
}

func (r *asRecorder) add(d *appsv1.Deployment) {
	n := ptr.Deref(d.Spec.Replicas, 1)
	owners := strings.Join(asReplicasManagers(d), ",")
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := len(r.samples); k > 0 && r.samples[k-1].Replicas == n && r.samples[k-1].Phase == r.current {
		return
	}
	r.samples = append(r.samples, asSample{Phase: r.current, Replicas: n, Owners: owners})
}

func (r *asRecorder) phase(p string) {
	r.mu.Lock()
	r.current = p
	r.mu.Unlock()
}

func (r *asRecorder) stopQuietly() {
	r.cancel()
	<-r.done
}

// stop ends the recording and returns the samples.
func (r *asRecorder) stop() asTimeline {
	r.stopQuietly()
	r.mu.Lock()
	defer r.mu.Unlock()
	return append(asTimeline(nil), r.samples...)
}

// asTimeline is the recorded spec.replicas, in order.
type asTimeline []asSample

func (tl asTimeline) String() string {
	var b strings.Builder
	last := ""
	for _, s := range tl {
		if s.Phase != last {
			if last != "" {
				b.WriteString(" | ")
			}
			b.WriteString(s.Phase + ":")
			last = s.Phase
		}
		fmt.Fprintf(&b, " %d", s.Replicas)
		if s.Owners != "" {
			fmt.Fprintf(&b, " (%s)", s.Owners)
		}
	}
	return b.String()
}

// asCheckTimeline: replicas stay within the bounds, only grow during the storm and only shrink
// after it. An operator resetting replicas would show as a drop during the storm (or a jump
// during the calm) that the HPA then undoes.
func asCheckTimeline(t *testing.T, tl asTimeline) {
	t.Helper()
	if len(tl) == 0 {
		t.Fatalf("replicas timeline: want samples, got none")
	}
	var errs []error
	for i, s := range tl {
		if s.Replicas < asMinReplicas || s.Replicas > asMaxReplicas {
			errs = append(errs, fmt.Errorf("sample %d (%s): replicas %d outside [%d, %d]", i, s.Phase, s.Replicas, asMinReplicas, asMaxReplicas))
		}
		if i == 0 {
			continue
		}
		// The HPA writes through the scale subresource, which leaves spec.replicas without an
		// owner; the operator's apply must never own it.
		if strings.Contains(s.Owners, controllers.FieldOwner) {
			errs = append(errs, fmt.Errorf("sample %d (%s): replicas %d owned by %q, an operator field manager", i, s.Phase, s.Replicas, s.Owners))
		}
		prev := tl[i-1]
		switch {
		case s.Phase == "storm" && s.Replicas < prev.Replicas:
			errs = append(errs, fmt.Errorf("sample %d: replicas fell from %d to %d during the storm", i, prev.Replicas, s.Replicas))
		case s.Phase == "calm" && prev.Phase == "calm" && s.Replicas > prev.Replicas:
			errs = append(errs, fmt.Errorf("sample %d: replicas rose from %d to %d after the storm", i, prev.Replicas, s.Replicas))
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Errorf("replicas timeline %s:\n%v", tl, err)
	}
	if got := tl[len(tl)-1].Replicas; got != asMinReplicas {
		t.Errorf("replicas at the end: want %d, got %d", asMinReplicas, got)
	}
}

// asTail is the last n lines of a file.
func asTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// asEventually polls cond every second until it holds, failing after timeout with cond's last word.
func asEventually(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func(context.Context) (bool, string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	last := ""
	for {
		ok, state := cond(ctx)
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("autoscale: waited %s for %s; last state: %s", timeout, what, last)
		case <-time.After(time.Second):
		}
	}
}
