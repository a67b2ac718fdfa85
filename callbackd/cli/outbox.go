package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed-1cff2221/callback-platform/callbackd/outbox"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// outboxFlags are the flags every outbox subcommand shares.
type outboxFlags struct {
	configPath string
	dsn        string
	output     string
	timeout    time.Duration
}

func (f *outboxFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", "callbackd configuration file; its database section is used")
	fl.StringVar(&f.dsn, "dsn", "", "PostgreSQL connection string (prefer CALLBACKD_DATABASE_DSN: flags show up in process lists)")
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
}

// withQueue opens the database named by the flags (as migrate does: --dsn, --config or
// CALLBACKD_DATABASE_DSN) and runs fn with the outbox queue on it.
func (f *outboxFlags) withQueue(ctx context.Context, name string, fn func(context.Context, *outbox.Queue) error) error {
	if f.output != "table" && f.output != "json" {
		return &usageError{fmt.Errorf("outbox %s: --output must be table or json, got %q", name, f.output)}
	}
	dsn, err := migrateDSN(f.configPath, f.dsn)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 2})
	if err != nil {
		return fmt.Errorf("outbox %s: %w", name, err)
	}
	defer st.Close()
	return fn(ctx, outbox.NewQueue(st.Pool(), nil))
}

// newOutboxCommand is `callbackd outbox list|dead-letters|redeliver`: the operator's view of the
// event deliveries to the merchant's endpoints, and the replay of one.
func newOutboxCommand(stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect and replay the delivery of events to the merchant's endpoints",
		Long: "outbox shows the deliveries of committed events to the channels' endpoints (one per event and " +
			"endpoint, with the webhook-id the endpoint sees) and puts dead or delivered ones back in the queue. " +
			"A redelivery sends the same event again with the same webhook-id; it never re-applies the payment.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return &usageError{errors.New("outbox: a subcommand is required (list, dead-letters, redeliver)")}
		},
	}
	cmd.AddCommand(newOutboxListCommand(stdout), newOutboxDeadLettersCommand(stdout), newOutboxRedeliverCommand(stdout))
	for _, c := range cmd.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	}
	return cmd
}

func newOutboxListCommand(stdout io.Writer) *cobra.Command {
	var (
		flags  outboxFlags
		filter outbox.Filter
		status string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List deliveries, newest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if status != "" {
				filter.Status = outbox.Status(strings.ToUpper(status))
				switch filter.Status {
				case outbox.StatusPending, outbox.StatusDelivered, outbox.StatusDead:
				default:
					return &usageError{fmt.Errorf("outbox list: --status must be pending, delivered or dead, got %q", status)}
				}
			}
			return flags.withQueue(cmd.Context(), "list", func(ctx context.Context, q *outbox.Queue) error {
				ds, err := q.List(ctx, filter)
				if err != nil {
					return err
				}
				return printDeliveries(stdout, flags.output, ds)
			})
		},
	}
	flags.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&filter.Channel, "channel", "", "only this channel")
	fl.StringVar(&filter.Endpoint, "endpoint", "", "only this endpoint")
	fl.StringVar(&status, "status", "", "only this status: pending, delivered or dead")
	fl.StringVar(&filter.EventID, "event", "", "only this event id")
	fl.StringVar(&filter.OrderNo, "order", "", "only the events of this order number")
	fl.IntVar(&filter.Limit, "limit", outbox.DefaultListLimit, fmt.Sprintf("at most this many (up to %d)", outbox.MaxListLimit))
	fl.Int64Var(&filter.AfterID, "after", 0, "continue a listing after this delivery id (the ID column)")
	return cmd
}

func newOutboxDeadLettersCommand(stdout io.Writer) *cobra.Command {
	var (
		flags   outboxFlags
		channel string
		limit   int
	)
	cmd := &cobra.Command{
		Use:   "dead-letters",
		Short: "List the deliveries that failed every attempt of their retry schedule, newest first",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return flags.withQueue(cmd.Context(), "dead-letters", func(ctx context.Context, q *outbox.Queue) error {
				ds, err := q.DeadLetters(ctx, channel, limit)
				if err != nil {
					return err
				}
				return printDeliveries(stdout, flags.output, ds)
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&channel, "channel", "", "only this channel")
	cmd.Flags().IntVar(&limit, "limit", outbox.DefaultListLimit, fmt.Sprintf("at most this many (up to %d)", outbox.MaxListLimit))
	return cmd
}

func newOutboxRedeliverCommand(stdout io.Writer) *cobra.Command {
	var (
		flags    outboxFlags
		endpoint string
	)
	cmd := &cobra.Command{
		Use:   "redeliver EVENT_ID",
		Short: "Send an event again to its endpoints (or one of them), with the same webhook-id",
		Long: "redeliver puts the event's dead or delivered deliveries back in the queue, due now, with a fresh " +
			"retry schedule; a running callbackd sends them at its next pass. The receiving system sees the same " +
			"webhook-id again and deduplicates on it. The payment itself is never applied again.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
				return &usageError{errors.New("outbox redeliver: exactly one EVENT_ID is required")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return flags.withQueue(cmd.Context(), "redeliver", func(ctx context.Context, q *outbox.Queue) error {
				ds, err := q.Redeliver(ctx, args[0], endpoint)
				if err != nil {
					return err
				}
				return printDeliveries(stdout, flags.output, ds)
			})
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&endpoint, "endpoint", "", "only the delivery to this endpoint (default: every endpoint of the event)")
	return cmd
}

func printDeliveries(w io.Writer, format string, ds []outbox.Delivery) error {
	views := make([]outbox.DeliveryView, len(ds))
	for i, d := range ds {
		views[i] = d.View()
	}
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(views)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tWEBHOOK-ID\tTYPE\tORDER\tSTATUS\tATTEMPTS\tNEXT/DELIVERED\tLAST ERROR")
	for _, v := range views {
		when := "-"
		switch {
		case v.InFlight:
			when = "in flight"
		case v.NextAttemptAt != nil:
			when = v.NextAttemptAt.Format(time.RFC3339)
		case v.DeliveredAt != nil:
			when = v.DeliveredAt.Format(time.RFC3339)
		}
		lastErr := v.LastError
		if lastErr == "" {
			lastErr = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.ID, v.WebhookID, v.EventType, v.OrderNo,
			v.Status, v.Attempts, when, lastErr)
	}
	return tw.Flush()
}

// utc returns t in UTC, nil for nil.
func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
