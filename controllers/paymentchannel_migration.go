package controllers

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	batchv1ac "k8s.io/client-go/applyconfigurations/batch/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// Migration Job limits: a migration is short (forward-only, advisory-locked); a Job that keeps
// failing or hangs must end so that its failure reaches the status.
const (
	migrationBackoffLimit   = 2
	migrationActiveDeadline = 600
	migrationGraceSeconds   = 30
)

// buildMigrationJob is the Job that runs `callbackd migrate` for one (database, image) pair.
// Its name carries a digest of the database (the DSN's content) and of the pod template (the
// image, pull settings), so a new image or a new database gets a new Job while an unchanged
// pair finds the Job that already ran. Only the configuration and the DSN are mounted: a
// migration needs no provider key.
func buildMigrationJob(pc *callbackdv1alpha1.PaymentChannel, image, databaseHash string) (*batchv1ac.JobApplyConfiguration, error) {
	cd := pc.Spec.Callbackd
	db := mountsFor(pc).database
	container := corev1ac.Container().
		WithName("migrate").
		WithImage(image).
		WithArgs("migrate", "--config", configFilePath).
		WithResources(resources(cd.Resources)).
		WithSecurityContext(containerSecurityContext()).
		WithVolumeMounts(
			corev1ac.VolumeMount().WithName("config").WithMountPath(configMountPath).WithReadOnly(true),
			corev1ac.VolumeMount().WithName(db.volume).WithMountPath(db.mountPath).WithReadOnly(true),
			corev1ac.VolumeMount().WithName("tmp").WithMountPath("/tmp"),
		)
	if cd.ImagePullPolicy != "" {
		container.WithImagePullPolicy(cd.ImagePullPolicy)
	}
	pod := podSpec(pc).
		WithRestartPolicy(corev1.RestartPolicyNever).
		WithServiceAccountName(callbackdName(pc)).
		WithTerminationGracePeriodSeconds(migrationGraceSeconds).
		WithContainers(container).
		WithVolumes(
			configVolume(pc),
			secretVolume(*db),
			corev1ac.Volume().WithName("tmp").WithEmptyDir(corev1ac.EmptyDirVolumeSource().WithMedium(corev1.StorageMediumMemory)),
		)
	template := corev1ac.PodTemplateSpec().
		WithLabels(objectLabels(pc, ComponentMigration)).
		WithSpec(pod)

	raw, err := json.Marshal(template)
	if err != nil {
		return nil, fmt.Errorf("build migration job: %w", err)
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", databaseHash)
	h.Write(raw)
	name := fmt.Sprintf("%s-migrate-%s", pc.Name, shortHash(h.Sum(nil)))

	return batchv1ac.Job(name, pc.Namespace).
		WithLabels(objectLabels(pc, ComponentMigration)).
		WithAnnotations(map[string]string{AnnotationMigrationImage: image}).
		WithOwnerReferences(ownerReference(pc)).
		WithSpec(batchv1ac.JobSpec().
			WithBackoffLimit(migrationBackoffLimit).
			WithActiveDeadlineSeconds(migrationActiveDeadline).
			WithTemplate(template)), nil
}

// migrationState is what a migration Job's status says.
type migrationState int

const (
	migrationRunning migrationState = iota
	migrationComplete
	migrationFailed
)

// jobState reads a Job's terminal conditions; a Job without one is still running.
func jobState(job *batchv1.Job) (migrationState, *batchv1.JobCondition) {
	for i := range job.Status.Conditions {
		c := &job.Status.Conditions[i]
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return migrationComplete, c
		case batchv1.JobFailed:
			return migrationFailed, c
		}
	}
	return migrationRunning, nil
}
