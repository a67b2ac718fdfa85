// Command paysim is the provider simulator: it writes a channel's test key material, signs
// real-format WeChat Pay, Alipay, Stripe and Standard Webhooks payment notifications with it,
// and sends them to a callbackd on loopback — one at a time, as a storm of duplicates, or as a
// provider's retry schedule replayed with compressed time — and it serves a fake of the
// providers' order query APIs for callbackd's active query path.
//
//	paysim keys --out keys/wx --channel wx --provider wechatpay --merchant-id 1900000109 --app-id wx88…
//	paysim send   --keys keys/wx --target http://127.0.0.1:8080 --order ORD-1 --amount 100
//	paysim storm  --keys keys/wx --target http://127.0.0.1:8080 --orders 200 --duplicates 5 --concurrency 32 --shuffle
//	paysim replay --keys keys/wx --target http://127.0.0.1:8080 --schedule 15s,15s,30s,3m --compress 1000
//	paysim serve-query --listen 127.0.0.1:9000 --keys keys/wx --keys keys/ali
//
// It only ever talks to loopback addresses. The exit status is 0 on success, 2 when notifications
// were sent but not acknowledged (a storm order none of whose deliveries was, a replay that gave
// up, a send that was refused), and 1 when paysim could not run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCommand(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		var unbalanced errUnacknowledged
		if errors.As(err, &unbalanced) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// newRootCommand builds the command tree writing to stdout and stderr.
func newRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "paysim",
		Short:         "Provider simulator: signed payment notifications, storms, retry-schedule replays and a fake query API",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newKeysCommand(), newSendCommand(), newStormCommand(), newReplayCommand(), newServeQueryCommand())
	return root
}

// errUnacknowledged is returned when notifications were sent but not all acknowledged, so that
// scripts can tell "the target misbehaved" (exit 2) from "paysim could not run" (exit 1).
type errUnacknowledged struct{ n int }

func (e errUnacknowledged) Error() string {
	return fmt.Sprintf("%d notification(s) were not acknowledged", e.n)
}
