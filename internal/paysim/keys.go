package paysim

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// RSAKeyBits is the size of generated RSA keys; both WeChat Pay and Alipay use RSA-2048.
const RSAKeyBits = 2048

// NewRSAKey generates an RSA-2048 key pair.
func NewRSAKey() (*rsa.PrivateKey, error) {
	k, err := rsa.GenerateKey(rand.Reader, RSAKeyBits)
	if err != nil {
		return nil, fmt.Errorf("paysim: generate RSA key: %w", err)
	}
	return k, nil
}

// PrivateKeyPEM encodes a private key as PKCS#8 PEM ("PRIVATE KEY"), the form WeChat Pay's
// apiclient_key.pem and Alipay's key tools use.
func PrivateKeyPEM(k *rsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("paysim: encode private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// PublicKeyPEM encodes a public key as PKIX PEM ("PUBLIC KEY"), the form of WeChat Pay's
// pub_key.pem (PUB_KEY_ID_...) and of the Alipay public key.
func PublicKeyPEM(k *rsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return nil, fmt.Errorf("paysim: encode public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// PublicKeyBase64 is the bare base64 DER of a public key, as the Alipay console shows it.
func PublicKeyBase64(k *rsa.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		return "", fmt.Errorf("paysim: encode public key: %w", err)
	}
	return base64.StdEncoding.EncodeToString(der), nil
}

// PlatformCertificate is a WeChat Pay platform certificate made for tests.
type PlatformCertificate struct {
	// Serial is the certificate serial in upper-case hex, as WeChat Pay prints it and sends it
	// in Wechatpay-Serial.
	Serial string
	// PEM is the certificate, to be written to <Serial>.pem.
	PEM []byte
	// Cert is the parsed certificate.
	Cert *x509.Certificate
}

// NewPlatformCertificate issues a self-signed certificate for key, valid from an hour ago for
// five years, with a random 20-byte serial (WeChat Pay serials are 40 hex digits).
func NewPlatformCertificate(key *rsa.PrivateKey) (*PlatformCertificate, error) {
	serialBytes := make([]byte, 20)
	if _, err := rand.Read(serialBytes); err != nil {
		return nil, fmt.Errorf("paysim: certificate serial: %w", err)
	}
	serialBytes[0] = serialBytes[0]&0x7f | 0x10 // positive, and no leading zero byte to trim
	serial := new(big.Int).SetBytes(serialBytes)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "Tenpay.com Root CA (paysim test)", Organization: []string{"paysim"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(5, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("paysim: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("paysim: parse certificate: %w", err)
	}
	return &PlatformCertificate{
		Serial: fmt.Sprintf("%X", cert.SerialNumber.Bytes()),
		PEM:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Cert:   cert,
	}, nil
}

// alphanumerics is the alphabet of WeChat Pay APIv3 keys and nonces.
const alphanumerics = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// RandomString returns n characters drawn uniformly from [a-zA-Z0-9] with crypto/rand.
func RandomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(alphanumerics)))
	for i := range b {
		v, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("paysim: random string: %w", err)
		}
		b[i] = alphanumerics[v.Int64()]
	}
	return string(b), nil
}

// NewAPIv3Key returns a WeChat Pay APIv3 key: 32 ASCII characters, used as the AES-256 key.
func NewAPIv3Key() (string, error) { return RandomString(32) }

// NewWebhookSecret returns a Standard Webhooks secret "whsec_<base64 of 32 random bytes>".
func NewWebhookSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("paysim: webhook secret: %w", err)
	}
	return "whsec_" + base64.StdEncoding.EncodeToString(b), nil
}
