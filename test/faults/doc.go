// Package faults is the fault-injection suite of callback-platform (issue 9): real callbackd
// processes (the faultinject build), real PostgreSQL, Redis with replicas and three Sentinels
// (internal/testenv), a merchant sink, signed Standard Webhooks storms, and an in-process TCP
// proxy on every link between a callbackd process and a store (latency, resets, partitions).
//
// Every request is recorded in a History (key, instance, times, answer class); afterwards a
// pure Check over the history, a database Snapshot and the sink's received events verifies the
// invariants: per idempotency key at most one receipt, ledger entry and event id; one transition
// out of PENDING per order; no success answered for an effect that is not committed (also after
// crashes); every valid notification applied exactly once once the faults healed and the
// provider's retries ended; every injected fault left evidence. Negative controls weaken the
// faultinject build on purpose and assert that the checker fails.
//
// The suite runs with `make test-faults` (not part of `make test`). The harness API is in
// env.go (Env, NewEnv), callbackd.go (StartCallbackd, Links), proxy.go, traffic.go (storms,
// provider retries), snapshot.go (snapshots, evidence) and checker.go.
package faults
