package controllers

import (
	"fmt"
	"path"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// FieldOwner is the server-side apply field manager of everything the operator writes.
const FieldOwner = "callback-platform-operator"

// Labels and annotations the operator sets.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	// LabelChannel names the PaymentChannel a child belongs to.
	LabelChannel = "callbackd.io/channel"

	// AnnotationConfigHash is the hash of the rendered callbackd configuration, on the pod
	// template, so that a configuration change rolls the pods.
	AnnotationConfigHash = "callbackd.io/config-hash"
	// AnnotationSecretsHash is the hash of every referenced Secret's content, on the pod
	// template, so that a key rotation rolls the pods.
	AnnotationSecretsHash = "callbackd.io/secrets-hash"
	// AnnotationMigrationImage records, on a migration Job, the callbackd image it migrates for.
	AnnotationMigrationImage = "callbackd.io/migration-image"
)

// The components of a channel.
const (
	ComponentCallbackd = "callbackd"
	ComponentMigration = "migration"
	ComponentRedis     = "redis"
	ComponentSentinel  = "sentinel"
)

// Where callbackd finds its files.
const (
	configMountPath  = "/etc/callbackd/config"
	configFileName   = "callbackd.yaml"
	secretsMountRoot = "/etc/callbackd/secrets"

	httpPort     = 8080
	metricsPort  = 9090
	redisPort    = 6379
	sentinelPort = 26379

	// redisMasterName is the Sentinel master group name of a managed topology.
	redisMasterName = "callbackd"

	// nonRootUID runs every container the operator creates.
	nonRootUID = 65532
)

// configFilePath is the callbackd configuration file inside the pods.
var configFilePath = path.Join(configMountPath, configFileName)

func callbackdName(pc *callbackdv1alpha1.PaymentChannel) string { return pc.Name + "-callbackd" }
func configMapName(pc *callbackdv1alpha1.PaymentChannel) string {
	return pc.Name + "-callbackd-config"
}
func redisName(pc *callbackdv1alpha1.PaymentChannel) string    { return pc.Name + "-redis" }
func sentinelName(pc *callbackdv1alpha1.PaymentChannel) string { return pc.Name + "-sentinel" }
func redisConfigName(pc *callbackdv1alpha1.PaymentChannel) string {
	return pc.Name + "-redis-config"
}

// selectorLabels select the pods of one component of one channel.
func selectorLabels(pc *callbackdv1alpha1.PaymentChannel, component string) map[string]string {
	return map[string]string{
		LabelChannel:   pc.Name,
		LabelComponent: component,
	}
}

// objectLabels are set on every child object (and pod template) of a component.
func objectLabels(pc *callbackdv1alpha1.PaymentChannel, component string) map[string]string {
	l := selectorLabels(pc, component)
	l[LabelName] = "callbackd"
	if component == ComponentRedis || component == ComponentSentinel {
		l[LabelName] = "redis"
	}
	l[LabelInstance] = pc.Name
	l[LabelManagedBy] = FieldOwner
	l[LabelPartOf] = "callback-platform"
	return l
}

// ownerReference makes the PaymentChannel the controller of a child, so that deleting the
// channel deletes the child (Kubernetes' garbage collector, not a finalizer).
func ownerReference(pc *callbackdv1alpha1.PaymentChannel) *metav1ac.OwnerReferenceApplyConfiguration {
	return metav1ac.OwnerReference().
		WithAPIVersion(callbackdv1alpha1.GroupVersion.String()).
		WithKind("PaymentChannel").
		WithName(pc.Name).
		WithUID(pc.UID).
		WithController(true).
		WithBlockOwnerDeletion(true)
}

// secretMount is one referenced Secret mounted into the callbackd pods. items nil mounts every
// key of the Secret (a directory of keys); otherwise only the listed keys, renamed.
type secretMount struct {
	volume    string
	secret    string
	mountPath string
	items     []corev1.KeyToPath
}

// file returns the path of the mount's (single) item.
func (m secretMount) file() string { return path.Join(m.mountPath, m.items[0].Path) }

