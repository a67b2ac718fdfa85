package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

func newKeysCommand() *cobra.Command {
	var (
		out, provider string
		spec          keyset.Spec
	)
	cmd := &cobra.Command{
		Use:   "keys --out DIR --channel NAME --provider P --merchant-id ID",
		Short: "Write a channel's test key material (callbackd's key files and the simulator's provider keys)",
		Long: `Writes fresh test keys for one channel into DIR: under DIR/callbackd the files callbackd's
configuration names in a channel's "keys" (as a mounted Secret would provide them), under
DIR/provider the provider's own secrets that only the simulator holds, and DIR/keyset.json.
Prints the channel block to paste into callbackd's configuration. Key contents are never printed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			spec.Provider = callbackdv1alpha1.Provider(provider)
			set, err := keyset.Generate(out, spec)
			if err != nil {
				return err
			}
			m := set.Manifest
			snippet, err := yaml.Marshal(map[string]any{"channels": []any{map[string]any{
				"name": m.Channel, "provider": m.Provider, "merchant": m.Merchant, "keys": m.Keys,
			}}})
			if err != nil {
				return fmt.Errorf("keys: render the configuration snippet: %w", err)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s keys of channel %s to %s\n", spec.Provider, spec.Channel, out)
			if set.Manifest.WeChatSerial != "" {
				fmt.Fprintf(w, "notifications are signed with Wechatpay-Serial %s\n", set.Manifest.WeChatSerial)
			}
			fmt.Fprintf(w, "callbackd configuration of the channel:\n%s", snippet)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "folder to write the key set into (created; must not hold one already)")
	f.StringVar(&spec.Channel, "channel", "", "channel name (the {channel} of /notify/{channel})")
	f.StringVar(&provider, "provider", "", "wechatpay, alipay, stripe or standardwebhooks")
	f.StringVar(&spec.Merchant.MerchantID, "merchant-id", "", "WeChat Pay mchid, Alipay app_id, or the generic provider's account id")
	f.StringVar(&spec.Merchant.AppID, "app-id", "", "WeChat Pay appid")
	f.StringVar(&spec.Merchant.SubMerchantID, "sub-merchant-id", "", "WeChat Pay sub_mchid of a service-provider channel")
	f.StringVar(&spec.Merchant.SellerID, "seller-id", "", "Alipay seller_id")
	f.StringVar(&spec.WeChatKeyKind, "wechat-key-kind", keyset.WeChatKeyPublicKey, "WeChat Pay verification key: public-key (PUB_KEY_ID_) or certificate")
	for _, name := range []string{"out", "channel", "provider", "merchant-id"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}
