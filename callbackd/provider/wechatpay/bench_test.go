package wechatpay_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// BenchmarkParse measures one full verification of a payment notification: RSA-2048 signature,
// AES-256-GCM decryption and JSON decoding.
func BenchmarkParse(b *testing.B) {
	f := keyMaterial(b)
	a := newAdapter(b, f, adapterOptions{})
	n, err := signer(f, true).Payment(paidTx("B1", 100), paysim.WeChatOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, "/notify/wx-main", bytes.NewReader(n.Body))
		r.Header = n.Header
		if _, err := a.Parse(context.Background(), r, n.Body); err != nil {
			b.Fatal(err)
		}
	}
}
