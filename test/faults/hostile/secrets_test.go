package hostile

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
	"github.com/seed-1cff2221/callback-platform/internal/promtext"
)

// Attacker-chosen values must not become metric series: unknown channels, unknown key serials
// and random notification contents, a few hundred of each, add at most the handful of series of
// the fixed refusal reasons (a label per attacker value would let a scan exhaust Prometheus).
func TestAttackerCannotCreateMetricSeries(t *testing.T) {
	e := suite
	countSeries := func(m promtext.Families) int {
		n := 0
		for name, f := range m {
			if strings.HasPrefix(name, "callbackd_") {
				n += len(f.GetMetric())
			}
		}
		return n
	}
	o := e.register(t, wxChannel, "series", 100)
	before := countSeries(e.scrape(t))
	const each = 200
	var unknownChannel, unknownSerial int
	for i := 0; i < each; i++ {
		if a := e.post("ch-"+randomHex(8), http.Header{"Content-Type": {"application/json"}}, strings.NewReader("{}")); a.code == http.StatusNotFound {
			unknownChannel++
		}
		n := e.mustWx(t, wxPayment(o), paysim.WeChatOptions{})
		n.Header.Set("Wechatpay-Serial", "PUB_KEY_ID_"+randomDigits(32))
		if a := e.send(wxChannel, n); a.code == http.StatusBadRequest {
			unknownSerial++
		}
	}
	after := countSeries(e.scrape(t))
	if unknownChannel != each || unknownSerial != each {
		t.Errorf("answers: expected %d×404 for unknown channels and %d×400 for unknown serials, got %d and %d", each, each, unknownChannel, unknownSerial)
	}
	if after-before > 5 {
		t.Errorf("callbackd_* series: expected at most 5 new (fixed refusal reasons), got %d → %d", before, after)
	}
	t.Logf("sent %d requests to random channels and %d with random key serials → callbackd_* series %d → %d", each, each, before, after)
}

// secretsInLog returns the names of the secrets and personal data found in callbackd's log
// after all the hostile traffic: the APIv3 key, the merchant API token, callbackd's private keys
// (a line of their PEM bodies) and the payer's openid that every notification carries.
func (e *env) secretsInLog() ([]string, error) {
	log, err := os.ReadFile(e.logPath)
	if err != nil {
		return nil, fmt.Errorf("read callbackd's log: %w", err)
	}
	needles := map[string]string{
		"APIv3 key":          e.wxKeys.APIv3Key,
		"merchant API token": e.apiToken,
		"payer openid":       "oUpF8uMuAJO_M2pxb1Q9zNjWeS6o",
	}
	for name, path := range map[string]string{
		"WeChat Pay merchant private key": e.wxKeys.Manifest.Keys.WeChatMerchantKeyFile,
		"Alipay app private key":          e.aliKeys.Manifest.Keys.AlipayAppPrivateKeyFile,
	} {
		pem, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		lines := strings.Split(string(pem), "\n")
		if len(lines) > 2 {
			needles[name] = lines[1] // the first line of the base64 body
		}
	}
	var found []string
	for name, needle := range needles {
		if needle != "" && strings.Contains(string(log), needle) {
			found = append(found, name)
		}
	}
	return found, nil
}
