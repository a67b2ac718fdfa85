package controllers

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// TestSecretEditRollsPodTemplate runs the controller in a manager (watches, the Secret field
// index, metadata-only Secret watch) and edits a referenced Secret: the Deployment's pod
// template annotation changes without anyone touching the channel.
func TestSecretEditRollsPodTemplate(t *testing.T) {
	c := kube(t)
	ns := newNamespace(t, c)

	mgr, err := ctrl.NewManager(envCfg, ctrl.Options{
		Scheme:                 envScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// Only one test starts a manager, but -count=N would register the controller again.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatalf("create manager: %v", err)
	}
	r := &PaymentChannelReconciler{
		Client:                mgr.GetClient(),
		APIReader:             mgr.GetAPIReader(),
		Recorder:              mgr.GetEventRecorder(FieldOwner),
		Discovery:             RESTMapperDiscovery{Mapper: mgr.GetRESTMapper()},
		MigrationPollInterval: 200 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := r.SetupWithManager(ctx, mgr, 2); err != nil {
		t.Fatalf("set up controller: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})

	createSecrets(t, c, ns)
	pc := newChannel(ns, "rotate")
	if err := c.Create(context.Background(), pc); err != nil {
		t.Fatalf("create channel: %v", err)
	}
	var job string
	eventually(t, "first migration Job", 20*time.Second, func() (bool, string) {
		job = getChannel(t, c, ns, "rotate").Status.MigrationJob
		return job != "", "status.migrationJob empty"
	})
	setJobStatus(t, c, ns, job, true)

	d := &appsv1.Deployment{}
	d.Namespace, d.Name = ns, callbackdName(pc)
	var before string
	eventually(t, "Deployment created after the migration", 20*time.Second, func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(d), d); err != nil {
			return false, err.Error()
		}
		before = d.Spec.Template.Annotations[AnnotationSecretsHash]
		return before != "", "no secrets hash yet"
	})

	// Rotate the APIv3 key.
	s := &corev1.Secret{}
	s.Namespace, s.Name = ns, "wechat-keys"
	get(t, c, s)
	s.Data["apiv3"] = []byte("fedcba9876543210fedcba9876543210")
	if err := c.Update(context.Background(), s); err != nil {
		t.Fatalf("rotate Secret: %v", err)
	}
	eventually(t, "pod-template secrets hash changed", 20*time.Second, func() (bool, string) {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(d), d); err != nil {
			return false, err.Error()
		}
		got := d.Spec.Template.Annotations[AnnotationSecretsHash]
		return got != before, "still " + got
	})

	// An unrelated Secret changes nothing.
	rv := d.ResourceVersion
	other := &corev1.Secret{}
	other.Namespace, other.Name = ns, "unrelated"
	other.StringData = map[string]string{"x": "y"}
	if err := c.Create(context.Background(), other); err != nil {
		t.Fatalf("create unrelated Secret: %v", err)
	}
	time.Sleep(time.Second)
	get(t, c, d)
	if d.ResourceVersion != rv {
		t.Fatalf("Deployment after an unrelated Secret: expected resourceVersion %s, got %s", rv, d.ResourceVersion)
	}
}
