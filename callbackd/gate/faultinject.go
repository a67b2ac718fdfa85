//go:build faultinject

package gate

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
)

// EnvFaultInjectRedisAddrMap maps Redis and Sentinel addresses to the addresses actually dialed
// ("host:port=host:port,..."): test/faults puts a fault-injecting proxy between each callbackd
// process and each Redis node, while Sentinel keeps naming the nodes' own addresses. It exists
// only in binaries built with the faultinject build tag.
const EnvFaultInjectRedisAddrMap = "CALLBACKD_FAULTINJECT_REDIS_ADDR_MAP"

func init() {
	raw := os.Getenv(EnvFaultInjectRedisAddrMap)
	if raw == "" {
		return
	}
	m := map[string]string{}
	for _, pair := range strings.Split(raw, ",") {
		from, to, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || from == "" || to == "" {
			fmt.Fprintf(os.Stderr, "callbackd: faultinject: ignoring malformed %s entry %q\n", EnvFaultInjectRedisAddrMap, pair)
			continue
		}
		m[from] = to
	}
	fmt.Fprintf(os.Stderr, "callbackd: FAULT-INJECTION BUILD: %d Redis addresses mapped through test proxies\n", len(m))
	var d net.Dialer
	faultInjectDialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if to, ok := m[addr]; ok {
			addr = to
		}
		return d.DialContext(ctx, network, addr)
	}
}
