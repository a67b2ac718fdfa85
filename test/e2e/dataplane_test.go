package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// The storm the data plane takes.
const (
	stormOrders      = 120
	stormDuplicates  = 4
	stormConcurrency = 16
	stormLost        = 5
)

// dataPlaneChannel is the config/samples WeChat Pay channel with real test keys: paysim signs
// what callbackd, configured from the cluster, verifies.
type dataPlaneChannel struct {
	set              *keyset.Set
	dsn              string
	apiToken         string
	publicKeysSecret string
	fake             *fakeprovider.Server
	fakeURL          string
	sink             *deliverySink
}

// applyDataChannel creates the namespace, the Secrets the sample names (filled from a fresh
// paysim key set, the DSN of a throwaway database, a merchant API token and a delivery signing
// secret) and the sample PaymentChannel itself. Four fields of the sample are changed for the
// test, because they point outside this machine: the merchant serial (the key set's), the
// delivery endpoint (a loopback sink), the provider query API (paysim's fake) and the callbackd
// image name (kept, pods are simulated anyway).
func (e *e2e) applyDataChannel(t *testing.T) {
	ctx := e.ctx(t, 2*time.Minute)
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "samples", "callbackd_v1alpha1_paymentchannel_wechatpay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	pc := &callbackdv1alpha1.PaymentChannel{}
	if err := yaml.UnmarshalStrict(raw, pc); err != nil {
		t.Fatalf("decode the config/samples WeChat Pay channel: %v", err)
	}
	if pc.Name != dataChannel {
		t.Fatalf("expected the sample to be named %s, got %s", dataChannel, pc.Name)
	}
	pc.Namespace = dataNamespace

	set, err := keyset.Generate(filepath.Join(e.workDir, "keys"), keyset.Spec{
		Channel: pc.Name, Provider: pc.Spec.Provider, Merchant: pc.Spec.Merchant,
	})
	if err != nil {
		t.Fatalf("generate test keys: %v", err)
	}
	d := &dataPlaneChannel{set: set, publicKeysSecret: pc.Spec.Keys.WeChatPublicKeys.Name}
	e.data = d
	if d.dsn, err = e.pg.CreateDatabase(ctx, "wechat_main"); err != nil {
		t.Fatalf("create the channel's database: %v", err)
	}
	d.apiToken = "mapi_" + randomHex(t, 24)
	d.fake, d.fakeURL = startFakeProvider(e.t, set)
	d.sink = startDeliverySink(e.t)

	keys := set.Manifest.Keys
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	publicKeys := map[string][]byte{}
	entries, err := os.ReadDir(keys.WeChatPublicKeyDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		publicKeys[en.Name()] = read(filepath.Join(keys.WeChatPublicKeyDir, en.Name()))
	}
	k := pc.Spec.Keys
	secrets := []*corev1.Secret{
		secretOf(k.WeChatAPIv3Key.Name, map[string][]byte{
			k.WeChatAPIv3Key.Key:    read(keys.WeChatAPIv3KeyFile),
			k.WeChatMerchantKey.Key: read(keys.WeChatMerchantKeyFile),
		}),
		secretOf(k.WeChatPublicKeys.Name, publicKeys),
		secretOf(pc.Spec.Database.DSNSecret.Name, map[string][]byte{pc.Spec.Database.DSNSecret.Key: []byte(d.dsn)}),
		secretOf(pc.Spec.MerchantAPITokens.Name, map[string][]byte{pc.Spec.MerchantAPITokens.Key: []byte(d.apiToken + "\n")}),
		secretOf(pc.Spec.DeliverySecrets.Name, map[string][]byte{pc.Spec.Delivery.Endpoints[0].Name: []byte(d.sink.secret)}),
	}
	if k.WeChatAPIv3Key.Name != k.WeChatMerchantKey.Name {
		t.Fatalf("the sample changed its Secret layout (APIv3 key in %s, merchant key in %s); update the test", k.WeChatAPIv3Key.Name, k.WeChatMerchantKey.Name)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dataNamespace}}
	if err := e.k8s.Create(ctx, ns); err != nil {
		t.Fatalf("create namespace %s: %v", dataNamespace, err)
	}
	for _, s := range secrets {
		s.Namespace = dataNamespace
		if err := e.k8s.Create(ctx, s); err != nil {
			t.Fatalf("create Secret %s: %v", s.Name, err)
		}
	}

	pc.Spec.Keys.WeChatMerchantSerial = keys.WeChatMerchantSerial
	pc.Spec.Delivery.Endpoints[0].URL = d.sink.url
	pc.Spec.Reconciliation.QueryBaseURL = d.fakeURL
	if err := e.k8s.Create(ctx, pc); err != nil {
		t.Fatalf("create PaymentChannel %s/%s: %v", dataNamespace, pc.Name, err)
	}
}

