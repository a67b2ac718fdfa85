package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/storm"
)

func newServeQueryCommand() *cobra.Command {
	var (
		listen string
		dirs   []string
	)
	cmd := &cobra.Command{
		Use:   "serve-query --listen 127.0.0.1:9000 --keys DIR [--keys DIR ...]",
		Short: "Serve a fake WeChat Pay / Alipay order query API for the channels of the given key sets",
		Long: `Serves WeChat Pay's GET /v3/pay/transactions/out-trade-no/{out_trade_no}?mchid=… and Alipay's
gateway method alipay.trade.query (POST /gateway.do), verifying the merchant's request signatures and
signing the answers with the providers' test keys, as the real APIs do. It knows the orders that
` + "`paysim storm --query-api`" + ` recorded as paid (PUT /paysim/trades); GET /paysim/queries counts the
queries per order. Point a channel's reconciliation.queryBaseURL at it. Runs until interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			if _, err := storm.CheckTarget("http://" + net.JoinHostPort(host, "1")); err != nil {
				return fmt.Errorf("--listen %s: %w", listen, err)
			}
			var sets []*keyset.Set
			for _, d := range dirs {
				set, err := keyset.Load(d)
				if err != nil {
					return err
				}
				sets = append(sets, set)
			}
			logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			fake, err := fakeprovider.New(sets, fakeprovider.Options{Logger: logger})
			if err != nil {
				return err
			}
			var lc net.ListenConfig
			ln, err := lc.Listen(cmd.Context(), "tcp", listen)
			if err != nil {
				return fmt.Errorf("serve-query: %w", err)
			}
			srv := &http.Server{Handler: fake, ReadHeaderTimeout: 5 * time.Second}
			fmt.Fprintf(cmd.OutOrStdout(), "fake provider query API on http://%s (%d channel(s))\n", ln.Addr(), len(sets))
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ln) }()
			select {
			case err := <-done:
				return fmt.Errorf("serve-query: %w", err)
			case <-cmd.Context().Done():
			}
			if err := srv.Close(); err != nil {
				return fmt.Errorf("serve-query: stop: %w", err)
			}
			if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("serve-query: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:9000", "loopback address to listen on")
	cmd.Flags().StringArrayVar(&dirs, "keys", nil, "key set folder of a wechatpay or alipay channel (repeatable)")
	_ = cmd.MarkFlagRequired("keys")
	return cmd
}
