package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the API group and version of the PaymentChannel kind.
	GroupVersion = schema.GroupVersion{Group: "callbackd.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this group version with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the kinds of this group version to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
