// Package keyset writes and reads the test key material of one simulated payment channel: the
// files callbackd reads (laid out exactly as its config.KeyFiles names them, as a mounted Secret
// would provide them) and, apart from them, the provider's own secrets that only the simulator
// holds (WeChat Pay's and Alipay's private keys, and the public keys of the merchant's query
// signing keys).
//
// A folder written by Generate looks like this (wechatpay channel):
//
//	keyset.json                 manifest: provider, merchant identity, serials, every path
//	callbackd/apiv3.key         the APIv3 key (shared by both sides)
//	callbackd/wechatpay/PUB_KEY_ID_….pem  WeChat Pay's public key (or <SERIAL>.pem, a certificate)
//	callbackd/merchant_key.pem  the merchant's private key, signing active queries
//	provider/platform_key.pem   WeChat Pay's private key: signs notifications and query answers
//	provider/merchant_public_key.pem  verifies the merchant's query signatures
//
// and for alipay: callbackd/alipay_public_key.pem, callbackd/app_private_key.pem,
// provider/alipay_private_key.pem, provider/app_public_key.pem; for stripe and
// standardwebhooks: callbackd/webhook_secret (the provider holds the same secret).
//
// Everything is generated with crypto/rand, written with mode 0600 in 0700 folders, and never
// printed.
package keyset

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"

	callbackdv1alpha1 "github.com/seed-1cff2221/callback-platform/api/v1alpha1"
	"github.com/seed-1cff2221/callback-platform/callbackd/config"
	"github.com/seed-1cff2221/callback-platform/internal/paysim"
)

// ManifestFile is the name of the manifest inside a key set folder.
const ManifestFile = "keyset.json"

// WeChat Pay verification key kinds: a platform certificate (indexed by its serial) or a public
// key (indexed by its PUB_KEY_ID_ id), the form WeChat Pay migrates merchants to.
const (
	WeChatKeyPublicKey   = "public-key"
	WeChatKeyCertificate = "certificate"
)

// Spec describes the channel a key set is generated for.
type Spec struct {
	// Channel is the channel name (the {channel} of /notify/{channel}).
	Channel string
	// Provider selects which key material is generated.
	Provider callbackdv1alpha1.Provider
	// Merchant is the identity the simulator puts in notifications: mchid and appid for WeChat
	// Pay, app_id (MerchantID) and seller_id for Alipay, the account for generic providers.
	Merchant callbackdv1alpha1.MerchantIdentity
	// WeChatKeyKind is WeChatKeyPublicKey (default) or WeChatKeyCertificate.
	WeChatKeyKind string
}

// Manifest is the keyset.json document: what the channel is and where every file is. Paths are
// absolute, so a callbackd configuration can use Keys as is.
type Manifest struct {
	Channel  string                             `json:"channel"`
	Provider callbackdv1alpha1.Provider         `json:"provider"`
	Merchant callbackdv1alpha1.MerchantIdentity `json:"merchant"`
	// WeChatSerial is the Wechatpay-Serial the simulator signs with: a certificate serial or a
	// PUB_KEY_ID_ id.
	WeChatSerial string `json:"wechatSerial,omitempty"`
	// Keys are the files callbackd reads, as its configuration names them.
	Keys config.KeyFiles `json:"keys"`
	// Provider-side secrets, held by the simulator only.
	WeChatPlatformKeyFile       string `json:"wechatPlatformKeyFile,omitempty"`
	WeChatMerchantPublicKeyFile string `json:"wechatMerchantPublicKeyFile,omitempty"`
	AlipayPrivateKeyFile        string `json:"alipayPrivateKeyFile,omitempty"`
	AlipayAppPublicKeyFile      string `json:"alipayAppPublicKeyFile,omitempty"`
}

// Set is a loaded key set: the manifest and the parsed key material.
type Set struct {
	Manifest Manifest

	// WeChat Pay.
	APIv3Key          string
	PlatformKey       *rsa.PrivateKey
	MerchantPublicKey *rsa.PublicKey

	// Alipay.
	AlipayKey    *rsa.PrivateKey
	AppPublicKey *rsa.PublicKey

	// Stripe and Standard Webhooks.
	WebhookSecret string
}

// Channel returns a callbackd channel of this key set with the given settings filled in: name,
// provider, merchant identity and key files come from the key set.
func (s *Set) Channel(settings callbackdv1alpha1.ChannelSettings) config.Channel {
	settings.Provider = s.Manifest.Provider
	settings.Merchant = s.Manifest.Merchant
	return config.Channel{Name: s.Manifest.Channel, ChannelSettings: settings, Keys: s.Manifest.Keys}
}

