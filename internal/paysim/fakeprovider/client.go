package fakeprovider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// PutTrades records trades at a running fake provider (`paysim serve-query`) through its side
// door, PUT <baseURL>/paysim/trades. baseURL must be on loopback.
func PutTrades(ctx context.Context, baseURL string, trades []Trade) error {
	u, err := url.Parse(baseURL)
	if err != nil {
		return fmt.Errorf("fakeprovider: put trades: %w", err)
	}
	if ip := net.ParseIP(u.Hostname()); u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("fakeprovider: put trades: %s is not a loopback address", u.Hostname())
	}
	body, err := json.Marshal(trades)
	if err != nil {
		return fmt.Errorf("fakeprovider: put trades: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, strings.TrimRight(baseURL, "/")+"/paysim/trades", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("fakeprovider: put trades: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil}}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("fakeprovider: put trades: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("fakeprovider: put trades: %d %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	return nil
}
