// Package kwokenv starts a throwaway simulated Kubernetes cluster for tests: kwokctl with the
// binary runtime runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and the kwok
// controller as local processes, and kwok plays the kubelet of every simulated node (pods are
// scheduled and shown Running, Job pods complete, nothing really runs).
//
// The binaries are the ones `hack/k8s-binaries.sh cluster` builds from the Go module proxy and
// caches; none is downloaded. A missing binary fails the test with the command that builds it,
// never a skip.
//
// No leftovers: kwokctl keeps its whole work folder (certificates, etcd data, logs, pid files,
// kubeconfig) in one folder under internal/testenv's root, named <pid>-<n> after the test
// binary and holding testenv's "owner" file, and every cluster process names that folder on its
// command line. Close runs `kwokctl delete cluster`, then kills whatever still names the folder
// and removes it. A test binary killed before Close is cleaned up by testenv's reaper on the
// next run and reported by hack/check-leftovers.sh, exactly like testenv's own servers. The
// user's ~/.kube/config and ~/.kwok are never touched (KWOK_WORKDIR and --kubeconfig point into
// the folder).
//
// Environment: KWOKENV_BIN_DIR (folder holding kwokctl, kwok, etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler), else KUBEBUILDER_ASSETS when it holds them, else
// the newest such folder under ~/.cache/callback-platform/k8s/.
package kwokenv
