package store

// faultInjectHooks and faultInjectAsyncCommit weaken every Store in binaries built with the
// faultinject build tag, when test/faults asks for a negative control through the environment.
// In every other build they stay zero: the status guard, the row lock and synchronous commit are
// always on.
var (
	faultInjectHooks       testHooks
	faultInjectAsyncCommit bool
)