// Generate writes a fresh key set for spec into dir (created if needed) and returns it loaded.
// It refuses a dir that already holds a manifest, so keys are never silently replaced.
func Generate(dir string, spec Spec) (*Set, error) {
	if err := validateSpec(spec); err != nil {
		return nil, fmt.Errorf("keyset: generate: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("keyset: generate: %w", err)
	}
	if _, err := os.Stat(filepath.Join(abs, ManifestFile)); err == nil {
		return nil, fmt.Errorf("keyset: generate: %s already holds a key set; choose an empty folder", abs)
	}
	for _, d := range []string{abs, filepath.Join(abs, "callbackd"), filepath.Join(abs, "provider")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("keyset: generate: %w", err)
		}
	}
	g := generator{dir: abs, set: &Set{Manifest: Manifest{Channel: spec.Channel, Provider: spec.Provider, Merchant: spec.Merchant}}}
	switch spec.Provider {
	case callbackdv1alpha1.ProviderWeChatPay:
		err = g.wechatPay(spec.WeChatKeyKind)
	case callbackdv1alpha1.ProviderAlipay:
		err = g.alipay()
	case callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks:
		err = g.webhookSecret()
	}
	if err != nil {
		return nil, fmt.Errorf("keyset: generate %s keys: %w", spec.Provider, err)
	}
	manifest, err := json.MarshalIndent(g.set.Manifest, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("keyset: generate: encode manifest: %w", err)
	}
	if err := writeFile(filepath.Join(abs, ManifestFile), append(manifest, '\n')); err != nil {
		return nil, fmt.Errorf("keyset: generate: %w", err)
	}
	return g.set, nil
}

func validateSpec(spec Spec) error {
	if spec.Channel == "" {
		return errors.New("channel name is required")
	}
	if spec.Merchant.MerchantID == "" {
		return errors.New("merchant id is required")
	}
	switch spec.Provider {
	case callbackdv1alpha1.ProviderWeChatPay:
		if spec.Merchant.AppID == "" {
			return errors.New("a wechatpay channel needs an appid")
		}
		switch spec.WeChatKeyKind {
		case "", WeChatKeyPublicKey, WeChatKeyCertificate:
		default:
			return fmt.Errorf("unknown WeChat Pay key kind %q (want %s or %s)", spec.WeChatKeyKind, WeChatKeyPublicKey, WeChatKeyCertificate)
		}
	case callbackdv1alpha1.ProviderAlipay, callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks:
	default:
		return fmt.Errorf("unknown provider %q", spec.Provider)
	}
	return nil
}

// generator writes one key set's files.
type generator struct {
	dir string
	set *Set
}

func (g generator) callbackdPath(name string) string { return filepath.Join(g.dir, "callbackd", name) }
func (g generator) providerPath(name string) string  { return filepath.Join(g.dir, "provider", name) }

func (g generator) wechatPay(kind string) error {
	m := &g.set.Manifest
	apiV3Key, err := paysim.NewAPIv3Key()
	if err != nil {
		return err
	}
	platform, err := paysim.NewRSAKey()
	if err != nil {
		return err
	}
	merchant, err := paysim.NewRSAKey()
	if err != nil {
		return err
	}
	pubDir := g.callbackdPath("wechatpay")
	if err := os.MkdirAll(pubDir, 0o700); err != nil {
		return err
	}
	var verifier []byte
	if kind == WeChatKeyCertificate {
		cert, err := paysim.NewPlatformCertificate(platform)
		if err != nil {
			return err
		}
		m.WeChatSerial, verifier = cert.Serial, cert.PEM
	} else {
		id, err := randomDigits(32)
		if err != nil {
			return err
		}
		m.WeChatSerial = "PUB_KEY_ID_" + id
		if verifier, err = paysim.PublicKeyPEM(&platform.PublicKey); err != nil {
			return err
		}
	}
	merchantSerial, err := randomHexUpper(20)
	if err != nil {
		return err
	}
	m.Keys = config.KeyFiles{
		WeChatAPIv3KeyFile:    g.callbackdPath("apiv3.key"),
		WeChatPublicKeyDir:    pubDir,
		WeChatMerchantKeyFile: g.callbackdPath("merchant_key.pem"),
		WeChatMerchantSerial:  merchantSerial,
	}
	m.WeChatPlatformKeyFile = g.providerPath("platform_key.pem")
	m.WeChatMerchantPublicKeyFile = g.providerPath("merchant_public_key.pem")

	platformPEM, err := paysim.PrivateKeyPEM(platform)
	if err != nil {
		return err
	}
	merchantPEM, err := paysim.PrivateKeyPEM(merchant)
	if err != nil {
		return err
	}
	merchantPub, err := paysim.PublicKeyPEM(&merchant.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		m.Keys.WeChatAPIv3KeyFile:                    []byte(apiV3Key + "\n"),
		filepath.Join(pubDir, m.WeChatSerial+".pem"): verifier,
		m.Keys.WeChatMerchantKeyFile:                 merchantPEM,
		m.WeChatPlatformKeyFile:                      platformPEM,
		m.WeChatMerchantPublicKeyFile:                merchantPub,
	}
	if err := writeFiles(files); err != nil {
		return err
	}
	g.set.APIv3Key, g.set.PlatformKey, g.set.MerchantPublicKey = apiV3Key, platform, &merchant.PublicKey
	return nil
}

