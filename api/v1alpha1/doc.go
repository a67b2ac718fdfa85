// Package v1alpha1 contains the PaymentChannel API (group callbackd.io, version v1alpha1) and the
// channel settings that callbackd's configuration file shares with it.
// +kubebuilder:object:generate=true
// +groupName=callbackd.io
package v1alpha1
