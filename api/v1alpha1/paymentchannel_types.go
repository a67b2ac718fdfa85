package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SecretKeyRef names one key of a Secret in the PaymentChannel's namespace. The key becomes a
// file in the callbackd pods; the operator never copies its content anywhere else.
type SecretKeyRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Key within the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	Key string `json:"key"`
}

// SecretRef names a whole Secret in the PaymentChannel's namespace; every key becomes a file.
type SecretRef struct {
	// Name of the Secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// ChannelKeys references the key material of the channel's provider. Which references are
// required depends on spec.provider (the CRD says which one is missing).
type ChannelKeys struct {
	// WeChatAPIv3Key is the 32-byte WeChat Pay APIv3 key that decrypts notification resources.
	// +optional
	WeChatAPIv3Key *SecretKeyRef `json:"wechatAPIv3Key,omitempty"`
	// WeChatPublicKeys is a Secret holding the WeChat Pay platform certificates and public keys,
	// one PEM per key, each named by its serial or PUB_KEY_ID_... id plus ".pem". Both kinds
	// verify at once, which is what WeChat's certificate-to-public-key migration needs.
	// +optional
	WeChatPublicKeys *SecretRef `json:"wechatPublicKeys,omitempty"`
	// WeChatMerchantKey is the merchant's API private key (PEM) that signs active queries.
	// +optional
	WeChatMerchantKey *SecretKeyRef `json:"wechatMerchantKey,omitempty"`
	// WeChatMerchantSerial is the serial number of the merchant API certificate.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	WeChatMerchantSerial string `json:"wechatMerchantSerial,omitempty"`
	// AlipayPublicKey is the Alipay public key (PEM or bare base64) that verifies notifications.
	// +optional
	AlipayPublicKey *SecretKeyRef `json:"alipayPublicKey,omitempty"`
	// AlipayAppPrivateKey is the application private key that signs alipay.trade.query.
	// +optional
	AlipayAppPrivateKey *SecretKeyRef `json:"alipayAppPrivateKey,omitempty"`
	// WebhookSecrets are the HMAC secrets of the stripe and standardwebhooks providers; list
	// the new one beside the old one during a rotation.
	// +kubebuilder:validation:MaxItems=4
	// +optional
	WebhookSecrets []SecretKeyRef `json:"webhookSecrets,omitempty"`
}

// DatabaseSpec is the channel's PostgreSQL database.
type DatabaseSpec struct {
	// DSNSecret holds the PostgreSQL connection string. A change of database (a new DSN) runs
	// the schema migration again before the Deployment uses it.
	DSNSecret SecretKeyRef `json:"dsnSecret"`
	// MaxConns is the connection pool size of one callbackd replica.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=500
	// +optional
	MaxConns int32 `json:"maxConns,omitempty"`
}

// CallbackdSpec is the callbackd workload.
type CallbackdSpec struct {
	// Image of callbackd. A new image is used only after its schema migration Job completed.
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// ImagePullPolicy of the callbackd and migration containers.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// ImagePullSecrets of the callbackd and migration pods.
	// +optional
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// Replicas when autoscaling is off. With autoscaling on, the autoscaler owns the count and
	// the operator never writes it.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Resources of the callbackd container. CPU requests matter: the HPA scales on them.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// NodeSelector of the callbackd pods.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations of the callbackd pods.
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
}

// AutoscalingMode selects what scales callbackd.
// +kubebuilder:validation:Enum=off;hpa;keda
type AutoscalingMode string

// The autoscaling modes.
const (
	// AutoscalingOff keeps spec.callbackd.replicas.
	AutoscalingOff AutoscalingMode = "off"
	// AutoscalingHPA creates an autoscaling/v2 HorizontalPodAutoscaler.
	AutoscalingHPA AutoscalingMode = "hpa"
	// AutoscalingKEDA creates a KEDA ScaledObject, when the KEDA CRDs are installed.
	AutoscalingKEDA AutoscalingMode = "keda"
)

// PodMetricTarget scales on a per-pod callbackd metric (for example in-flight callbacks or due
// outbox retries), averaged over the pods.
type PodMetricTarget struct {
	// Name of the metric as the metrics adapter (or Prometheus, for KEDA) exposes it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// TargetAverageValue is the per-pod value the autoscaler aims for.
	TargetAverageValue resource.Quantity `json:"targetAverageValue"`
}

// KEDASpec configures the KEDA ScaledObject.
type KEDASpec struct {
	// PrometheusServerAddress is where KEDA queries the per-pod metric (required with
	// autoscaling.podMetric).
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	PrometheusServerAddress string `json:"prometheusServerAddress,omitempty"`
	// PollingInterval in seconds.
	// +kubebuilder:default=15
	// +kubebuilder:validation:Minimum=1
	// +optional
	PollingInterval int32 `json:"pollingInterval,omitempty"`
}

// AutoscalingSpec scales callbackd: scale-up is fast (a retry storm does not wait), scale-down
// slow (providers retry in waves).
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.maxReplicas >= self.minReplicas",message="autoscaling.maxReplicas must be at least autoscaling.minReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'keda' || !has(self.podMetric) || (has(self.keda) && has(self.keda.prometheusServerAddress))",message="autoscaling.keda.prometheusServerAddress is required when KEDA scales on autoscaling.podMetric"
type AutoscalingSpec struct {
	// Mode: off (spec.callbackd.replicas), hpa, or keda (falls back to no autoscaler, with the
	// Scaling condition False, when the KEDA CRDs are not installed).
	// +kubebuilder:default=off
	// +optional
	Mode AutoscalingMode `json:"mode,omitempty"`
	// MinReplicas is the floor of the autoscaler.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinReplicas int32 `json:"minReplicas,omitempty"`
	// MaxReplicas is the ceiling of the autoscaler.
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxReplicas int32 `json:"maxReplicas,omitempty"`
	// TargetCPUUtilization is the average CPU utilization (percent of requests) aimed for.
	// +kubebuilder:default=70
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	TargetCPUUtilization int32 `json:"targetCPUUtilization,omitempty"`
	// ScaleDownStabilizationSeconds is how long the autoscaler waits after the load drops before
	// it gives pods back (the highest recommendation within the window wins). Providers resend in
	// waves, so the default is long; a short window suits test and staging clusters.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	ScaleDownStabilizationSeconds *int32 `json:"scaleDownStabilizationSeconds,omitempty"`
	// PodMetric adds a per-pod callbackd metric to CPU.
	// +optional
	PodMetric *PodMetricTarget `json:"podMetric,omitempty"`
	// KEDA settings, used when mode is keda.
	// +optional
	KEDA *KEDASpec `json:"keda,omitempty"`
}

// RedisMode selects where the deduplication Redis comes from.
// +kubebuilder:validation:Enum=managed;external;disabled
type RedisMode string

// The Redis modes.
const (
	// RedisManaged runs a Redis StatefulSet and a Sentinel StatefulSet for the channel.
	RedisManaged RedisMode = "managed"
	// RedisExternal connects to a Redis or Sentinel group run by someone else.
	RedisExternal RedisMode = "external"
	// RedisDisabled runs callbackd on its database gates alone (still exactly once, slower).
	RedisDisabled RedisMode = "disabled"
)

// RedisStorage is the persistent volume of each Redis instance.
type RedisStorage struct {
	// Size of each volume.
	// +kubebuilder:default="1Gi"
	// +optional
	Size resource.Quantity `json:"size,omitempty,omitzero"`
	// StorageClassName of the volumes; empty uses the cluster default.
	// +optional
	StorageClassName *string `json:"storageClassName,omitempty"`
}

// ManagedRedis is a Redis replication group watched by Sentinel. The operator bootstraps it
// (instance 0 starts as master) and then leaves failover to Sentinel alone.
// +kubebuilder:validation:XValidation:rule="!has(self.quorum) || !has(self.sentinels) || self.quorum <= self.sentinels",message="redis.managed.quorum cannot exceed redis.managed.sentinels"
type ManagedRedis struct {
	// Image of Redis and Sentinel.
	// +kubebuilder:default="redis:7.4"
	// +kubebuilder:validation:MinLength=1
	// +optional
	Image string `json:"image,omitempty"`
	// Instances is the number of Redis servers (one master, the rest replicas).
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	Instances int32 `json:"instances,omitempty"`
	// Sentinels is the number of Sentinel processes.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=9
	// +optional
	Sentinels int32 `json:"sentinels,omitempty"`
	// Quorum is the number of Sentinels that must agree the master is down.
	// +kubebuilder:default=2
	// +kubebuilder:validation:Minimum=1
	// +optional
	Quorum int32 `json:"quorum,omitempty"`
	// Storage of each Redis instance.
	// +kubebuilder:default={}
	// +optional
	Storage RedisStorage `json:"storage,omitempty"`
	// Resources of each Redis container.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// SentinelResources of each Sentinel container.
	// +optional
	SentinelResources corev1.ResourceRequirements `json:"sentinelResources,omitempty"`
}

// ExternalRedis is a Redis (addr) or Sentinel group (sentinelAddrs + masterName) run elsewhere.
// +kubebuilder:validation:XValidation:rule="has(self.addr) != has(self.sentinelAddrs)",message="set exactly one of redis.external.addr and redis.external.sentinelAddrs"
// +kubebuilder:validation:XValidation:rule="!has(self.sentinelAddrs) || has(self.masterName)",message="redis.external.masterName is required with sentinelAddrs"
type ExternalRedis struct {
	// Addr is host:port of a single Redis.
	// +kubebuilder:validation:Pattern=`^[^:]+:[0-9]+$`
	// +optional
	Addr string `json:"addr,omitempty"`
	// SentinelAddrs are host:port of the Sentinels.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=9
	// +kubebuilder:validation:items:Pattern=`^[^:]+:[0-9]+$`
	// +optional
	SentinelAddrs []string `json:"sentinelAddrs,omitempty"`
	// MasterName is the Sentinel master group name.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	MasterName string `json:"masterName,omitempty"`
	// PasswordSecret holds the Redis password.
	// +optional
	PasswordSecret *SecretKeyRef `json:"passwordSecret,omitempty"`
}

// RedisSpec is the Redis used by the claim gate. Correctness never depends on it.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'external' || has(self.external)",message="redis.external is required when redis.mode is external"
type RedisSpec struct {
	// Mode: managed (default), external or disabled.
	// +kubebuilder:default=managed
	// +optional
	Mode RedisMode `json:"mode,omitempty"`
	// Managed Sentinel topology settings, used when mode is managed.
	// +kubebuilder:default={}
	// +optional
	Managed ManagedRedis `json:"managed,omitempty"`
	// External Redis, used when mode is external.
	// +optional
	External *ExternalRedis `json:"external,omitempty"`
}

// PaymentChannelSpec is one provider account (mchid / app_id): the settings callbackd shares
// with its configuration file, plus where its Secrets, database, workload and Redis come from.
//
// +kubebuilder:validation:XValidation:rule="self.provider == oldSelf.provider",message="provider is immutable: create a new PaymentChannel instead"
// +kubebuilder:validation:XValidation:rule="self.merchant == oldSelf.merchant",message="merchant identity is immutable: create a new PaymentChannel instead"
// +kubebuilder:validation:XValidation:rule="duration(self.ttls.successMark) >= (has(self.providerRetrySchedule) && size(self.providerRetrySchedule) > 0 ? self.providerRetrySchedule.map(d, duration(d)).sum() : self.provider == 'wechatpay' ? duration('24h4m') : self.provider == 'alipay' ? duration('24h24m') : duration('0s'))",message="ttls.successMark must cover the provider's whole retry span (the sum of providerRetrySchedule, or the provider's default schedule)"
// +kubebuilder:validation:XValidation:rule="!has(self.providerRetrySchedule) || self.providerRetrySchedule.all(d, duration(d) > duration('0s'))",message="providerRetrySchedule entries must be positive"
// +kubebuilder:validation:XValidation:rule="!has(self.providerRetrySchedule) || self.providerRetrySchedule.map(d, duration(d)).isSorted()",message="providerRetrySchedule must not decrease"
// +kubebuilder:validation:XValidation:rule="!has(self.delivery.retrySchedule) || self.delivery.retrySchedule.all(d, duration(d) > duration('0s'))",message="delivery.retrySchedule entries must be positive"
// +kubebuilder:validation:XValidation:rule="!has(self.delivery.retrySchedule) || self.delivery.retrySchedule.map(d, duration(d)).isSorted()",message="delivery.retrySchedule must not decrease"
// +kubebuilder:validation:XValidation:rule="duration(self.ttls.lock) > duration('4s')",message="ttls.lock must exceed 4s, callbackd's request timeout, so that a claim outlives the work it guards"
// +kubebuilder:validation:XValidation:rule="duration(self.ttls.gatewayWindow) > duration('0s') && duration(self.ttls.gatewayWindow) <= duration(self.ttls.successMark)",message="ttls.gatewayWindow must be positive and not exceed ttls.successMark"
// +kubebuilder:validation:XValidation:rule="duration(self.ttls.receiptRetention) >= duration(self.ttls.successMark)",message="ttls.receiptRetention must not be shorter than ttls.successMark"
// +kubebuilder:validation:XValidation:rule="self.provider != 'wechatpay' || (has(self.keys.wechatAPIv3Key) && has(self.keys.wechatPublicKeys))",message="provider wechatpay requires keys.wechatAPIv3Key and keys.wechatPublicKeys"
// +kubebuilder:validation:XValidation:rule="self.provider != 'alipay' || has(self.keys.alipayPublicKey)",message="provider alipay requires keys.alipayPublicKey"
// +kubebuilder:validation:XValidation:rule="!(self.provider in ['stripe', 'standardwebhooks']) || (has(self.keys.webhookSecrets) && size(self.keys.webhookSecrets) > 0)",message="providers stripe and standardwebhooks require keys.webhookSecrets"
// +kubebuilder:validation:XValidation:rule="!has(self.delivery.endpoints) || size(self.delivery.endpoints) == 0 || has(self.deliverySecrets)",message="delivery.endpoints require deliverySecrets (one signing secret per endpoint name)"
type PaymentChannelSpec struct {
	// ChannelSettings are shared, field for field, with callbackd's configuration file.
	ChannelSettings `json:",inline"`

	// Keys references the provider key material.
	Keys ChannelKeys `json:"keys"`
	// Database is the channel's PostgreSQL database.
	Database DatabaseSpec `json:"database"`
	// MerchantAPITokens holds the bearer tokens of the merchant-facing API, one per line.
	// +optional
	MerchantAPITokens *SecretKeyRef `json:"merchantAPITokens,omitempty"`
	// DeliverySecrets holds one Standard Webhooks signing secret per delivery endpoint, keyed by
	// the endpoint name.
	// +optional
	DeliverySecrets *SecretRef `json:"deliverySecrets,omitempty"`
	// Callbackd is the workload.
	Callbackd CallbackdSpec `json:"callbackd"`
	// Autoscaling of callbackd.
	// +kubebuilder:default={}
	// +optional
	Autoscaling AutoscalingSpec `json:"autoscaling,omitempty"`
	// Redis used by the claim gate.
	// +kubebuilder:default={}
	// +optional
	Redis RedisSpec `json:"redis,omitempty"`
}

// Condition types of a PaymentChannel.
const (
	// ConditionReady is True when every other condition is True.
	ConditionReady = "Ready"
	// ConditionConfigValid is True when the referenced Secrets exist and the rendered callbackd
	// configuration passes callbackd's own validation.
	ConditionConfigValid = "ConfigValid"
	// ConditionSchemaMigrated is True when the migration Job of the current (database, image)
	// pair completed.
	ConditionSchemaMigrated = "SchemaMigrated"
	// ConditionRedisReady is True when the Redis topology is ready (or not managed here).
	ConditionRedisReady = "RedisReady"
	// ConditionCallbackdAvailable is True when the callbackd Deployment is available.
	ConditionCallbackdAvailable = "CallbackdAvailable"
	// ConditionScaling is True when the requested autoscaler is in place (or autoscaling is off).
	ConditionScaling = "Scaling"
)

// PaymentChannelStatus is what the operator observed.
type PaymentChannelStatus struct {
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, ConfigValid, SchemaMigrated, RedisReady, CallbackdAvailable, Scaling.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Image is the callbackd image the Deployment runs: the newest one whose migration completed.
	// +optional
	Image string `json:"image,omitempty"`
	// MigrationJob is the name of the migration Job of the desired (database, image) pair.
	// +optional
	MigrationJob string `json:"migrationJob,omitempty"`
	// Replicas is the number of callbackd pods.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas is the number of ready callbackd pods.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
}

// PaymentChannel is one payment provider account served by callbackd: the operator runs its
// callbackd Deployment, Redis Sentinel topology, schema migrations and autoscaling.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pch;paych,categories=callbackd
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.provider`
// +kubebuilder:printcolumn:name="Merchant",type=string,JSONPath=`.spec.merchant.merchantID`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Image",type=string,JSONPath=`.status.image`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 40 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label of at most 40 characters: it names /notify/{channel} and the child objects"
type PaymentChannel struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired channel.
	Spec PaymentChannelSpec `json:"spec"`
	// Status is what the operator observed.
	// +optional
	Status PaymentChannelStatus `json:"status,omitempty"`
}

// PaymentChannelList is a list of PaymentChannels.
//
// +kubebuilder:object:root=true
type PaymentChannelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the channels.
	Items []PaymentChannel `json:"items"`
}