func secretOf(name string, data map[string][]byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeOpaque, Data: data}
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// newPublicKeyPEM returns a fresh WeChat Pay public-key id and its PEM public key.
func newPublicKeyPEM(t testing.TB) (string, []byte) {
	t.Helper()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return "PUB_KEY_ID_" + strings.ToUpper(randomHex(t, 12)), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func startFakeProvider(t *testing.T, set *keyset.Set) (*fakeprovider.Server, string) {
	t.Helper()
	fake, err := fakeprovider.New([]*keyset.Set{set}, fakeprovider.Options{})
	if err != nil {
		t.Fatalf("fake provider: %v", err)
	}
	return fake, "http://" + serveLoopback(t, fake)
}

// serveLoopback serves h on a loopback port until t ends and returns host:port.
func serveLoopback(t *testing.T, h http.Handler) string {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

// deliverySink is the merchant's endpoint: it records the webhook-id of every delivery.
type deliverySink struct {
	url           string
	secret        string
	mu            sync.Mutex
	ids           map[string]int
	badSignatures int
}

func startDeliverySink(t *testing.T) *deliverySink {
	s := &deliverySink{ids: map[string]int{}}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	s.secret = "whsec_" + base64.StdEncoding.EncodeToString(b)
	wh, err := standardwebhooks.NewWebhook(s.secret)
	if err != nil {
		t.Fatalf("the Standard Webhooks reference library refused the delivery secret: %v", err)
	}
	s.url = "http://" + serveLoopback(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "read", http.StatusBadRequest)
			return
		}
		// Verified with the reference library, as the merchant would.
		if err := wh.Verify(body, r.Header); err != nil {
			s.mu.Lock()
			s.badSignatures++
			s.mu.Unlock()
			http.Error(w, "bad signature", http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.ids[r.Header.Get("webhook-id")]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})) + "/hooks/payments"
	return s
}

func (s *deliverySink) counts() (distinct, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.ids {
		total += n
	}
	return len(s.ids), total
}

// mountedPod is the callbackd container's view of its volumes, written to a local folder.
type mountedPod struct {
	root   string
	mounts []string // container mount paths, longest first
}

// materialize writes every ConfigMap and Secret volume the container mounts under root, exactly
// as the kubelet would project them (items renamed, or every key as a file).
func (e *e2e) materialize(ctx context.Context, t *testing.T, ns string, spec corev1.PodSpec, c corev1.Container, root string) *mountedPod {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	m := &mountedPod{root: root}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			t.Fatalf("container %s mounts volume %s the pod does not declare", c.Name, vm.Name)
		}
		dir := filepath.Join(root, vm.MountPath)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch {
		case v.ConfigMap != nil:
			cm := &corev1.ConfigMap{}
			if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: v.ConfigMap.Name}, cm); err != nil {
				t.Fatalf("read ConfigMap %s: %v", v.ConfigMap.Name, err)
			}
			data = map[string][]byte{}
			for k, s := range cm.Data {
				data[k] = []byte(s)
			}
			items = v.ConfigMap.Items
		case v.Secret != nil:
			s := &corev1.Secret{}
			if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: ns, Name: v.Secret.SecretName}, s); err != nil {
				t.Fatalf("read Secret %s: %v", v.Secret.SecretName, err)
			}
			data = s.Data
			items = v.Secret.Items
		default:
			continue // emptyDir and the like: an empty folder
		}
		m.mounts = append(m.mounts, vm.MountPath)
		if len(items) == 0 {
			for k, b := range data {
				writeFileT(t, filepath.Join(dir, k), b, 0o600)
			}
			continue
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				t.Fatalf("volume %s projects key %s, which its source lacks", vm.Name, it.Key)
			}
			writeFileT(t, filepath.Join(dir, it.Path), b, 0o600)
		}
	}
	// Longest first, so that a nested mount wins over its parent when rewriting paths.
	for i := range m.mounts {
		for j := i + 1; j < len(m.mounts); j++ {
			if len(m.mounts[j]) > len(m.mounts[i]) {
				m.mounts[i], m.mounts[j] = m.mounts[j], m.mounts[i]
			}
		}
	}
	return m
}

