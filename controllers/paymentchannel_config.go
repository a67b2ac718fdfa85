package controllers

import (
	"crypto/sha256"
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
)

// callbackd's listen addresses inside the pod: the provider- and merchant-facing API, and
// /metrics, /healthz and /readyz apart from it so that probes never queue behind callbacks.
// callbackdShutdownDelay plus callbackd's shutdown timeout (20 s) stays within the pod's
// termination grace period (callbackdTerminationGrace).
const callbackdShutdownDelay = 5 * time.Second

var (
	listenAddr        = ":" + strconv.Itoa(httpPort)
	metricsListenAddr = ":" + strconv.Itoa(metricsPort)
)

// buildConfigFile renders the callbackd configuration of a channel: its ChannelSettings copied
// as they are (one schema, not two), and every key, DSN and token as the path of the mounted
// Secret file the Deployment provides, with callbackd's defaults written out.
func buildConfigFile(pc *callbackdv1alpha1.PaymentChannel) config.File {
	m := mountsFor(pc)
	f := config.File{
		Listen:        listenAddr,
		MetricsListen: metricsListenAddr,
		Database: config.Database{
			DSNFile:  m.database.file(),
			MaxConns: pc.Spec.Database.MaxConns,
		},
		Redis: buildRedisConnection(pc, m),
	}
	if m.merchantAPITokens != nil {
		f.APITokensFile = m.merchantAPITokens.file()
	}
	var keys config.KeyFiles
	if m.wechatAPIv3Key != nil {
		keys.WeChatAPIv3KeyFile = m.wechatAPIv3Key.file()
	}
	if m.wechatPublicKeys != nil {
		keys.WeChatPublicKeyDir = m.wechatPublicKeys.mountPath
	}
	if m.wechatMerchantKey != nil {
		keys.WeChatMerchantKeyFile = m.wechatMerchantKey.file()
		keys.WeChatMerchantSerial = pc.Spec.Keys.WeChatMerchantSerial
	}
	if m.alipayPublicKey != nil {
		keys.AlipayPublicKeyFile = m.alipayPublicKey.file()
	}
	if m.alipayAppPrivateKey != nil {
		keys.AlipayAppPrivateKeyFile = m.alipayAppPrivateKey.file()
	}
	for _, w := range m.webhookSecrets {
		keys.WebhookSecretFiles = append(keys.WebhookSecretFiles, w.file())
	}
	if m.deliverySecrets != nil {
		keys.DeliverySecretDir = m.deliverySecrets.mountPath
	}
	f.Channels = []config.Channel{{
		Name:            pc.Name,
		ChannelSettings: *pc.Spec.ChannelSettings.DeepCopy(),
		Keys:            keys,
	}}
	// Keep serving, with /readyz failing, while the endpoints controller and the load balancers
	// take the terminating pod out: the pod has no shell for a preStop sleep.
	f.Server.ShutdownDelay = metav1.Duration{Duration: callbackdShutdownDelay}
	// Render every default explicitly: the ConfigMap then shows what callbackd runs with.
	f.SetDefaults()
	return f
}

// buildRedisConnection points callbackd at the channel's Redis: every Sentinel of the managed
// topology by its stable DNS name, the external group or server, or none.
func buildRedisConnection(pc *callbackdv1alpha1.PaymentChannel, m channelMounts) *config.Redis {
	switch pc.Spec.Redis.Mode {
	case callbackdv1alpha1.RedisDisabled:
		return nil
	case callbackdv1alpha1.RedisExternal:
		ext := pc.Spec.Redis.External
		if ext == nil {
			return nil
		}
		r := &config.Redis{
			Addr:          ext.Addr,
			SentinelAddrs: append([]string(nil), ext.SentinelAddrs...),
			MasterName:    ext.MasterName,
		}
		if m.redisPassword != nil {
			r.PasswordFile = m.redisPassword.file()
		}
		return r
	default:
		return &config.Redis{
			SentinelAddrs: sentinelAddrs(pc),
			MasterName:    redisMasterName,
		}
	}
}

// sentinelAddrs are the stable per-pod DNS names of the managed Sentinels.
func sentinelAddrs(pc *callbackdv1alpha1.PaymentChannel) []string {
	n := pc.Spec.Redis.Managed.Sentinels
	addrs := make([]string, 0, n)
	for i := range n {
		addrs = append(addrs, fmt.Sprintf("%s:%d", podFQDN(pc, sentinelName(pc), int(i)), sentinelPort))
	}
	return addrs
}

// podFQDN is the DNS name of pod i of a StatefulSet governed by the headless Service of the
// same name.
func podFQDN(pc *callbackdv1alpha1.PaymentChannel, sts string, i int) string {
	return fmt.Sprintf("%s-%d.%s.%s.svc", sts, i, sts, pc.Namespace)
}

// renderConfig returns the rendered configuration document and its hash. The document is what
// callbackd reads; validating it with callbackd's own loader (defaults, then Validate) is what
// the ConfigValid condition reports.
func renderConfig(pc *callbackdv1alpha1.PaymentChannel) (data []byte, hash string, err error) {
	f := buildConfigFile(pc)
	data, err = yaml.Marshal(f)
	if err != nil {
		return nil, "", fmt.Errorf("render callbackd config: %w", err)
	}
	sum := sha256.Sum256(data)
	return data, shortHash(sum[:]), nil
}

// validateRenderedConfig checks a rendered document exactly as `callbackd serve` will, minus
// reading the mounted files (which exist only in the pod).
func validateRenderedConfig(data []byte) error {
	f, err := config.Parse(data)
	if err != nil {
		return err
	}
	f.SetDefaults()
	return f.Validate()
}

// buildConfigMap is the ConfigMap holding the rendered configuration.
func buildConfigMap(pc *callbackdv1alpha1.PaymentChannel, data []byte) *corev1ac.ConfigMapApplyConfiguration {
	return corev1ac.ConfigMap(configMapName(pc), pc.Namespace).
		WithLabels(objectLabels(pc, ComponentCallbackd)).
		WithOwnerReferences(ownerReference(pc)).
		WithData(map[string]string{configFileName: string(data)})
}
