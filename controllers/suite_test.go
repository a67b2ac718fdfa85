package controllers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/testenv"
)

// The package shares one kube-apiserver (started in TestMain when a test needs it); every test
// works in its own namespace.
var (
	envOnce    atomic.Bool
	envCfg     *rest.Config
	envClient  client.Client
	envScheme  = runtime.NewScheme()
	envErr     error
	envStarted = make(chan struct{})
	envStop    func()
	nsCounter  atomic.Int64
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(envScheme))
	utilruntime.Must(callbackdv1alpha1.AddToScheme(envScheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(envScheme))
}

func TestMain(m *testing.M) {
	// The reconcilers log through controller-runtime; the tests assert on state, not logs.
	ctrllog.SetLogger(logr.Discard())
	code := m.Run()
	if envStop != nil {
		envStop()
	}
	os.Exit(code)
}

// kube starts the shared kube-apiserver with the generated CRDs on first use and returns a
// client for it. A missing binary fails the test with the install command.
func kube(t *testing.T) client.Client {
	t.Helper()
	if envOnce.CompareAndSwap(false, true) {
		func() {
			defer close(envStarted)
			e, err := testenv.NewEnvtest(filepath.Join("..", "config", "crd", "bases"))
			if err != nil {
				envErr = err
				return
			}
			envStop = func() {
				if err := e.Close(); err != nil {
					fmt.Fprintln(os.Stderr, err)
				}
			}
			envCfg = e.Config
			envClient, envErr = client.New(envCfg, client.Options{Scheme: envScheme})
		}()
	}
	<-envStarted
	if envErr != nil {
		t.Fatalf("start kube-apiserver: %v", envErr)
	}
	return envClient
}

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T, c client.Client) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", nsCounter.Add(1), strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())))
	if len(name) > 60 {
		name = strings.TrimRight(name[:60], "-")
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// Test fixtures: a WeChat Pay channel and the Secrets it references. The key material is not
// real; the operator only mounts and hashes it.
const (
	testImageV1 = "registry.example/callbackd:v1"
	testImageV2 = "registry.example/callbackd:v2"
)

func newChannel(ns, name string) *callbackdv1alpha1.PaymentChannel {
	return &callbackdv1alpha1.PaymentChannel{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: callbackdv1alpha1.PaymentChannelSpec{
			ChannelSettings: callbackdv1alpha1.ChannelSettings{
				Provider: callbackdv1alpha1.ProviderWeChatPay,
				Merchant: callbackdv1alpha1.MerchantIdentity{MerchantID: "1900000109", AppID: "wxd678efh567hg6787"},
			},
			Keys: callbackdv1alpha1.ChannelKeys{
				WeChatAPIv3Key:   &callbackdv1alpha1.SecretKeyRef{Name: "wechat-keys", Key: "apiv3"},
				WeChatPublicKeys: &callbackdv1alpha1.SecretRef{Name: "wechat-public-keys"},
			},
			Database:          callbackdv1alpha1.DatabaseSpec{DSNSecret: callbackdv1alpha1.SecretKeyRef{Name: "db", Key: "dsn"}},
			MerchantAPITokens: &callbackdv1alpha1.SecretKeyRef{Name: "api-tokens", Key: "tokens"},
			Callbackd:         callbackdv1alpha1.CallbackdSpec{Image: testImageV1},
		},
	}
}

func createSecrets(t *testing.T, c client.Client, ns string) {
	t.Helper()
	for name, data := range map[string]map[string]string{
		"wechat-keys":        {"apiv3": "0123456789abcdef0123456789abcdef"},
		"wechat-public-keys": {"PUB_KEY_ID_0114.pem": "-----BEGIN PUBLIC KEY-----\nnot-a-real-key\n-----END PUBLIC KEY-----\n"},
		"db":                 {"dsn": "postgres://callbackd@db.example:5432/callbackd"},
		"api-tokens":         {"tokens": "token-one\n"},
	} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
		if err := c.Create(context.Background(), s); err != nil {
			t.Fatalf("create Secret %s: %v", name, err)
		}
	}
}

// fakeDiscovery answers whether KEDA is installed.
type fakeDiscovery bool

func (d fakeDiscovery) ScaledObjectsAvailable(context.Context) (bool, error) { return bool(d), nil }

// newReconciler drives Reconcile directly (no manager), with a real Event recorder.
func newReconciler(t *testing.T, c client.Client) *PaymentChannelReconciler {
	t.Helper()
	cs, err := kubernetes.NewForConfig(envCfg)
	if err != nil {
		t.Fatalf("clientset: %v", err)
	}
	broadcaster := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	if err := broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatalf("start event recording: %v", err)
	}
	t.Cleanup(func() { cancel(); broadcaster.Shutdown() })
	return &PaymentChannelReconciler{
		Client:                c,
		APIReader:             c,
		Recorder:              broadcaster.NewRecorder(envScheme, FieldOwner),
		Discovery:             fakeDiscovery(false),
		MigrationPollInterval: time.Second,
	}
}

// reconcileOnce runs one reconcile of pc and fails the test on error.
func reconcileOnce(t *testing.T, r *PaymentChannelReconciler, pc *callbackdv1alpha1.PaymentChannel) reconcile.Result {
	t.Helper()
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pc.Namespace, Name: pc.Name}})
	if err != nil {
		t.Fatalf("reconcile %s/%s: %v", pc.Namespace, pc.Name, err)
	}
	return res
}

// get re-reads obj and fails the test when it is missing.
func get(t *testing.T, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatalf("get %T %s: %v", obj, obj.GetName(), err)
	}
}

// eventually polls cond until it is true or the deadline passes.
func eventually(t *testing.T, what string, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s (last: %s)", what, timeout, last)
}
