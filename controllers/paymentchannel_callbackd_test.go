package controllers

import (
	"testing"

	"k8s.io/utils/ptr"
)

func TestCallbackdBuildersGolden(t *testing.T) {
	pc := builderChannel()
	in := deploymentInputs{Image: pc.Spec.Callbackd.Image, ConfigHash: "0123456789", SecretsHash: "abcdef0123"}
	golden(t, "deployment-autoscaled", buildDeployment(pc, in))
	in.Replicas = ptr.To[int32](2)
	golden(t, "deployment-fixed-replicas", buildDeployment(pc, in))
	golden(t, "service-callbackd", buildCallbackdService(pc))
	golden(t, "serviceaccount-callbackd", buildServiceAccount(pc))
	golden(t, "pdb-callbackd", buildCallbackdPDB(pc))
	golden(t, "networkpolicy-callbackd", buildCallbackdNetworkPolicy(pc))
}

// TestDeploymentMountsEveryReferencedSecret: each Secret the config names is mounted, as a
// directory (never subPath, so rotations reach running pods).
func TestDeploymentMountsEveryReferencedSecret(t *testing.T) {
	pc := builderChannel()
	d := buildDeployment(pc, deploymentInputs{Image: "x"})
	c := d.Spec.Template.Spec.Containers[0]
	mounted := map[string]bool{}
	for _, m := range c.VolumeMounts {
		if m.SubPath != nil {
			t.Errorf("volume mount %s: expected no subPath, got %q", *m.Name, *m.SubPath)
		}
		mounted[*m.MountPath] = true
	}
	for _, m := range mountsFor(pc).all {
		if !mounted[m.mountPath] {
			t.Errorf("Secret %s: expected it mounted at %s, got no mount", m.secret, m.mountPath)
		}
	}
	if d.Spec.Replicas != nil {
		t.Errorf("replicas: expected none with an autoscaler, got %d", *d.Spec.Replicas)
	}
}
