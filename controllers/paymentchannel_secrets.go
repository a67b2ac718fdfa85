package controllers

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
)

// secretNamesField indexes PaymentChannels by the Secrets they reference, so that an edited
// Secret requeues exactly the channels that mount it.
const secretNamesField = ".spec.secretNames"

// secretNamesIndexer is the field indexer of secretNamesField.
func secretNamesIndexer(obj client.Object) []string {
	pc, ok := obj.(*callbackdv1alpha1.PaymentChannel)
	if !ok {
		return nil
	}
	return referencedSecretNames(pc)
}

// errSecretReference is a referenced Secret, or a key of it, that is missing. Its message names
// the Secret and key, never their content.
type errSecretReference struct {
	reason string
	msg    string
}

func (e *errSecretReference) Error() string { return e.msg }

// Reasons of a missing reference.
const (
	reasonSecretNotFound    = "SecretNotFound"
	reasonSecretKeyNotFound = "SecretKeyNotFound"
)

// hashSecrets reads the Secrets of mounts and returns a digest of exactly the content the
// pods mount (keys in a stable order), for the pod-template annotation. A missing Secret or key
// is an *errSecretReference. The reader should bypass the cache: the operator watches Secrets
// by metadata only, so that it never holds every Secret of the cluster in memory.
func hashSecrets(ctx context.Context, r client.Reader, pc *callbackdv1alpha1.PaymentChannel, mounts []secretMount) (string, error) {
	h := sha256.New()
	cache := map[string]*corev1.Secret{}
	for _, m := range mounts {
		s, ok := cache[m.secret]
		if !ok {
			s = &corev1.Secret{}
			err := r.Get(ctx, types.NamespacedName{Namespace: pc.Namespace, Name: m.secret}, s)
			if apierrors.IsNotFound(err) {
				return "", &errSecretReference{reason: reasonSecretNotFound,
					msg: fmt.Sprintf("Secret %q (mounted as %s) not found", m.secret, m.volume)}
			}
			if err != nil {
				return "", fmt.Errorf("hash secrets: get Secret %s: %w", m.secret, err)
			}
			cache[m.secret] = s
		}
		keys := make([]string, 0, len(s.Data))
		if m.items == nil {
			for k := range s.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
		} else {
			for _, it := range m.items {
				if _, ok := s.Data[it.Key]; !ok {
					return "", &errSecretReference{reason: reasonSecretKeyNotFound,
						msg: fmt.Sprintf("Secret %q has no key %q (mounted as %s)", m.secret, it.Key, m.volume)}
				}
				keys = append(keys, it.Key)
			}
		}
		fmt.Fprintf(h, "%s\x00%d\x00", m.volume, len(keys))
		for _, k := range keys {
			v := s.Data[k]
			fmt.Fprintf(h, "%s\x00%d\x00", k, len(v))
			h.Write(v)
		}
	}
	return shortHash(h.Sum(nil)), nil
}

// asSecretReference unwraps an *errSecretReference.
func asSecretReference(err error) (*errSecretReference, bool) {
	var ref *errSecretReference
	ok := errors.As(err, &ref)
	return ref, ok
}
