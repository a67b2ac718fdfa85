// Package cli is callbackd's command line: `callbackd serve --config FILE`,
// `callbackd migrate [--config FILE | --dsn DSN]` and `callbackd version`.
//
// Exit codes: 0 success, 1 a runtime or configuration error, 2 a usage error (unknown command or
// flag). Errors are printed on one line without secrets: configuration errors name the field,
// store errors never include the DSN.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// Version is callbackd's version, set at build time with
// -ldflags "-X github.com/seed-1cff2221/callback-platform/callbackd/cli.Version=v1.2.3".
// When empty, the module version or VCS revision recorded in the binary is used.
var Version = ""

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// Main runs callbackd with args (without the program name) and returns the exit code. ctx is
// cancelled on SIGTERM/SIGINT by the caller; serve drains and returns when it is.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "callbackd: %s\n", oneLine(err.Error()))
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Run 'callbackd --help' for usage.\n")
		return ExitUsage
	}
	return ExitError
}

// oneLine joins a multi-error (errors.Join of field errors) into one line.
func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// NewRootCommand builds the command tree writing to stdout and stderr.
func NewRootCommand(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "callbackd",
		Short: "Receive payment-provider callbacks exactly once",
		Long: "callbackd receives WeChat Pay, Alipay, Stripe-style and Standard Webhooks callbacks, " +
			"verifies them, and applies each business event exactly once in PostgreSQL.",
		SilenceErrors: true,
		SilenceUsage:  true,
		// A bare `callbackd` or an unknown command is a usage error, not a silent success.
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return &usageError{fmt.Errorf("unknown command %q", args[0])}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return &usageError{errors.New("a command is required")}
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(newServeCommand(stderr), newMigrateCommand(stdout, stderr), newVersionCommand(stdout))
	root.AddCommand(newOutboxCommand(stdout))
	root.AddCommand(newOrderCommand(stdout, stderr))
	for _, c := range root.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
		if c.Args == nil {
			c.Args = noArgs
		}
	}
	return root
}

func noArgs(_ *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &usageError{fmt.Errorf("unexpected argument %q", args[0])}
	}
	return nil
}

func newVersionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print callbackd's version",
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "callbackd %s\n", ResolvedVersion())
			return err
		},
	}
}

// ResolvedVersion is Version, or the version recorded in the binary's build information.
func ResolvedVersion() string {
	if Version != "" {
		return Version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel-" + rev + dirty
	}
	return "devel"
}

// newLogger is callbackd's JSON logger at the named level.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, &usageError{fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)}
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})).With("service", "callbackd"), nil
}
