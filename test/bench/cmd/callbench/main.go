// Command callbench is `make bench`: it measures callbackd against the physical limits of its
// parts and against the designs from the field, on throwaway PostgreSQL and Redis on loopback, and
// writes docs/benchmarks.md, docs/benchmarks.json and docs/benchmarks.png. See package
// test/bench for what is measured and how.
//
//	go run ./test/bench/cmd/callbench --out docs            # about 10 minutes
//	go run ./test/bench/cmd/callbench --out docs --quick    # about 1 minute, 100,000 receipts
//
// The exit status is 0 when the run completed (whether or not every goal was met and whether or
// not a ratio regressed: the report says), 1 with --fail-on-regression when a ratio dropped by more
// than 15% since the previous benchmarks.json, and 2 when the benchmark could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/seed-1cff2221/callback-platform/test/bench"
)

func main() {
	var opts bench.Options
	var timeout time.Duration
	var failOnRegression bool
	flag.BoolVar(&opts.Quick, "quick", false, "short runs (about 1 minute) and 100,000 preloaded receipts instead of 10 million")
	flag.StringVar(&opts.OutDir, "out", "docs", "folder of benchmarks.md, benchmarks.json and benchmarks.png (a benchmarks.json there is the previous run)")
	flag.StringVar(&opts.WorkDir, "work-dir", "", "folder for keys, configurations, logs and profiles (temporary and removed when empty)")
	flag.Int64Var(&opts.ScaleReceipts, "scale-receipts", 0, "receipts preloaded for the scale scenarios (default 10,000,000; 100,000 with --quick)")
	flag.DurationVar(&timeout, "timeout", 20*time.Minute, "give up after this long")
	flag.BoolVar(&failOnRegression, "fail-on-regression", false, "exit 1 when a ratio dropped by more than 15% since the previous run (it is always reported)")
	renderOnly := flag.Bool("render-only", false, "measure nothing: write benchmarks.md and benchmarks.png again from the benchmarks.json in --out")
	flag.Parse()
	if *renderOnly {
		if _, err := bench.Render(opts.OutDir); err != nil {
			fmt.Fprintf(os.Stderr, "callbench: %v\n", err)
			os.Exit(2)
		}
		return
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := bench.Run(ctx, opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "callbench: %v\n", err)
		os.Exit(2)
	}
	met := 0
	for _, g := range rep.Goals {
		status := "NOT MET"
		if g.Met {
			status = "met"
			met++
		}
		fmt.Printf("%-8s %s\n", status, g.Figure)
	}
	fmt.Printf("%d of %d goals met; report in %s\n", met, len(rep.Goals), opts.OutDir)
	if len(rep.Regressions) > 0 && failOnRegression {
		fmt.Fprintf(os.Stderr, "callbench: %d ratios regressed by more than 15%% since %s\n", len(rep.Regressions), rep.PreviousDate)
		os.Exit(1)
	}
}
