package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

// targetFlags are the flags every sending command shares.
type targetFlags struct {
	keys, target, channel, provider string
	timeout                         time.Duration
	json                            bool
}

func (t *targetFlags) register(f *pflag.FlagSet) {
	f.StringVar(&t.keys, "keys", "", "key set folder `DIR` written by 'paysim keys'")
	f.StringVar(&t.target, "target", "", "callbackd base `URL` (http://127.0.0.1:8080) or the channel's full notify URL; loopback only")
	f.StringVar(&t.channel, "channel", "", "channel name; defaults to the key set's (a different name is sent to that channel's URL)")
	f.StringVar(&t.provider, "provider", "", "expected provider (wechatpay, alipay, stripe, standardwebhooks); checked against the key set")
	f.DurationVar(&t.timeout, "timeout", storm.DefaultTimeout, "answer deadline of one delivery (WeChat Pay waits 5s)")
	f.BoolVar(&t.json, "json", false, "print the result as JSON")
}

// setup loads the key set and returns it with a sender to the channel's notify URL.
func (t *targetFlags) setup(concurrency int) (*keyset.Set, *storm.Sender, error) {
	if t.keys == "" || t.target == "" {
		return nil, nil, fmt.Errorf("--keys and --target are required")
	}
	set, err := keyset.Load(t.keys)
	if err != nil {
		return nil, nil, err
	}
	if t.provider != "" && callbackdv1alpha1.Provider(t.provider) != set.Manifest.Provider {
		return nil, nil, fmt.Errorf("--provider %s, but the key set in %s is for %s", t.provider, t.keys, set.Manifest.Provider)
	}
	channel := t.channel
	if channel == "" {
		channel = set.Manifest.Channel
	}
	notifyURL, err := notifyURL(t.target, channel)
	if err != nil {
		return nil, nil, err
	}
	notifier, err := storm.NewNotifier(set)
	if err != nil {
		return nil, nil, err
	}
	sender, err := storm.NewSender(notifier, notifyURL, storm.NewClient(concurrency, t.timeout))
	if err != nil {
		return nil, nil, err
	}
	return set, sender, nil
}

// notifyURL appends /notify/{channel} to a base URL; a URL that already has a path is used as is.
func notifyURL(target, channel string) (string, error) {
	u, err := storm.CheckTarget(target)
	if err != nil {
		return "", err
	}
	if strings.Trim(u.Path, "/") != "" {
		return target, nil
	}
	return strings.TrimRight(target, "/") + "/notify/" + url.PathEscape(channel), nil
}

// baseURL is the scheme and host of a target, where the merchant API lives.
func baseURL(target string) (string, error) {
	u, err := storm.CheckTarget(target)
	if err != nil {
		return "", err
	}
	return u.Scheme + "://" + u.Host, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// runID is a short random prefix that keeps order numbers of separate runs apart.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newSendCommand() *cobra.Command {
	var (
		tf    targetFlags
		trade storm.Trade
		times int
	)
	cmd := &cobra.Command{
		Use:   "send --keys DIR --target URL --order NO --amount MINOR",
		Short: "Send one payment notification (optionally several times, one after the other)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if trade.OrderNo == "" || trade.Amount <= 0 {
				return fmt.Errorf("--order and a positive --amount are required")
			}
			if trade.TransactionID == "" {
				trade.TransactionID = "TXN" + strings.ToUpper(runID()) + strings.ToUpper(runID())
			}
			trade.PaidAt = time.Now()
			_, sender, err := tf.setup(1)
			if err != nil {
				return err
			}
			var attempts []storm.Attempt
			unacked := 0
			for i := 0; i < max(times, 1); i++ {
				a, err := sender.Send(cmd.Context(), trade)
				if err != nil {
					return err
				}
				attempts = append(attempts, a)
				if a.Outcome != storm.OutcomeSuccess {
					unacked++
				}
				if !tf.json {
					line := fmt.Sprintf("attempt %d: %s (HTTP %d) in %s", i+1, a.Outcome, a.Status, a.Latency.Round(time.Microsecond))
					if a.Err != nil {
						line += ": " + a.Err.Error()
					} else if a.Body != "" {
						line += ": " + a.Body
					}
					fmt.Fprintln(cmd.OutOrStdout(), line)
				}
			}
			if tf.json {
				if err := printJSON(cmd.OutOrStdout(), attempts); err != nil {
					return err
				}
			}
			if unacked > 0 {
				return errUnacknowledged{unacked}
			}
			return nil
		},
	}
	tf.register(cmd.Flags())
	f := cmd.Flags()
	f.StringVar(&trade.OrderNo, "order", "", "merchant order number (out_trade_no)")
	f.Int64Var(&trade.Amount, "amount", 0, "paid amount in minor units (fen, cents)")
	f.StringVar(&trade.Currency, "currency", "CNY", "ISO 4217 currency")
	f.StringVar(&trade.TransactionID, "transaction-id", "", "provider transaction id (random when empty)")
	f.IntVar(&times, "times", 1, "deliveries of the same notification, one after the other")
	return cmd
}

