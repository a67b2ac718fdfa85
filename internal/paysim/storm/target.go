package storm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// ErrNotLoopback is returned for a target outside the loopback interface. The simulator generates
// load and forged-looking traffic; it must never be pointed at someone else's server.
var ErrNotLoopback = errors.New("paysim only sends to loopback targets (127.0.0.0/8, ::1 or localhost)")

// CheckTarget validates a target URL: http or https, and a host that is the literal name
// "localhost" or a loopback IP address. Host names are not resolved, so DNS cannot redirect a
// storm elsewhere.
func CheckTarget(target string) (*url.URL, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, fmt.Errorf("storm: target %q: %w", target, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("storm: target %q: scheme must be http or https", target)
	}
	if !isLoopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("storm: target %q: %w", target, ErrNotLoopback)
	}
	return u, nil
}

func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewClient returns the HTTP client of a storm: no proxy from the environment, no redirects
// followed, connections dialled only to loopback addresses (a second guard behind CheckTarget),
// enough idle connections for the concurrency, and timeout per request (a provider's answer
// deadline: WeChat Pay waits 5 s).
func NewClient(concurrency int, timeout time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy: nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				if !isLoopbackHost(host) {
					return nil, fmt.Errorf("dial %s: %w", addr, ErrNotLoopback)
				}
				return dialer.DialContext(ctx, network, addr)
			},
			MaxIdleConns:        max(concurrency, 2),
			MaxIdleConnsPerHost: max(concurrency, 2),
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
