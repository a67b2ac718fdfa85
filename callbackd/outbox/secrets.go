package outbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/seed-1cff2221/callback-platform/callbackd/provider/standardwebhooks"
)

// SecretSource provides the Standard Webhooks signing secret of a delivery endpoint.
// Implementations must be safe for concurrent use and must never put key material in errors.
type SecretSource interface {
	// Secret returns the raw HMAC key of the endpoint of the channel.
	Secret(channel, endpoint string) ([]byte, error)
}

// SecretDirs reads each channel's secrets from a directory (config.KeyFiles.DeliverySecretDir,
// a mounted Secret): one file per endpoint, named by the endpoint, holding "whsec_<base64>".
// The file is read at every attempt, so a rotated Secret is used from the next attempt on
// without any watcher; one small read is negligible beside an HTTP request.
type SecretDirs map[string]string

// Secret implements SecretSource.
func (s SecretDirs) Secret(channel, endpoint string) ([]byte, error) {
	dir, ok := s[channel]
	if !ok || dir == "" {
		return nil, fmt.Errorf("channel %s has no delivery secret directory", channel)
	}
	if !validEndpointName(endpoint) {
		return nil, fmt.Errorf("invalid endpoint name %q", endpoint)
	}
	path := filepath.Join(dir, endpoint)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no secret file %s", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read secret file %s: %w", path, err)
	}
	key, err := standardwebhooks.ParseSecret(string(b))
	if err != nil {
		return nil, fmt.Errorf("secret file %s: %w", path, err)
	}
	return key, nil
}

// StaticSecrets are secrets held in memory, by channel and endpoint (tests, embedding).
type StaticSecrets map[string]map[string][]byte

// Secret implements SecretSource.
func (s StaticSecrets) Secret(channel, endpoint string) ([]byte, error) {
	key := s[channel][endpoint]
	if len(key) == 0 {
		return nil, fmt.Errorf("no secret for endpoint %s of channel %s", endpoint, channel)
	}
	return key, nil
}

// validEndpointName applies the CRD's pattern ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ (at most 63
// characters): endpoint names become file names, metric labels and part of the webhook-id.
func validEndpointName(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(name)-1:
		default:
			return false
		}
	}
	return true
}