// stormFlags are the flags of storm and replay.
type stormFlags struct {
	targetFlags
	orders, concurrency int
	prefix, currency    string
	registerOrders      bool
	tokenFile           string
	queryAPI            string
	drop                int
}

func (s *stormFlags) registerFlags(f *pflag.FlagSet) {
	s.register(f)
	f.IntVar(&s.orders, "orders", 100, "number of distinct orders")
	f.IntVar(&s.concurrency, "concurrency", 16, "requests in flight")
	f.StringVar(&s.prefix, "prefix", "", "order number prefix (random per run when empty)")
	f.StringVar(&s.currency, "currency", "CNY", "ISO 4217 currency of the orders")
	f.BoolVar(&s.registerOrders, "register-orders", false, "register the orders through callbackd's merchant API first (needs --token-file)")
	f.StringVar(&s.tokenFile, "token-file", "", "file whose first line is a merchant API bearer token")
	f.StringVar(&s.queryAPI, "query-api", "", "`URL` of a running 'paysim serve-query': the orders are recorded there as paid")
	f.IntVar(&s.drop, "drop", 0, "pay this many of the orders without ever notifying them (needs --query-api), so only the active query path finds them")
}

// prepare makes the trades, registers their orders and records them at the fake provider as
// asked, and returns the trades to notify (the dropped ones left out).
func (s *stormFlags) prepare(cmd *cobra.Command, set *keyset.Set) ([]storm.Trade, error) {
	if s.orders < 1 || s.concurrency < 1 {
		return nil, fmt.Errorf("--orders and --concurrency must be at least 1")
	}
	if s.drop < 0 || s.drop > s.orders {
		return nil, fmt.Errorf("--drop must be between 0 and --orders")
	}
	if s.drop > 0 && s.queryAPI == "" {
		return nil, fmt.Errorf("--drop needs --query-api: a dropped notification is only found by querying the provider")
	}
	prefix := s.prefix
	if prefix == "" {
		prefix = "PS" + strings.ToUpper(runID())
	}
	trades := storm.NewTrades(prefix, s.orders, s.currency, time.Now())
	ctx := cmd.Context()
	m := set.Manifest
	if s.registerOrders {
		token, err := readToken(s.tokenFile)
		if err != nil {
			return nil, err
		}
		base, err := baseURL(s.target)
		if err != nil {
			return nil, err
		}
		channel := s.channel
		if channel == "" {
			channel = m.Channel
		}
		merchant := storm.Merchant{BaseURL: base, Token: token}
		if err := merchant.Register(ctx, storm.OrderSpec{Channel: channel, MerchantID: m.Merchant.MerchantID, SubMerchantID: m.Merchant.SubMerchantID}, trades, 8); err != nil {
			return nil, err
		}
	}
	if s.queryAPI != "" {
		paid := make([]fakeprovider.Trade, len(trades))
		for i, t := range trades {
			paid[i] = fakeprovider.Trade{Provider: m.Provider, MerchantID: m.Merchant.MerchantID, OutTradeNo: t.OrderNo,
				TransactionID: t.TransactionID, Amount: t.Amount, Currency: t.Currency, PaidAt: t.PaidAt}
		}
		if err := fakeprovider.PutTrades(ctx, s.queryAPI, paid); err != nil {
			return nil, err
		}
	}
	return trades[s.drop:], nil
}

func readToken(path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("--register-orders needs --token-file")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read the token file: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	return "", fmt.Errorf("the token file %s holds no token", path)
}

