// Command demo runs the whole platform on this machine for a few seconds and prints what
// happened, in words a newcomer understands. It starts a throwaway PostgreSQL and a Redis
// Sentinel group (1 master, 1 replica, 3 Sentinels) on loopback, migrates the database with
// `callbackd migrate`, generates test keys, starts `callbackd serve` (two replicas by default)
// with a WeChat Pay and an Alipay channel, registers orders through the merchant API, and hits
// each channel with a paysim storm: every notification delivered several times, concurrently,
// shuffled, spread over the replicas. A few orders' notifications are "lost" on the way: the
// merchant's "check payment" (POST /v1/orders/{order_no}/sync) must find them paid by asking the
// provider, here a fake of its query API on loopback. Then the demo reads the books straight
// from PostgreSQL and the duplicate counters from callbackd's /metrics, prints the report, and
// stops everything it started, also on Ctrl-C and on error.
//
// The exit status is 0 when the books balance (one ledger entry per paid order, every
// registered order paid), 1 when they do not, and 2 when the demo could not run.
//
//	go run ./cmd/demo --callbackd bin/callbackd --orders 200 --duplicates 5 --concurrency 32
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// defaultLost is the number of lost notifications per channel of a default run.
const defaultLost = 10

// Exit codes.
const (
	exitBalanced   = 0
	exitUnbalanced = 1
	exitFailed     = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	var opts options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&opts.callbackd, "callbackd", "", "callbackd binary (built from ./cmd/callbackd into the work folder when empty)")
	fs.IntVar(&opts.replicas, "replicas", 2, "callbackd replicas; the storm reaches them in turn, as through a load balancer")
	fs.IntVar(&opts.orders, "orders", 200, "orders per channel")
	fs.IntVar(&opts.lost, "lost", defaultLost, "orders per channel whose notification is never sent; the merchant's \"check payment\" must find them paid (default: 5% of --orders, at most 10)")
	fs.IntVar(&opts.duplicates, "duplicates", 5, "deliveries of each notification in the storm")
	fs.IntVar(&opts.concurrency, "concurrency", 32, "requests in flight")
	fs.BoolVar(&opts.shuffle, "shuffle", true, "send the deliveries in random order")
	fs.BoolVar(&opts.json, "json", false, "print the report as JSON instead of text")
	fs.DurationVar(&opts.timeout, "timeout", 10*time.Minute, "give up after this long")
	fs.StringVar(&opts.reportJSON, "report-json", "", "also write the report as JSON to this file")
	fs.StringVar(&opts.workDir, "work-dir", "", "folder for keys, configuration and logs (a temporary one, removed at the end, when empty)")
	if err := fs.Parse(args); err != nil {
		return exitFailed
	}
	lostSet := false
	fs.Visit(func(f *flag.Flag) { lostSet = lostSet || f.Name == "lost" })
	if !lostSet {
		opts.lost = min(defaultLost, opts.orders/20)
	}
	if opts.orders < 1 || opts.duplicates < 1 || opts.concurrency < 1 || opts.replicas < 1 {
		fmt.Fprintln(stderr, "demo: --replicas, --orders, --duplicates and --concurrency must be at least 1")
		return exitFailed
	}
	if opts.lost < 0 || opts.lost >= opts.orders {
		fmt.Fprintln(stderr, "demo: --lost must be at least 0 and below --orders")
		return exitFailed
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	started := time.Now()
	d := &demo{opts: opts, log: stderr}
	rep, err := d.run(ctx)
	if stopErr := d.stopAll(); stopErr != nil {
		err = errors.Join(err, stopErr)
	}
	if rep != nil {
		rep.Processes = d.pids
		rep.DurationSeconds = time.Since(started).Seconds()
		if perr := rep.print(stdout, opts.json); perr != nil {
			err = errors.Join(err, perr)
		}
		if opts.reportJSON != "" {
			if werr := rep.writeJSON(opts.reportJSON); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "demo: %v\n", err)
		return exitFailed
	case !rep.Balanced:
		fmt.Fprintln(stderr, "demo: the books do not balance")
		return exitUnbalanced
	default:
		return exitBalanced
	}
}