// channelMounts is every Secret a channel's callbackd pods mount, with the config-file paths
// they provide. One volume per reference, mounted as a directory (never subPath), so the
// kubelet refreshes rotated keys in place.
type channelMounts struct {
	all []secretMount

	wechatAPIv3Key, wechatPublicKeys, wechatMerchantKey *secretMount
	alipayPublicKey, alipayAppPrivateKey                *secretMount
	webhookSecrets                                      []secretMount
	database, merchantAPITokens, deliverySecrets        *secretMount
	redisPassword                                       *secretMount
}

// mountsFor lists the Secret mounts of a channel, in a stable order.
func mountsFor(pc *callbackdv1alpha1.PaymentChannel) channelMounts {
	var m channelMounts
	add := func(volume, secret string, items ...corev1.KeyToPath) *secretMount {
		sm := secretMount{
			volume:    volume,
			secret:    secret,
			mountPath: path.Join(secretsMountRoot, volume),
			items:     items,
		}
		m.all = append(m.all, sm)
		return &m.all[len(m.all)-1]
	}
	item := func(ref callbackdv1alpha1.SecretKeyRef, file string) corev1.KeyToPath {
		return corev1.KeyToPath{Key: ref.Key, Path: file}
	}
	// m.all is appended to while pointers into it are kept: size it first so that it never
	// reallocates.
	m.all = make([]secretMount, 0, 10+len(pc.Spec.Keys.WebhookSecrets))

	spec := &pc.Spec
	m.database = add("database", spec.Database.DSNSecret.Name, item(spec.Database.DSNSecret, "dsn"))
	k := spec.Keys
	if k.WeChatAPIv3Key != nil {
		m.wechatAPIv3Key = add("wechat-apiv3-key", k.WeChatAPIv3Key.Name, item(*k.WeChatAPIv3Key, "apiv3.key"))
	}
	if k.WeChatPublicKeys != nil {
		m.wechatPublicKeys = add("wechat-public-keys", k.WeChatPublicKeys.Name)
	}
	if k.WeChatMerchantKey != nil {
		m.wechatMerchantKey = add("wechat-merchant-key", k.WeChatMerchantKey.Name, item(*k.WeChatMerchantKey, "merchant.pem"))
	}
	if k.AlipayPublicKey != nil {
		m.alipayPublicKey = add("alipay-public-key", k.AlipayPublicKey.Name, item(*k.AlipayPublicKey, "alipay-public.pem"))
	}
	if k.AlipayAppPrivateKey != nil {
		m.alipayAppPrivateKey = add("alipay-app-private-key", k.AlipayAppPrivateKey.Name, item(*k.AlipayAppPrivateKey, "app-private.pem"))
	}
	for i, ref := range k.WebhookSecrets {
		sm := add("webhook-secret-"+strconv.Itoa(i), ref.Name, item(ref, "secret"))
		m.webhookSecrets = append(m.webhookSecrets, *sm)
	}
	if spec.MerchantAPITokens != nil {
		m.merchantAPITokens = add("merchant-api-tokens", spec.MerchantAPITokens.Name, item(*spec.MerchantAPITokens, "tokens"))
	}
	if spec.DeliverySecrets != nil {
		m.deliverySecrets = add("delivery-secrets", spec.DeliverySecrets.Name)
	}
	if spec.Redis.Mode == callbackdv1alpha1.RedisExternal && spec.Redis.External != nil && spec.Redis.External.PasswordSecret != nil {
		ref := *spec.Redis.External.PasswordSecret
		m.redisPassword = add("redis-password", ref.Name, item(ref, "password"))
	}
	return m
}

// referencedSecretNames lists the distinct Secrets a channel refers to (the field index that
// maps a Secret event to the channels that mount it).
func referencedSecretNames(pc *callbackdv1alpha1.PaymentChannel) []string {
	seen := map[string]bool{}
	var names []string
	for _, m := range mountsFor(pc).all {
		if !seen[m.secret] {
			seen[m.secret] = true
			names = append(names, m.secret)
		}
	}
	return names
}

// shortHash is a short, stable, label-safe digest.
func shortHash(sum []byte) string { return fmt.Sprintf("%x", sum)[:10] }