func newStormCommand() *cobra.Command {
	var (
		sf         stormFlags
		duplicates int
		shuffle    bool
	)
	cmd := &cobra.Command{
		Use:   "storm --keys DIR --target URL --orders N --duplicates D --concurrency C [--shuffle]",
		Short: "Deliver N orders' notifications D times each at concurrency C, as in a provider's retry storm",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, sender, err := sf.setup(sf.concurrency)
			if err != nil {
				return err
			}
			trades, err := sf.prepare(cmd, set)
			if err != nil {
				return err
			}
			sum, err := sender.Storm(cmd.Context(), storm.Config{Trades: trades, Duplicates: duplicates, Concurrency: sf.concurrency, Shuffle: shuffle})
			if sf.json {
				if perr := printJSON(cmd.OutOrStdout(), sum); perr != nil {
					return perr
				}
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), sum)
				if sf.drop > 0 {
					fmt.Fprintf(cmd.OutOrStdout(), "  dropped: %d paid orders were never notified\n", sf.drop)
				}
			}
			if err != nil {
				return err
			}
			// In a storm the duplicates of an order in flight are rightly told "not yet": only
			// an order that no delivery got acknowledged is a failure.
			if sum.OrdersAcknowledged < sum.Orders {
				return errUnacknowledged{sum.Orders - sum.OrdersAcknowledged}
			}
			return nil
		},
	}
	sf.registerFlags(cmd.Flags())
	cmd.Flags().IntVar(&duplicates, "duplicates", 5, "deliveries of each notification")
	cmd.Flags().BoolVar(&shuffle, "shuffle", false, "send the deliveries in random order")
	return cmd
}

func newReplayCommand() *cobra.Command {
	var (
		sf       stormFlags
		schedule string
		compress float64
	)
	cmd := &cobra.Command{
		Use:   "replay --keys DIR --target URL [--schedule 15s,15s,30s,...] --compress 1000",
		Short: "Replay the provider's retry schedule with compressed time, resending only when the answer says so",
		Long: `Delivers each order's notification and, while the answer is not the provider's success form
(WeChat Pay: 200 or 204; Alipay: exactly "success"; Stripe and Standard Webhooks: any 2xx), resends it
after the next interval of the schedule divided by --compress. The default schedule is the provider's
documented one (WeChat Pay: 15s,15s,30s,3m,10m,20m,30m,30m,30m,60m,3h,3h,3h,6h,6h).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			set, sender, err := sf.setup(sf.concurrency)
			if err != nil {
				return err
			}
			waits, err := replaySchedule(schedule, set.Manifest.Provider)
			if err != nil {
				return err
			}
			trades, err := sf.prepare(cmd, set)
			if err != nil {
				return err
			}
			res, err := sender.Replay(cmd.Context(), storm.ReplayConfig{Trades: trades, Schedule: waits, Compress: compress, Concurrency: sf.concurrency})
			if sf.json {
				if perr := printJSON(cmd.OutOrStdout(), res); perr != nil {
					return perr
				}
			} else if len(res.Trades) > 0 {
				fmt.Fprintln(cmd.OutOrStdout(), res)
			}
			if err != nil {
				return err
			}
			if res.GaveUp > 0 {
				return errUnacknowledged{res.GaveUp}
			}
			return nil
		},
	}
	sf.registerFlags(cmd.Flags())
	cmd.Flags().StringVar(&schedule, "schedule", "", "comma-separated waits before each resend (default: the provider's documented schedule)")
	cmd.Flags().Float64Var(&compress, "compress", 1000, "divide every wait by this factor")
	return cmd
}

// replaySchedule parses --schedule, defaulting to the provider's documented schedule.
func replaySchedule(flag string, p callbackdv1alpha1.Provider) ([]time.Duration, error) {
	if flag != "" {
		return storm.ParseSchedule(flag)
	}
	var ds []time.Duration
	switch p {
	case callbackdv1alpha1.ProviderWeChatPay:
		for _, d := range config.WeChatPayRetrySchedule() {
			ds = append(ds, d.Duration)
		}
	case callbackdv1alpha1.ProviderAlipay:
		for _, d := range config.AlipayRetrySchedule() {
			ds = append(ds, d.Duration)
		}
	default:
		return nil, fmt.Errorf("%s has no built-in retry schedule; pass --schedule", p)
	}
	return ds, nil
}