// local maps a path inside the container to the local copy.
func (m *mountedPod) local(p string) string {
	for _, mp := range m.mounts {
		if p == mp || strings.HasPrefix(p, mp+"/") {
			return filepath.Join(m.root, p)
		}
	}
	return p
}

// localConfig reads the mounted callbackd configuration (the operator's rendering, unchanged),
// points every path in it at the local copies of the mounts and sets metricsListen to a
// loopback address; it returns the file to give callbackd.
func (m *mountedPod) localConfig(t *testing.T, containerPath, metricsListen, name string) string {
	t.Helper()
	raw, err := os.ReadFile(m.local(containerPath))
	if err != nil {
		t.Fatalf("read the mounted config: %v", err)
	}
	text := string(raw)
	for _, mp := range m.mounts {
		// The mount path itself (a directory setting) or anything under it.
		re := regexp.MustCompile(`(^|[^A-Za-z0-9_./-])` + regexp.QuoteMeta(mp) + `(/|$|[^A-Za-z0-9_.-])`)
		text = re.ReplaceAllString(text, "${1}"+filepath.Join(m.root, mp)+"${2}")
	}
	f, err := config.Parse([]byte(text))
	if err != nil {
		t.Fatalf("callbackd cannot parse the configuration the operator rendered: %v\n%s", err, raw)
	}
	f.MetricsListen = metricsListen
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(m.root, name)
	writeFileT(t, p, b, 0o600)
	return p
}

// localArgs replaces the container's config path argument with the local file.
func localArgs(args []string, containerConfig, localConfig string) []string {
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == containerConfig {
			out[i] = localConfig
		}
	}
	return out
}

// configArg returns the value following --config in args.
func configArg(t testing.TB, args []string) string {
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	t.Fatalf("expected a --config argument in %v", args)
	return ""
}

// callbackdLocalEnv is the environment of a local callbackd: ours without CALLBACKD_ variables,
// the container's literal env, and the connection overrides callbackd documents for running one
// rendered file anywhere (listen address and Redis Sentinels; the DSN comes from the mounted
// Secret, unchanged).
func (e *e2e) callbackdLocalEnv(c corev1.Container, listen string) []string {
	env := filteredEnv("CALLBACKD_")
	for _, ev := range c.Env {
		if ev.ValueFrom == nil {
			env = append(env, ev.Name+"="+ev.Value)
		}
	}
	return append(env,
		config.EnvListen+"="+listen,
		config.EnvRedisSentinels+"="+strings.Join(e.redis.SentinelAddrs(), ","),
		config.EnvRedisMaster+"="+e.redis.MasterName,
	)
}

