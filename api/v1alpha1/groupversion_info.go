package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the API group and version of the PaymentChannel kind.
	GroupVersion = schema.GroupVersion{Group: "callbackd.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this group version with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this group version to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &PaymentChannel{}, &PaymentChannelList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
