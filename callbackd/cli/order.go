package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/callbackd/gate"
	"github.com/seed-1cff2221/callback-platform/callbackd/metrics"
	"github.com/seed-1cff2221/callback-platform/callbackd/pipeline"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/callbackd/reconciler"
	"github.com/seed-1cff2221/callback-platform/callbackd/store"
)

// newSyncer builds the active query path of a serving callbackd: a query client per queryable
// channel (its merchant keys re-read until ctx is done) and the Syncer that applies answers
// through the pipeline p.
func newSyncer(ctx context.Context, cfg *config.File, st *store.Store, p *pipeline.Pipeline, logger *slog.Logger) (*query.Syncer, error) {
	clients, err := query.NewClients(ctx, cfg.Channels, p.Adapter, query.ClientOptions{Logger: logger.With("component", "query")})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	s, err := query.NewSyncer(st, p, clients, query.SyncerOptions{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return s, nil
}

// newReconciler builds the sweep of stuck orders that serve runs beside the outbox dispatcher.
func newReconciler(cfg *config.File, st *store.Store, syncer *query.Syncer, reg prometheus.Registerer, logger *slog.Logger) (*reconciler.Reconciler, error) {
	r, err := reconciler.New(st.Pool(), syncer, cfg.Channels, reconciler.Options{Registerer: reg, Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	return r, nil
}

// orderFlags are the flags of the order subcommands.
type orderFlags struct {
	configPath string
	dsn        string
	output     string
	timeout    time.Duration
}

func (f *orderFlags) register(cmd *cobra.Command, withDSN bool) {
	fl := cmd.Flags()
	fl.StringVar(&f.configPath, "config", "", "callbackd configuration file")
	if withDSN {
		fl.StringVar(&f.dsn, "dsn", "", "PostgreSQL connection string (prefer CALLBACKD_DATABASE_DSN: flags show up in process lists)")
	}
	fl.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fl.DurationVar(&f.timeout, "timeout", 30*time.Second, "give up after this long")
}

func (f *orderFlags) checkOutput(name string) error {
	if f.output != "table" && f.output != "json" {
		return &usageError{fmt.Errorf("order %s: --output must be table or json, got %q", name, f.output)}
	}
	return nil
}

// newOrderCommand is `callbackd order show|sync`: an operator's view of one order and the active
// query that settles it with its provider.
func newOrderCommand(stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "order",
		Short: "Show an order, or settle it with its provider",
		Long: "order shows a payment order with its ledger, and syncs a pending one with its provider: the provider " +
			"is asked (WeChat Pay order query, alipay.trade.query) and a payment it reports is applied exactly once, " +
			"through the same gates and transaction as its callback.",
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_ = cmd.Help()
			return &usageError{errors.New("order: a subcommand is required (show, sync)")}
		},
	}
	cmd.AddCommand(newOrderShowCommand(stdout), newOrderSyncCommand(stdout, stderr))
	for _, c := range cmd.Commands() {
		c.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	}
	return cmd
}

func exactlyOneOrder(name string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != 1 || args[0] == "" {
			return &usageError{fmt.Errorf("order %s: exactly one ORDER_NO is required", name)}
		}
		return nil
	}
}

func newOrderShowCommand(stdout io.Writer) *cobra.Command {
	var flags orderFlags
	cmd := &cobra.Command{
		Use:   "show ORDER_NO",
		Short: "Show an order and its ledger",
		Args:  exactlyOneOrder("show"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.checkOutput("show"); err != nil {
				return err
			}
			dsn, err := migrateDSN(flags.configPath, flags.dsn)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), flags.timeout)
			defer cancel()
			st, err := store.Open(ctx, dsn, store.Options{MaxConns: 2})
			if err != nil {
				return fmt.Errorf("order show: %w", err)
			}
			defer st.Close()
			d, err := st.GetOrder(ctx, args[0])
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("order show: no order %s", args[0])
			}
			if err != nil {
				return fmt.Errorf("order show: %w", err)
			}
			return printOrder(stdout, flags.output, orderViewOf(d, nil))
		},
	}
	flags.register(cmd, true)
	return cmd
}

