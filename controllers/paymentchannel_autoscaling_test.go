package controllers

import "testing"

func TestAutoscalingBuildersGolden(t *testing.T) {
	pc := builderChannel()
	golden(t, "hpa-callbackd", buildHPA(pc))
	golden(t, "scaledobject-callbackd", buildScaledObject(pc).Object)

	pc.Spec.Autoscaling.PodMetric = nil
	if got := len(buildHPA(pc).Spec.Metrics); got != 1 {
		t.Fatalf("HPA metrics without a pod metric: expected CPU alone, got %d metrics", got)
	}
}
