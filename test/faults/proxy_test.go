package faults

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(c net.Conn, r *bufio.Reader, msg string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

func TestProxyModes(t *testing.T) {
	p, err := NewProxy("test", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(c, r, "one", 2*time.Second); err != nil || got != "one\n" {
		t.Fatalf("pass: expected the echo \"one\", got %q, %v", got, err)
	}

	p.SetLatency(100 * time.Millisecond)
	start := time.Now()
	if _, err := roundTrip(c, r, "slow", 2*time.Second); err != nil {
		t.Fatalf("latency: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond { // delayed both ways
		t.Fatalf("latency: expected a round trip of at least 200ms, got %v", d)
	}
	p.SetLatency(0)

	p.SetMode(Partition)
	if _, err := roundTrip(c, r, "lost", 300*time.Millisecond); err == nil {
		t.Fatal("partition: expected the round trip to time out, it answered")
	}
	p.SetMode(Pass) // the held bytes arrive after the heal
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "lost\n" {
		t.Fatalf("heal: expected the held \"lost\" to arrive, got %q, %v", got, err)
	}

	p.SetMode(Refuse)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("refuse: expected the open connection to be reset")
	}
	c2, err := net.Dial("tcp", p.Addr())
	if err == nil {
		_ = c2.SetDeadline(time.Now().Add(2 * time.Second))
		_, err = bufio.NewReader(c2).ReadString('\n')
		c2.Close()
	}
	if err == nil {
		t.Fatalf("refuse: expected a new connection to be reset, got %v", err)
	}
	s := p.Stats()
	if s.Delayed == 0 || s.Held == 0 || s.Reset == 0 || s.Refused == 0 {
		t.Fatalf("stats: expected delayed, held, reset and refused counts above 0, got %+v", s)
	}
}

// A test that fails in the middle of a partition must still be able to close its proxies.
func TestProxyCloseWhilePartitioned(t *testing.T) {
	p, err := NewProxy("test", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("dial the proxy: %v", err)
	}
	defer c.Close()
	p.SetMode(Partition)
	if _, err := c.Write([]byte("held\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	waitFor(t, 2*time.Second, "the chunk held", func() bool { return p.Stats().Held > 0 })
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Close of a partitioned proxy: %v", err)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Close of a partitioned proxy: expected it to return, still waiting after 3s")
	}
}
