package paysim_test

import (
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/text/encoding/simplifiedchinese"

	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

func TestPlatformCertificateSerialIsUpperHexOfTheCertificate(t *testing.T) {
	key, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	c, err := paysim.NewPlatformCertificate(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Serial) != 40 || strings.ToUpper(c.Serial) != c.Serial {
		t.Fatalf("expected 40 upper-case hex digits, got %q", c.Serial)
	}
	if got := strings.ToUpper(c.Cert.SerialNumber.Text(16)); got != c.Serial {
		t.Fatalf("expected the serial to be the certificate's (%s), got %s", got, c.Serial)
	}
	if !c.Cert.PublicKey.(*rsa.PublicKey).Equal(&key.PublicKey) {
		t.Fatal("expected the certificate to carry the key")
	}
}

func TestWeChatNotificationWireFormat(t *testing.T) {
	key, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	apiV3Key, err := paysim.NewAPIv3Key()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_767_225_600, 0)
	w := &paysim.WeChatPay{APIv3Key: apiV3Key, Serial: "PUB_KEY_ID_01", Key: key, Now: func() time.Time { return at }}
	n, err := w.Payment(paysim.WeChatTransaction{MchID: "1900000001", OutTradeNo: "P1", TradeState: "SUCCESS", Amount: paysim.WeChatAmount{Total: 7}}, paysim.WeChatOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for h, want := range map[string]string{"Wechatpay-Serial": "PUB_KEY_ID_01", "Wechatpay-Timestamp": "1767225600"} {
		if got := n.Header.Get(h); got != want {
			t.Errorf("header %s: expected %q, got %q", h, want, got)
		}
	}
	// The signature covers "timestamp\nnonce\nbody\n".
	sig, err := base64.StdEncoding.DecodeString(n.Header.Get("Wechatpay-Signature"))
	if err != nil {
		t.Fatal(err)
	}
	msg := n.Header.Get("Wechatpay-Timestamp") + "\n" + n.Header.Get("Wechatpay-Nonce") + "\n" + string(n.Body) + "\n"
	sum := sha256.Sum256([]byte(msg))
	if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		t.Fatalf("expected the signature to verify over timestamp\\nnonce\\nbody\\n: %v", err)
	}
	var env struct {
		EventType string `json:"event_type"`
		Resource  struct {
			Algorithm      string `json:"algorithm"`
			Ciphertext     string `json:"ciphertext"`
			Nonce          string `json:"nonce"`
			AssociatedData string `json:"associated_data"`
		} `json:"resource"`
	}
	if err := json.Unmarshal(n.Body, &env); err != nil {
		t.Fatal(err)
	}
	if env.EventType != "TRANSACTION.SUCCESS" || env.Resource.Algorithm != "AEAD_AES_256_GCM" || len(env.Resource.Nonce) != 12 || env.Resource.AssociatedData != "transaction" {
		t.Fatalf("unexpected resource %+v", env.Resource)
	}
	ct, _ := base64.StdEncoding.DecodeString(env.Resource.Ciphertext)
	block, _ := aes.NewCipher([]byte(apiV3Key))
	gcm, _ := cipher.NewGCM(block)
	plain, err := gcm.Open(nil, []byte(env.Resource.Nonce), ct, []byte(env.Resource.AssociatedData))
	if err != nil {
		t.Fatalf("expected the resource to decrypt with the APIv3 key: %v", err)
	}
	if !strings.Contains(string(plain), `"out_trade_no":"P1"`) || !strings.Contains(string(plain), `"total":7`) {
		t.Fatalf("unexpected plaintext %s", plain)
	}
}

func TestAlipaySignContent(t *testing.T) {
	got := paysim.AlipaySignContent(map[string]string{
		"sign": "x", "sign_type": "RSA2", "b": "2", "a": "1", "empty": "", "a_b": "3", "A": "0",
	})
	if want := "A=0&a=1&a_b=3&b=2"; got != want {
		t.Fatalf("expected %q, got %q", want, got)
	}
}

func TestAlipayGBKBodyCarriesGBKBytes(t *testing.T) {
	key, err := paysim.NewRSAKey()
	if err != nil {
		t.Fatal(err)
	}
	n, err := (&paysim.Alipay{AppID: "2021", Key: key, Charset: "gbk"}).Notify(map[string]string{"subject": "测试"}, paysim.AlipayOptions{})
	if err != nil {
		t.Fatal(err)
	}
	values, err := url.ParseQuery(string(n.Body))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := simplifiedchinese.GBK.NewEncoder().String("测试")
	if values.Get("subject") != want || values.Get("charset") != "gbk" {
		t.Fatalf("expected the gbk bytes of 测试 and charset gbk, got %q and %q", values.Get("subject"), values.Get("charset"))
	}
	// The signature covers the gbk bytes.
	sig, _ := base64.StdEncoding.DecodeString(values.Get("sign"))
	fields := map[string]string{}
	for k := range values {
		fields[k] = values.Get(k)
	}
	sum := sha256.Sum256([]byte(paysim.AlipaySignContent(fields)))
	if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		t.Fatalf("expected the RSA2 signature to verify over the gbk sign content: %v", err)
	}
}

func TestStandardWebhooksSignatureMatchesThePublishedVector(t *testing.T) {
	// Vector of the Standard Webhooks reference library (libraries@v0.0.1, go/webhook_test.go).
	got, err := paysim.StandardWebhooksSignature("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="; got != want {
		t.Fatalf("expected %s, got %s", want, got)
	}
}
