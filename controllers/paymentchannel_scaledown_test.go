package controllers

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// TestScaleDownStabilization: the HPA and the KEDA ScaledObject take the channel's scale-down
// window, and ten minutes when the channel leaves it unset.
func TestScaleDownStabilization(t *testing.T) {
	cases := []struct {
		name string
		set  *int32
		want int32
	}{
		{"unset keeps ten minutes", nil, 600},
		{"zero gives pods back at once", ptr.To[int32](0), 0},
		{"thirty seconds", ptr.To[int32](30), 30},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pc := builderChannel()
			pc.Spec.Autoscaling.ScaleDownStabilizationSeconds = c.set
			hpa := buildHPA(pc)
			if got := ptr.Deref(hpa.Spec.Behavior.ScaleDown.StabilizationWindowSeconds, -1); got != c.want {
				t.Errorf("HPA scaleDown.stabilizationWindowSeconds: expected %d, got %d", c.want, got)
			}
			got, found, err := unstructured.NestedInt64(buildScaledObject(pc).Object, "spec", "advanced",
				"horizontalPodAutoscalerConfig", "behavior", "scaleDown", "stabilizationWindowSeconds")
			if err != nil || !found || got != int64(c.want) {
				t.Errorf("ScaledObject scaleDown.stabilizationWindowSeconds: expected %d, got %d (found %v, %v)", c.want, got, found, err)
			}
		})
	}
}
