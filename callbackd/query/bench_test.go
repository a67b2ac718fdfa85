package query_test

import (
	"testing"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/query"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/fakeprovider"
)

// BenchmarkQuery measures one active query of a paid order against the fake provider on
// loopback: request signing with the merchant key, the provider's verification and signed
// answer, the answer's verification and its normalization. The provider's RSA-2048 operations
// run in the same process, so this is an upper bound of callbackd's own cost per query.
func BenchmarkQuery(b *testing.B) {
	f := newFixture(b)
	clients, _ := newClients(b, f.channels(), query.ClientOptions{})
	f.fake.Put(
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderWeChatPay, MerchantID: mchID, OutTradeNo: "B-1", TransactionID: "4200000001", Amount: 100, Currency: "CNY", PaidAt: paidAt},
		fakeprovider.Trade{Provider: callbackdv1alpha1.ProviderAlipay, MerchantID: aliApp, OutTradeNo: "B-1", TransactionID: "2026112922001", Amount: 100, Currency: "CNY", PaidAt: paidAt},
	)
	for _, tc := range []struct{ channel, merchant string }{{"wx", mchID}, {"ali", aliApp}} {
		b.Run(tc.channel, func(b *testing.B) {
			o := order(tc.channel, tc.merchant, "B-1", 100)
			b.ReportAllocs()
			for b.Loop() {
				a, err := clients[tc.channel].Query(b.Context(), o)
				if err != nil || a.State != query.StatePaid {
					b.Fatalf("expected paid, got %+v, %v", a, err)
				}
			}
		})
	}
}
