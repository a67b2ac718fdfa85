package wechatpay

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed-1cff2221/callback-platform/callbackd/keys"
)

// PublicKeyIDPrefix starts the ids of WeChat Pay public keys (as opposed to certificate serials).
const PublicKeyIDPrefix = "PUB_KEY_ID_"

// Keys is the key material of a channel: WeChat Pay's verification keys by the id sent in
// Wechatpay-Serial, and the merchant's APIv3 key that decrypts resources.
type Keys struct {
	// Verifiers are WeChat Pay's public keys: platform certificates by serial (upper-case hex)
	// and public keys by PUB_KEY_ID_ id. Several at once during a migration or a rotation.
	Verifiers map[string]*rsa.PublicKey
	// APIv3Key is the 32-byte AES-256 key.
	APIv3Key []byte
}

// LoadKeys reads the APIv3 key file and the directory of WeChat Pay keys (one PEM file per key,
// named <serial>.pem or PUB_KEY_ID_....pem). A certificate is indexed by the serial it carries;
// a bare public key by its file name. Errors name files, never contents.
func LoadKeys(apiV3KeyFile, publicKeyDir string) (*Keys, error) {
	raw, err := os.ReadFile(apiV3KeyFile)
	if err != nil {
		return nil, fmt.Errorf("read APIv3 key file: %w", err)
	}
	apiV3Key := []byte(strings.TrimSpace(string(raw)))
	if len(apiV3Key) != 32 {
		return nil, fmt.Errorf("APIv3 key file %s: the key must be 32 bytes, got %d", apiV3KeyFile, len(apiV3Key))
	}
	files, err := keys.ReadDirFiles(publicKeyDir, ".pem")
	if err != nil {
		return nil, err
	}
	k := &Keys{Verifiers: make(map[string]*rsa.PublicKey, len(files)), APIv3Key: apiV3Key}
	for name, content := range files {
		id, pub, err := parseVerifier(name, content)
		if err != nil {
			return nil, fmt.Errorf("WeChat Pay key file %s: %w", filepath.Join(publicKeyDir, name+".pem"), err)
		}
		k.Verifiers[id] = pub
	}
	if len(k.Verifiers) == 0 {
		return nil, fmt.Errorf("no WeChat Pay certificate or public key (*.pem) in %s", publicKeyDir)
	}
	return k, nil
}

// parseVerifier decodes one PEM file: a CERTIFICATE (indexed by its serial) or a PUBLIC KEY
// (indexed by the file name, which must be its PUB_KEY_ID_ id).
func parseVerifier(name string, content []byte) (string, *rsa.PublicKey, error) {
	block, _ := pem.Decode(content)
	if block == nil {
		return "", nil, errors.New("no PEM block")
	}
	switch block.Type {
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return "", nil, fmt.Errorf("parse certificate: %w", err)
		}
		pub, ok := cert.PublicKey.(*rsa.PublicKey)
		if !ok {
			return "", nil, errors.New("certificate key is not RSA")
		}
		return CertificateSerial(cert), pub, nil
	case "PUBLIC KEY", "RSA PUBLIC KEY":
		var parsed any
		var err error
		if block.Type == "PUBLIC KEY" {
			parsed, err = x509.ParsePKIXPublicKey(block.Bytes)
		} else {
			parsed, err = x509.ParsePKCS1PublicKey(block.Bytes)
		}
		if err != nil {
			return "", nil, fmt.Errorf("parse public key: %w", err)
		}
		pub, ok := parsed.(*rsa.PublicKey)
		if !ok {
			return "", nil, errors.New("public key is not RSA")
		}
		if !strings.HasPrefix(name, PublicKeyIDPrefix) {
			return "", nil, fmt.Errorf("a bare public key file must be named %s<id>.pem", PublicKeyIDPrefix)
		}
		return name, pub, nil
	default:
		return "", nil, fmt.Errorf("unexpected PEM block %q", block.Type)
	}
}

// CertificateSerial is a certificate's serial as WeChat Pay prints it: upper-case hex of the
// serial's bytes.
func CertificateSerial(cert *x509.Certificate) string {
	return fmt.Sprintf("%X", cert.SerialNumber.Bytes())
}

// String describes the key set without its material, so that an accidental %v never leaks the
// APIv3 key.
func (k *Keys) String() string {
	if k == nil {
		return "wechatpay.Keys(nil)"
	}
	return fmt.Sprintf("wechatpay.Keys{verifiers: %d, apiV3Key: [redacted]}", len(k.Verifiers))
}

// GoString is String, for %#v.
func (k *Keys) GoString() string { return k.String() }
