package field

import (
	"context"
	"fmt"
	"net/http"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/notify"
	"github.com/seed-1cff2221/callback-platform/callbackd/provider"
	"github.com/seed-1cff2221/callback-platform/internal/paysim/keyset"
)

// WeChatVerifier builds a VerifyFunc from callbackd's own WeChat Pay adapter, constructed exactly
// as callbackd constructs it (provider.New on the channel of the key set, reading the key files
// callbackd reads), so the designs pay the same verification cost as callbackd: RSA-2048 signature,
// timestamp window, AES-256-GCM decryption, merchant identity. The key files are watched until ctx
// is done. set must be a WeChat Pay key set (keyset.Generate or keyset.Load, as paysim uses).
func WeChatVerifier(ctx context.Context, set *keyset.Set) (VerifyFunc, error) {
	if set == nil || set.Manifest.Provider != callbackdv1alpha1.ProviderWeChatPay {
		return nil, fmt.Errorf("field: WeChat verifier: need a %s key set", callbackdv1alpha1.ProviderWeChatPay)
	}
	a, err := provider.New(ctx, set.Channel(callbackdv1alpha1.ChannelSettings{}), nil, nil)
	if err != nil {
		return nil, fmt.Errorf("field: WeChat verifier for channel %s: %w", set.Manifest.Channel, err)
	}
	return AdapterVerifier(a), nil
}

// AdapterVerifier turns any callbackd adapter into a VerifyFunc: a successful payment gives its
// order number, provider transaction id and amount; any other verified notification (a refund, a
// non-SUCCESS trade state) is ErrNoEffect; a refused one is the adapter's error.
func AdapterVerifier(a notify.Adapter) VerifyFunc {
	return func(r *http.Request, body []byte) (string, string, int64, error) {
		n, err := a.Parse(r.Context(), r, body)
		if err != nil {
			return "", "", 0, fmt.Errorf("field: verify %s notification: %w", a.Provider(), err)
		}
		if n.Kind != notify.KindPayment || n.Status != notify.StatusSucceeded {
			return "", "", 0, fmt.Errorf("field: %s %s notification: %w", n.Kind, n.Status, ErrNoEffect)
		}
		return n.OutTradeNo, n.ProviderTxnID, n.Amount, nil
	}
}