// runDataPlane starts callbackd the way the cluster would run it, from what the operator
// rendered: the migration Job's command, then one local process per Deployment replica, and
// storms it with paysim. The books must balance exactly.
func (e *e2e) runDataPlane(t *testing.T) {
	ctx := e.ctx(t, 8*time.Minute)
	d := e.data
	pc := &callbackdv1alpha1.PaymentChannel{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: dataChannel}, pc); err != nil {
		t.Fatal(err)
	}
	dep := &appsv1.Deployment{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: dataChannel + "-callbackd"}, dep); err != nil {
		t.Fatal(err)
	}
	job := &batchv1.Job{}
	if err := e.k8s.Get(ctx, types.NamespacedName{Namespace: dataNamespace, Name: pc.Status.MigrationJob}, job); err != nil {
		t.Fatalf("read migration Job %q: %v", pc.Status.MigrationJob, err)
	}
	bin := filepath.Join(e.binDir, "callbackd")

	// 1. The migration Job's container, run locally.
	jc := job.Spec.Template.Spec.Containers[0]
	jm := e.materialize(ctx, t, dataNamespace, job.Spec.Template.Spec, jc, filepath.Join(e.workDir, "migrate-pod"))
	jconf := configArg(t, jc.Args)
	jlocal := jm.localConfig(t, jconf, freeLoopbackAddr(t), "migrate.json")
	started := time.Now()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(mctx, bin, localArgs(append(jc.Command[min(len(jc.Command), 1):], jc.Args...), jconf, jlocal)...)
	cmd.Env = e.callbackdLocalEnv(jc, freeLoopbackAddr(t))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("expected the migration Job's command (callbackd %v) to succeed, got %v:\n%s", jc.Args, err, tailLines(string(out), 20))
	}
	t.Logf("callbackd %s: migrated in %v", strings.Join(jc.Args[:1], " "), time.Since(started).Round(time.Millisecond))

	// 2. One local callbackd per Deployment replica, from the Deployment's pod template.
	c := dep.Spec.Template.Spec.Containers[0]
	root := filepath.Join(e.workDir, "callbackd-pod")
	m := e.materialize(ctx, t, dataNamespace, dep.Spec.Template.Spec, c, root)
	conf := configArg(t, c.Args)
	replicas := int(ptr.Deref(dep.Spec.Replicas, 2))
	var bases []string
	httpClient := storm.NewClient(stormConcurrency, storm.DefaultTimeout)
	var procs []*localProcess
	for i := range replicas {
		listen, metrics := freeLoopbackAddr(t), freeLoopbackAddr(t)
		local := m.localConfig(t, conf, metrics, fmt.Sprintf("callbackd-%d.json", i))
		logPath := filepath.Join(e.workDir, fmt.Sprintf("callbackd-%d.log", i))
		p := startLocal(e.t, fmt.Sprintf("callbackd-%d", i), bin, localArgs(c.Args, conf, local), e.callbackdLocalEnv(c, listen), logPath, d.redact)
		procs = append(procs, p)
		probePath := "/readyz"
		if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil {
			probePath = c.ReadinessProbe.HTTPGet.Path
		}
		eventually(t, time.Minute, fmt.Sprintf("callbackd replica %d ready (%s on the metrics address)", i, probePath), func(ctx context.Context) (bool, string) {
			if p.exited() {
				t.Fatalf("callbackd replica %d exited: %v\n%s", i, p.waitErr, d.redact(tailFile(logPath, 20)))
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metrics+probePath, nil)
			resp, err := httpClient.Do(req)
			if err != nil {
				return false, err.Error()
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, resp.Status
		})
		bases = append(bases, "http://"+listen)
	}
	t.Logf("%d callbackd replicas serving the rendered configuration: %v", replicas, bases)

	// 3. The storm: orders registered through the merchant API, paid at the fake provider,
	// every notification delivered stormDuplicates times, shuffled, across the replicas.
	trades := storm.NewTrades("E2E-WX", stormOrders, "CNY", time.Now())
	merchant := storm.Merchant{BaseURL: bases[0], Token: d.apiToken, Client: httpClient}
	spec := storm.OrderSpec{Channel: dataChannel, MerchantID: pc.Spec.Merchant.MerchantID, SubMerchantID: pc.Spec.Merchant.SubMerchantID}
	if err := merchant.Register(ctx, spec, trades, 8); err != nil {
		t.Fatalf("register orders: %v", err)
	}
	for _, tr := range trades {
		d.fake.Put(fakeprovider.Trade{Provider: pc.Spec.Provider, MerchantID: pc.Spec.Merchant.MerchantID, OutTradeNo: tr.OrderNo,
			TransactionID: tr.TransactionID, Amount: tr.Amount, Currency: tr.Currency, PaidAt: tr.PaidAt})
	}
	lost, sent := trades[:stormLost], trades[stormLost:]
	notifier, err := storm.NewNotifier(d.set)
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, b := range bases {
		targets = append(targets, b+"/notify/"+dataChannel)
	}
	sender, err := storm.NewBalancedSender(notifier, targets, httpClient)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := sender.Storm(ctx, storm.Config{Trades: sent, Duplicates: stormDuplicates, Concurrency: stormConcurrency, Shuffle: true})
	if err != nil {
		t.Fatalf("storm: %v", err)
	}
	t.Logf("storm: %s", sum)
	if sum.Answers.Reject != 0 || sum.Answers.TransportError != 0 {
		t.Errorf("expected no rejected and no unanswered notification (keys and config from the cluster must verify), got %+v", sum.Answers)
	}
	acknowledged := sum.OrdersAcknowledged
	if len(sum.Unacknowledged) > 0 {
		pending := map[string]bool{}
		for _, no := range sum.Unacknowledged {
			pending[no] = true
		}
		var again []storm.Trade
		for _, tr := range sent {
			if pending[tr.OrderNo] {
				again = append(again, tr)
			}
		}
		waits := make([]time.Duration, 0, len(pc.Spec.ProviderRetrySchedule))
		for _, s := range config.WeChatPayRetrySchedule() {
			waits = append(waits, s.Duration)
		}
		res, err := sender.Replay(ctx, storm.ReplayConfig{Trades: again, Schedule: waits, Compress: 1000, Concurrency: stormConcurrency})
		if err != nil {
			t.Fatalf("provider resends: %v", err)
		}
		t.Logf("provider resends of %d unacknowledged orders: %s", len(again), res.Summary)
		acknowledged += res.Summary.OrdersAcknowledged
	}
	if acknowledged != len(sent) {
		t.Errorf("expected every one of %d notified orders acknowledged in the end, got %d", len(sent), acknowledged)
	}
	found := 0
	for _, tr := range lost {
		res, err := merchant.Sync(ctx, tr.OrderNo)
		if err != nil {
			t.Fatalf("sync %s: %v", tr.OrderNo, err)
		}
		if res.Status == "PAID" {
			found++
		}
	}
	if found != len(lost) {
		t.Errorf("expected the %d lost notifications found paid by the active query (fake provider), got %d", len(lost), found)
	}

	// 4. The books, read straight from PostgreSQL.
	b := readBooks(ctx, t, d.dsn, dataChannel)
	t.Logf("books: %d orders registered, %d paid, %d ledger entries, %d paid twice, %d outbox events", b.registered, b.paid, b.ledger, b.twice, b.outbox)
	if b.registered != stormOrders || b.paid != stormOrders || b.ledger != stormOrders || b.twice != 0 {
		t.Errorf("expected %d orders registered, paid and booked once each, got registered=%d paid=%d ledger=%d twice=%d",
			stormOrders, b.registered, b.paid, b.ledger, b.twice)
	}
	if b.outbox != b.paid {
		t.Errorf("expected one outbox event per paid order (%d), got %d", b.paid, b.outbox)
	}
	eventually(t, 2*time.Minute, fmt.Sprintf("the merchant's endpoint to receive all %d events (at least once each)", b.outbox), func(context.Context) (bool, string) {
		distinct, total := d.sink.counts()
		return distinct == b.outbox, fmt.Sprintf("%d distinct webhook-ids in %d deliveries", distinct, total)
	})
	distinct, total := d.sink.counts()
	d.sink.mu.Lock()
	bad := d.sink.badSignatures
	d.sink.mu.Unlock()
	t.Logf("deliveries: %d distinct events in %d requests to the merchant endpoint, signatures verified with the reference library", distinct, total)
	if bad != 0 {
		t.Errorf("expected every delivery signed with the endpoint's secret from the cluster, got %d that did not verify", bad)
	}

	for _, p := range procs {
		if err := p.stop(30 * time.Second); err != nil {
			t.Errorf("expected callbackd to drain and exit on SIGTERM: %v", err)
		}
	}
}

