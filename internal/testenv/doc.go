// Package testenv starts real, throwaway servers for tests: PostgreSQL, Redis (optionally with
// replicas and Sentinels) and a Kubernetes API server with etcd (envtest). Every server listens on
// a free loopback port, keeps its data and log under one root folder
// ($TMPDIR/callback-platform-testenv/<pid>-<n>/) and is removed when the test that started it
// ends.
//
// Nothing is mocked: the binaries are the ones hack/deps.sh installs (PostgreSQL's initdb and
// postgres, redis-server) and the ones hack/k8s-binaries.sh builds (kube-apiserver, etcd). A
// missing binary fails the test with the command that installs it; it never skips.
//
// No leftovers: every server runs in its own process group and, on Linux, receives SIGKILL when
// the test binary dies. The first use of the package in a test binary also reaps the folders and
// processes left behind by earlier test binaries whose process is gone (for example after a
// kill -9), and hack/check-leftovers.sh verifies after `make test` that nothing remains.
//
// Servers started per test are convenient but not free. initdb runs once per PostgreSQL build:
// its pristine cluster is cached under the user cache folder
// (~/.cache/callback-platform/testenv/, like Go's build cache, not a leftover) and copied for
// each later server (TESTENV_PG_TEMPLATE=off runs initdb every time). A package with many
// database tests still does best to start one server in TestMain with NewPostgres and give each
// test its own database with (*Postgres).NewDatabase.
//
// Environment: TESTENV_PG_BIN (folder of initdb and postgres), TESTENV_REDIS_SERVER,
// TESTENV_PG_USER (the unprivileged user PostgreSQL runs as when the tests run as root, default
// "postgres"), TESTENV_PG_TEMPLATE, KUBEBUILDER_ASSETS (folder of kube-apiserver and etcd;
// default: the newest folder hack/k8s-binaries.sh filled under ~/.cache/callback-platform/k8s/).
package testenv