func newOrderSyncCommand(stdout, stderr io.Writer) *cobra.Command {
	var (
		flags    orderFlags
		logLevel string
	)
	cmd := &cobra.Command{
		Use:   "sync ORDER_NO",
		Short: "Ask the order's provider about a pending order and apply its answer exactly once",
		Long: "sync needs the configuration file of the order's channel (its keys sign the query and verify the " +
			"answer). An order that is no longer pending is shown without asking the provider.",
		Args: exactlyOneOrder("sync"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := flags.checkOutput("sync"); err != nil {
				return err
			}
			if flags.configPath == "" {
				return &usageError{errors.New("order sync: --config is required")}
			}
			logger, err := newLogger(stderr, logLevel)
			if err != nil {
				return err
			}
			cfg, err := config.Load(flags.configPath)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), flags.timeout)
			defer cancel()
			res, err := syncOnce(ctx, cfg, args[0], logger)
			if err != nil {
				return err
			}
			return printOrder(stdout, flags.output, orderViewOf(res.Order, &res))
		},
	}
	flags.register(cmd, false)
	cmd.Flags().StringVar(&logLevel, "log-level", "warn", "log level: debug, info, warn or error")
	return cmd
}

// syncOnce builds, for one sync, what serve builds for many: the store, the channels' adapters,
// the pipeline with the Redis gate when configured (so its marks stay consistent with the
// serving replicas'), the query clients and the Syncer.
func syncOnce(ctx context.Context, cfg *config.File, orderNo string, logger *slog.Logger) (query.Result, error) {
	dsn, err := cfg.Database.ResolveDSN()
	if err != nil {
		return query.Result{}, err
	}
	st, err := store.Open(ctx, dsn, store.Options{MaxConns: 4, Logger: logger})
	if err != nil {
		return query.Result{}, fmt.Errorf("order sync: %w", err)
	}
	defer st.Close()
	m := metrics.New()
	channels := make([]pipeline.Channel, 0, len(cfg.Channels))
	for _, ch := range cfg.Channels {
		a, err := provider.New(ctx, ch, logger, nil)
		if err != nil {
			return query.Result{}, fmt.Errorf("order sync: %w", err)
		}
		channels = append(channels, pipeline.Channel{Name: ch.Name, Adapter: a, LockTTL: ch.TTLs.Lock.Duration,
			SuccessTTL: ch.TTLs.SuccessMark.Duration, WindowTTL: ch.TTLs.GatewayWindow.Duration})
	}
	popts := pipeline.Options{Channels: channels, Ledger: st, Metrics: m, Logger: logger}
	if cfg.Redis != nil {
		client, err := gate.NewRedisClient(*cfg.Redis)
		if err != nil {
			return query.Result{}, fmt.Errorf("order sync: %w", err)
		}
		defer client.Close()
		popts.Claims = gate.NewClaims(client, cfg.Redis.Timeout.Duration)
	}
	p, err := pipeline.New(popts)
	if err != nil {
		return query.Result{}, fmt.Errorf("order sync: %w", err)
	}
	syncer, err := newSyncer(ctx, cfg, st, p, logger)
	if err != nil {
		return query.Result{}, err
	}
	res, err := syncer.SyncOrder(ctx, orderNo)
	switch {
	case errors.Is(err, query.ErrUnknownOrder):
		return query.Result{}, fmt.Errorf("order sync: no order %s", orderNo)
	case err != nil:
		return query.Result{}, fmt.Errorf("order sync %s: %w", orderNo, err)
	}
	return res, nil
}

// orderView is the CLI's form of an order (and, after a sync, of what the sync did).
type orderView struct {
	OrderNo        string            `json:"order_no"`
	Channel        string            `json:"channel"`
	MerchantID     string            `json:"merchant_id"`
	SubMerchantID  string            `json:"sub_merchant_id,omitempty"`
	Amount         int64             `json:"amount"`
	Currency       string            `json:"currency"`
	Status         string            `json:"status"`
	RefundedAmount int64             `json:"refunded_amount"`
	ProviderTxnID  string            `json:"provider_txn_id,omitempty"`
	PaidAt         *time.Time        `json:"paid_at,omitempty"`
	ClosedAt       *time.Time        `json:"closed_at,omitempty"`
	ExpiresAt      *time.Time        `json:"expires_at,omitempty"`
	CreatedAt      time.Time         `json:"created_at"`
	UpdatedAt      time.Time         `json:"updated_at"`
	Ledger         []ledgerEntryView `json:"ledger"`
	Sync           *syncView         `json:"sync,omitempty"`
}

