// Package bench is `make bench`: it measures the physical limits of the machine (pgbench of
// callbackd's own transactions, redis-benchmark of SET NX EX, a handler that only verifies a
// WeChat Pay signature) and then callbackd and the designs from the field on the same load, and
// writes docs/benchmarks.md, .json and .png with the ratios and the goals met or not met.
//
// The runner is cmd/callbench; QUICK mode is exercised by this package's tests.
package bench