func (g generator) alipay() error {
	m := &g.set.Manifest
	alipayKey, err := paysim.NewRSAKey()
	if err != nil {
		return err
	}
	appKey, err := paysim.NewRSAKey()
	if err != nil {
		return err
	}
	m.Keys = config.KeyFiles{
		AlipayPublicKeyFile:     g.callbackdPath("alipay_public_key.pem"),
		AlipayAppPrivateKeyFile: g.callbackdPath("app_private_key.pem"),
	}
	m.AlipayPrivateKeyFile = g.providerPath("alipay_private_key.pem")
	m.AlipayAppPublicKeyFile = g.providerPath("app_public_key.pem")
	alipayPub, err := paysim.PublicKeyPEM(&alipayKey.PublicKey)
	if err != nil {
		return err
	}
	alipayPriv, err := paysim.PrivateKeyPEM(alipayKey)
	if err != nil {
		return err
	}
	appPriv, err := paysim.PrivateKeyPEM(appKey)
	if err != nil {
		return err
	}
	appPub, err := paysim.PublicKeyPEM(&appKey.PublicKey)
	if err != nil {
		return err
	}
	if err := writeFiles(map[string][]byte{
		m.Keys.AlipayPublicKeyFile:     alipayPub,
		m.Keys.AlipayAppPrivateKeyFile: appPriv,
		m.AlipayPrivateKeyFile:         alipayPriv,
		m.AlipayAppPublicKeyFile:       appPub,
	}); err != nil {
		return err
	}
	g.set.AlipayKey, g.set.AppPublicKey = alipayKey, &appKey.PublicKey
	return nil
}

func (g generator) webhookSecret() error {
	secret, err := paysim.NewWebhookSecret()
	if err != nil {
		return err
	}
	path := g.callbackdPath("webhook_secret")
	g.set.Manifest.Keys = config.KeyFiles{WebhookSecretFiles: []string{path}}
	if err := writeFile(path, []byte(secret+"\n")); err != nil {
		return err
	}
	g.set.WebhookSecret = secret
	return nil
}

// Load reads the key set in dir.
func Load(dir string) (*Set, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("keyset: load: %w (write one with `paysim keys`)", err)
	}
	s := &Set{}
	if err := json.Unmarshal(raw, &s.Manifest); err != nil {
		return nil, fmt.Errorf("keyset: load %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	m := s.Manifest
	switch m.Provider {
	case callbackdv1alpha1.ProviderWeChatPay:
		if s.APIv3Key, err = readSecret(m.Keys.WeChatAPIv3KeyFile); err == nil {
			if s.PlatformKey, err = readPrivateKey(m.WeChatPlatformKeyFile); err == nil {
				s.MerchantPublicKey, err = readPublicKey(m.WeChatMerchantPublicKeyFile)
			}
		}
		if err == nil && m.WeChatSerial == "" {
			err = errors.New("the manifest has no wechatSerial")
		}
	case callbackdv1alpha1.ProviderAlipay:
		if s.AlipayKey, err = readPrivateKey(m.AlipayPrivateKeyFile); err == nil {
			s.AppPublicKey, err = readPublicKey(m.AlipayAppPublicKeyFile)
		}
	case callbackdv1alpha1.ProviderStripe, callbackdv1alpha1.ProviderStandardWebhooks:
		if len(m.Keys.WebhookSecretFiles) == 0 {
			err = errors.New("the manifest names no webhook secret file")
		} else {
			s.WebhookSecret, err = readSecret(m.Keys.WebhookSecretFiles[0])
		}
	default:
		err = fmt.Errorf("unknown provider %q", m.Provider)
	}
	if err != nil {
		return nil, fmt.Errorf("keyset: load %s: %w", dir, err)
	}
	return s, nil
}

func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return v, nil
}

func readPrivateKey(path string) (*rsa.PrivateKey, error) {
	der, err := readPEM(path, "PRIVATE KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: parse private key: %w", path, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA private key", path)
	}
	return rk, nil
}

func readPublicKey(path string) (*rsa.PublicKey, error) {
	der, err := readPEM(path, "PUBLIC KEY")
	if err != nil {
		return nil, err
	}
	k, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, fmt.Errorf("%s: parse public key: %w", path, err)
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("%s: not an RSA public key", path)
	}
	return rk, nil
}

// readPEM returns the DER of the first PEM block of path, which must be of the given type.
// Errors name the file, never its content.
func readPEM(path, blockType string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != blockType {
		return nil, fmt.Errorf("%s: expected a %q PEM block", path, blockType)
	}
	return block.Bytes, nil
}

func writeFiles(files map[string][]byte) error {
	for path, content := range files {
		if err := writeFile(path, content); err != nil {
			return err
		}
	}
	return nil
}

// writeFile creates path with mode 0600, refusing to overwrite an existing file.
func writeFile(path string, content []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func randomDigits(n int) (string, error) {
	var b strings.Builder
	ten := big.NewInt(10)
	for i := 0; i < n; i++ {
		d, err := rand.Int(rand.Reader, ten)
		if err != nil {
			return "", fmt.Errorf("random digits: %w", err)
		}
		b.WriteByte(byte('0' + d.Int64()))
	}
	return b.String(), nil
}

func randomHexUpper(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random serial: %w", err)
	}
	return strings.ToUpper(hex.EncodeToString(b)), nil
}
