package alipay_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// BenchmarkParse measures one verification of a gbk notification: form parsing, RSA-2048
// signature over the sorted fields, transcoding and amount conversion.
func BenchmarkParse(b *testing.B) {
	f := keyMaterial(b)
	a := newAdapter(b, f, testSellerID)
	n, err := sim(f, "gbk").Trade(trade("B1", paysim.AlipayTradeSuccess, "99.00"), paysim.AlipayOptions{})
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodPost, "/notify/ali-main", nil)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Parse(context.Background(), r, n.Body); err != nil {
			b.Fatal(err)
		}
	}
}