// redact removes the test's secrets from a log before it is printed.
func (d *dataPlaneChannel) redact(s string) string {
	for _, secret := range []string{d.apiToken, d.dsn, d.sink.secret, d.set.APIv3Key} {
		if secret != "" {
			s = strings.ReplaceAll(s, secret, "[REDACTED]")
		}
	}
	return s
}

type books struct {
	registered, paid, ledger, twice, outbox int
}

func readBooks(ctx context.Context, t *testing.T, dsn, channel string) books {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the channel's database: %v", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var b books
	err = conn.QueryRow(ctx, `
		SELECT count(*),
		       count(*) FILTER (WHERE o.status = 'PAID'),
		       coalesce(sum(l.entries), 0),
		       count(*) FILTER (WHERE l.entries > 1)
		FROM payment_orders o
		LEFT JOIN (SELECT order_no, count(*) AS entries FROM ledger_entries
		           WHERE entry_type = 'payment' GROUP BY order_no) l USING (order_no)
		WHERE o.channel = $1`, channel).Scan(&b.registered, &b.paid, &b.ledger, &b.twice)
	if err != nil {
		t.Fatalf("read the books: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE channel = $1`, channel).Scan(&b.outbox); err != nil {
		t.Fatalf("count outbox events: %v", err)
	}
	return b
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
