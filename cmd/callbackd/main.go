// Command callbackd receives payment-provider callbacks and applies each business event exactly
// once. See package callbackd/cli for the commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/seed-1cff2221/callback-platform/callbackd/cli"
)

func main() {
	// SIGTERM (Kubernetes) and SIGINT cancel the context: serve stops accepting, drains the
	// callbacks in flight and returns. A second signal kills the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-ctx.Done()
		stop()
	}()
	os.Exit(cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
