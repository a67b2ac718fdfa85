// Package smoke_test proves that each test harness of internal/testenv starts a real server and
// that the operations other tests rely on (crash and restart of PostgreSQL, replication and
// Sentinel failover of Redis, CRUD against kube-apiserver) behave as the real systems do. Each
// test logs which real server it used, so `make test -v` output shows it.
package smoke_test
