//go:build faultinject

package store

import (
	"fmt"
	"os"
	"time"
)

// Negative-control switches of test/faults. They exist only in binaries built with the
// faultinject build tag; the normal binary has no way to turn any of them on.
const (
	// EnvFaultInjectUnguardedUpdate="1" reads the order without FOR UPDATE and drops the
	// status condition from the state transitions (the conditional update removed).
	EnvFaultInjectUnguardedUpdate = "CALLBACKD_FAULTINJECT_UNGUARDED_UPDATE"
	// EnvFaultInjectAfterOrderRead (a Go duration) sleeps between reading the order and
	// updating it, so that the race the guard prevents happens often enough to be seen.
	EnvFaultInjectAfterOrderRead = "CALLBACKD_FAULTINJECT_AFTER_ORDER_READ"
	// EnvFaultInjectAsyncCommit="1" runs every session with synchronous_commit=off, so that a
	// PostgreSQL crash can lose commits that were already acknowledged.
	EnvFaultInjectAsyncCommit = "CALLBACKD_FAULTINJECT_ASYNC_COMMIT"
)

func init() {
	var on []string
	if os.Getenv(EnvFaultInjectUnguardedUpdate) == "1" {
		faultInjectHooks.skipRowLock = true
		faultInjectHooks.unguardedUpdate = true
		on = append(on, "unguarded update")
	}
	if v := os.Getenv(EnvFaultInjectAfterOrderRead); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			fmt.Fprintf(os.Stderr, "callbackd: faultinject: ignoring %s=%q: not a duration\n", EnvFaultInjectAfterOrderRead, v)
		} else {
			faultInjectHooks.afterOrderRead = func() { time.Sleep(d) }
			on = append(on, "sleep after order read "+d.String())
		}
	}
	if os.Getenv(EnvFaultInjectAsyncCommit) == "1" {
		faultInjectAsyncCommit = true
		on = append(on, "synchronous_commit=off")
	}
	if len(on) > 0 {
		fmt.Fprintf(os.Stderr, "callbackd: FAULT-INJECTION BUILD: store weakened on purpose: %v\n", on)
	}
}
