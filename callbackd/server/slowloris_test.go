package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Regression (issue 9, hostile input suite): the in-flight slot was taken before the body was
// read, so MaxInFlight connections trickling their bodies held every slot until the read
// timeout and every genuine callback meanwhile got "overloaded" (measured against the real
// binary: 36 such connections at maxInFlight=32 shed every callback for the whole 3 s read
// timeout). Stalled bodies must not hold slots: with more stalled requests than slots, a
// complete callback is still processed.
func TestStalledBodiesDoNotHoldInFlightSlots(t *testing.T) {
	p := &blockingPipeline{}
	s, m := newTestServer(t, p, func(o *Options) { o.MaxInFlight = 2 })
	srv := httptest.NewUnstartedServer(s.Handler())
	srv.Start()
	defer srv.Close()

	addr := strings.TrimPrefix(srv.URL, "http://")
	for i := 0; i < 4; i++ { // twice the slots: headers sent, body promised, never sent
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := fmt.Fprintf(c, "POST /notify/wx HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // let the server start reading them

	client := &http.Client{Timeout: 5 * time.Second}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+"/notify/wx", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("complete callback beside 4 stalled ones: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != "SUCCESS" {
		t.Fatalf("complete callback beside 4 stalled ones: expected 200 SUCCESS, got %d %q", resp.StatusCode, body)
	}
	if got := p.bodies.Load(); got != 1 {
		t.Fatalf("pipeline calls: expected 1 (the complete callback), got %d", got)
	}
	if got := testutil.ToFloat64(m.OverloadRejections.WithLabelValues("wx")); got != 0 {
		t.Fatalf("overload rejections: expected 0, got %v", got)
	}
}
