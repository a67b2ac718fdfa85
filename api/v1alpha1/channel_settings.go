package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// This file holds the channel settings that are shared, field for field, by the PaymentChannel
// spec and by callbackd's configuration file: the operator copies them from the spec into the
// rendered config, and callbackd validates them at start-up. One schema, not two. Key material is
// deliberately absent: the CRD refers to Secrets, the config file to mounted files.

// Provider names a channel adapter.
// +kubebuilder:validation:Enum=wechatpay;alipay;stripe;standardwebhooks
type Provider string

// The supported providers.
const (
	ProviderWeChatPay        Provider = "wechatpay"
	ProviderAlipay           Provider = "alipay"
	ProviderStripe           Provider = "stripe"
	ProviderStandardWebhooks Provider = "standardwebhooks"
)

// MerchantIdentity is who the channel receives notifications for. Notifications carrying another
// identity are refused, even when their signature is valid.
type MerchantIdentity struct {
	// MerchantID is the WeChat Pay mchid, the Alipay app_id, or the account id of a generic provider.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	MerchantID string `json:"merchantID"`
	// SubMerchantID is the WeChat Pay service-provider sub_mchid, when the channel is one.
	// +optional
	SubMerchantID string `json:"subMerchantID,omitempty"`
	// AppID is the WeChat Pay appid the payments are made through.
	// +optional
	AppID string `json:"appID,omitempty"`
	// SellerID is the Alipay seller_id (the merchant's PID), checked when set.
	// +optional
	SellerID string `json:"sellerID,omitempty"`
}

// TTLs are the lifetimes of the deduplication state. The success mark must outlive the provider's
// whole retry span, or a late retry would fall through to the database (harmless, but slower).
// Durations are omitzero so that a typed Go client leaves an unset one out and the CRD default
// applies (a zero metav1.Duration would otherwise be sent as "0s").
type TTLs struct {
	// Lock is how long a Redis claim is held while one request processes a key. Database
	// statement and lock timeouts are derived to stay below it.
	// +kubebuilder:default="10s"
	// +optional
	Lock metav1.Duration `json:"lock,omitempty,omitzero"`
	// SuccessMark is how long Redis remembers a finished key.
	// +kubebuilder:default="48h"
	// +optional
	SuccessMark metav1.Duration `json:"successMark,omitempty,omitzero"`
	// GatewayWindow is how long one replica remembers, in process, keys it finished itself.
	// +kubebuilder:default="60s"
	// +optional
	GatewayWindow metav1.Duration `json:"gatewayWindow,omitempty,omitzero"`
	// ReceiptRetention is how long callback receipts are kept in PostgreSQL. Orders and ledger
	// entries are kept for good.
	// +kubebuilder:default="720h"
	// +optional
	ReceiptRetention metav1.Duration `json:"receiptRetention,omitempty,omitzero"`
}

// GenericFields tells the generic adapters (stripe, standardwebhooks) where the business fields
// live in the JSON body, as dot-separated paths (e.g. "data.object.metadata.order_no"). An empty
// field takes its adapter's own default: Stripe's and Standard Webhooks' paths differ, so the
// CRD defaults none of them (a Standard Webhooks path on a stripe channel would acknowledge
// payments without booking them).
type GenericFields struct {
	// OrderNo is the path of the merchant order number.
	// +optional
	OrderNo string `json:"orderNo,omitempty"`
	// Amount is the path of the amount in minor units (an integer).
	// +optional
	Amount string `json:"amount,omitempty"`
	// Currency is the path of the ISO 4217 currency code.
	// +optional
	Currency string `json:"currency,omitempty"`
	// EventType is the path of the event type.
	// +optional
	EventType string `json:"eventType,omitempty"`
	// TransactionID is the path of the provider's transaction id.
	// +optional
	TransactionID string `json:"transactionID,omitempty"`
	// RefundNo is the path of the merchant refund number, for refund events.
	// +optional
	RefundNo string `json:"refundNo,omitempty"`
	// Account is the path of the merchant account the body carries (e.g. "account"). When set,
	// notifications whose account differs from merchant.merchantID are refused.
	// +optional
	Account string `json:"account,omitempty"`
	// PaidEvents are the event types that mean "payment succeeded".
	// +optional
	PaidEvents []string `json:"paidEvents,omitempty"`
	// RefundEvents are the event types that mean "refund succeeded".
	// +optional
	RefundEvents []string `json:"refundEvents,omitempty"`
	// ClosedEvents are the event types that mean "order closed unpaid".
	// +optional
	ClosedEvents []string `json:"closedEvents,omitempty"`
}

