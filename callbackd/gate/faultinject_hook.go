package gate

import (
	"context"
	"net"
)

// faultInjectDialer dials Redis and Sentinel connections in binaries built with the faultinject
// build tag (test/faults routes them through its fault-injecting proxies). It is nil in every
// other build, so go-redis dials the addresses Sentinel names directly.
var faultInjectDialer func(ctx context.Context, network, addr string) (net.Conn, error)