type ledgerEntryView struct {
	ID            int64     `json:"id"`
	Type          string    `json:"type"`
	RefundNo      string    `json:"refund_no,omitempty"`
	Amount        int64     `json:"amount"`
	Currency      string    `json:"currency"`
	ProviderTxnID string    `json:"provider_txn_id,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
}

type syncView struct {
	Queried       bool   `json:"queried"`
	ProviderState string `json:"provider_state,omitempty"`
	Action        string `json:"action"`
	Outcome       string `json:"outcome,omitempty"`
}

func orderViewOf(d store.OrderDetails, res *query.Result) orderView {
	o := d.Order
	v := orderView{OrderNo: o.OrderNo, Channel: o.Channel, MerchantID: o.MerchantID, SubMerchantID: o.SubMerchantID,
		Amount: o.Amount, Currency: o.Currency, Status: string(o.Status), RefundedAmount: o.RefundedAmount,
		ProviderTxnID: o.ProviderTxnID, PaidAt: utc(o.PaidAt), ClosedAt: utc(o.ClosedAt), ExpiresAt: utc(o.ExpiresAt),
		CreatedAt: o.CreatedAt.UTC(), UpdatedAt: o.UpdatedAt.UTC(), Ledger: make([]ledgerEntryView, 0, len(d.Ledger))}
	for _, e := range d.Ledger {
		v.Ledger = append(v.Ledger, ledgerEntryView{ID: e.ID, Type: e.Type, RefundNo: e.RefundNo, Amount: e.Amount,
			Currency: e.Currency, ProviderTxnID: e.ProviderTxnID, CreatedAt: e.CreatedAt.UTC()})
	}
	if res != nil {
		v.Sync = &syncView{Queried: res.Queried, ProviderState: res.Answer.ProviderState, Action: string(res.Action), Outcome: res.Outcome}
	}
	return v
}

func printOrder(w io.Writer, format string, v orderView) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "ORDER\t%s\n", v.OrderNo)
	fmt.Fprintf(tw, "CHANNEL\t%s\n", v.Channel)
	fmt.Fprintf(tw, "MERCHANT\t%s\n", v.MerchantID)
	fmt.Fprintf(tw, "STATUS\t%s\n", v.Status)
	fmt.Fprintf(tw, "AMOUNT\t%d %s (minor units)\n", v.Amount, v.Currency)
	fmt.Fprintf(tw, "REFUNDED\t%d\n", v.RefundedAmount)
	if v.ProviderTxnID != "" {
		fmt.Fprintf(tw, "PROVIDER TXN\t%s\n", v.ProviderTxnID)
	}
	for _, t := range []struct {
		name string
		at   *time.Time
	}{{"PAID AT", v.PaidAt}, {"CLOSED AT", v.ClosedAt}, {"EXPIRES AT", v.ExpiresAt}} {
		if t.at != nil {
			fmt.Fprintf(tw, "%s\t%s\n", t.name, t.at.Format(time.RFC3339))
		}
	}
	if v.Sync != nil {
		queried := "no (the order is not pending)"
		if v.Sync.Queried {
			queried = "yes, provider says " + v.Sync.ProviderState
		}
		fmt.Fprintf(tw, "QUERIED\t%s\n", queried)
		fmt.Fprintf(tw, "ACTION\t%s\n", v.Sync.Action)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEDGER\tTYPE\tREFUND NO\tAMOUNT\tPROVIDER TXN\tCREATED")
	for _, e := range v.Ledger {
		refundNo := e.RefundNo
		if refundNo == "" {
			refundNo = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\n", e.ID, e.Type, refundNo, e.Amount, e.ProviderTxnID, e.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}