// DeliveryEndpoint is one of the merchant's systems that receives the channel's events as signed
// Standard Webhooks requests. Its signing secret is referenced separately (Secret or file).
type DeliveryEndpoint struct {
	// Name identifies the endpoint in metrics, logs and the webhook id.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// URL receives POST requests.
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// Events limits the endpoint to these event types; empty means all.
	// +optional
	Events []string `json:"events,omitempty"`
	// MaxConcurrency caps concurrent deliveries to this endpoint per replica.
	// +kubebuilder:default=8
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxConcurrency int32 `json:"maxConcurrency,omitempty"`
}

// Delivery is how the platform delivers side effects after commit: at least once, on its own
// retry schedule, never by making the provider retry.
type Delivery struct {
	// RetrySchedule is the wait before each retry after a failed attempt; after the last one the
	// event is dead-lettered.
	// +kubebuilder:default={"1m","5m","30m","2h","6h"}
	// +kubebuilder:validation:MaxItems=30
	// +optional
	RetrySchedule []metav1.Duration `json:"retrySchedule,omitempty"`
	// Endpoints receive the events.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Endpoints []DeliveryEndpoint `json:"endpoints,omitempty"`
	// Timeout of one delivery attempt.
	// +kubebuilder:default="10s"
	// +optional
	Timeout metav1.Duration `json:"timeout,omitempty,omitzero"`
}

// Reconciliation is the sweep that queries the provider for orders that stayed PENDING.
type Reconciliation struct {
	// Enabled turns the sweep on.
	// +kubebuilder:default=true
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// PendingAfter is how long an order may stay PENDING before the provider is asked.
	// +kubebuilder:default="10m"
	// +optional
	PendingAfter metav1.Duration `json:"pendingAfter,omitempty,omitzero"`
	// Interval between sweeps.
	// +kubebuilder:default="1m"
	// +optional
	Interval metav1.Duration `json:"interval,omitempty,omitzero"`
	// QueriesPerSecond bounds the provider queries of one sweep.
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +optional
	QueriesPerSecond int32 `json:"queriesPerSecond,omitempty"`
	// QueryBaseURL overrides the provider's query API base URL (paysim in tests and demos).
	// +optional
	QueryBaseURL string `json:"queryBaseURL,omitempty"`
}

// ChannelSettings are the per-channel settings shared by PaymentChannelSpec and callbackd's
// configuration file.
type ChannelSettings struct {
	// Provider selects the adapter. Immutable: a channel does not change provider.
	Provider Provider `json:"provider"`
	// Merchant is the identity notifications must carry.
	Merchant MerchantIdentity `json:"merchant"`
	// TTLs of the deduplication state.
	// +kubebuilder:default={}
	// +optional
	TTLs TTLs `json:"ttls,omitempty"`
	// ProviderRetrySchedule is the provider's own resend schedule (WeChat Pay: 15s, 15s, 30s,
	// 3m, 10m, 20m, 30m, 30m, 30m, 60m, 3h, 3h, 3h, 6h, 6h). The success mark must cover its sum;
	// paysim replays it.
	// +kubebuilder:validation:MaxItems=30
	// +optional
	ProviderRetrySchedule []metav1.Duration `json:"providerRetrySchedule,omitempty"`
	// TimestampTolerance is the accepted clock skew of signed timestamps (WeChat Pay, Stripe,
	// Standard Webhooks).
	// +kubebuilder:default="5m"
	// +optional
	TimestampTolerance metav1.Duration `json:"timestampTolerance,omitempty,omitzero"`
	// Generic configures the field paths of the stripe and standardwebhooks adapters.
	// +optional
	Generic *GenericFields `json:"generic,omitempty"`
	// Delivery of side effects to the merchant's systems.
	// +kubebuilder:default={}
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`
	// Reconciliation of orders that stayed PENDING.
	// +kubebuilder:default={}
	// +optional
	Reconciliation Reconciliation `json:"reconciliation,omitempty"`
}
