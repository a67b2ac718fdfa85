// Command callbackd-pprof is callbackd exactly as cmd/callbackd builds it, plus an opt-in
// net/http/pprof listener for the benchmark: when CALLBENCH_PPROF_ADDR names a loopback address,
// the profiling endpoints are served there (and nowhere else). The benchmark runs this binary so
// that it can take a CPU profile of the very process it measures when a goal is not met; the
// product binary carries no profiling endpoint.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux, served only below
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seed-1cff2221/callback-platform/callbackd/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop()
	}()
	if addr := os.Getenv("CALLBENCH_PPROF_ADDR"); addr != "" {
		if err := servePprof(ctx, addr); err != nil {
			fmt.Fprintf(os.Stderr, "callbackd-pprof: %v\n", err)
			os.Exit(2)
		}
	}
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// servePprof serves http.DefaultServeMux (the pprof handlers) on a loopback address.
func servePprof(ctx context.Context, addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("CALLBENCH_PPROF_ADDR %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("CALLBENCH_PPROF_ADDR %q: profiling is served on loopback only", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("pprof listen: %w", err)
	}
	srv := &http.Server{Handler: http.DefaultServeMux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	return nil
}
