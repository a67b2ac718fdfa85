package faults

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// LinkMode is what a Proxy does with the traffic of its link.
type LinkMode int32

// The link modes.
const (
	// Pass forwards bytes both ways (after the configured latency).
	Pass LinkMode = iota
	// Partition accepts connections and keeps existing ones open but forwards nothing, in
	// either direction: the peers see a network that went silent (their own timeouts fire).
	Partition
	// Refuse resets every new connection at once and every existing one (a peer that is down,
	// or a firewall answering with RST).
	Refuse
)

// String names the mode.
func (m LinkMode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Partition:
		return "partition"
	case Refuse:
		return "refuse"
	default:
		return fmt.Sprintf("mode(%d)", int32(m))
	}
}

// ProxyStats are a proxy's counters since it started: the evidence that a fault took place.
type ProxyStats struct {
	// Accepted connections, and Refused ones (reset at once in Refuse mode).
	Accepted, Refused int64
	// Reset connections: those cut with RST by Reset or by switching to Refuse.
	Reset int64
	// Delayed chunks forwarded after the configured latency.
	Delayed int64
	// Held chunks: read while the link was partitioned, forwarded only after it healed (or
	// never, when a peer gave up first).
	Held int64
	// BytesUp (client to server) and BytesDown forwarded.
	BytesUp, BytesDown int64
	// DialErrors: connections whose upstream could not be dialed.
	DialErrors int64
}

// Proxy is an in-process TCP proxy on 127.0.0.1 in front of one upstream address: one network
// link (e.g. "callbackd a → redis-0") whose latency, resets and partitions a test controls.
// It is safe for concurrent use.
type Proxy struct {
	// Name describes the link in logs and evidence.
	Name string

	upstream string
	ln       net.Listener
	mode     atomic.Int32
	latency  atomic.Int64 // nanoseconds added before each forwarded chunk
	closing  atomic.Bool  // set by Close: held chunks are dropped

	mu     sync.Mutex
	conns  map[*proxyConn]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted, refused, reset, delayed, held, up, down, dialErrs atomic.Int64
}

type proxyConn struct {
	client, server net.Conn
}

// NewProxy listens on a free loopback port and forwards to upstream. Close stops it.
func NewProxy(name, upstream string) (*Proxy, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy %s: listen: %w", name, err)
	}
	p := &Proxy{Name: name, upstream: upstream, ln: ln, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's own host:port: give it to the client instead of the upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Mode is the current link mode.
func (p *Proxy) Mode() LinkMode { return LinkMode(p.mode.Load()) }

// SetMode switches the link. Switching to Refuse resets every open connection.
func (p *Proxy) SetMode(m LinkMode) {
	p.mode.Store(int32(m))
	if m == Refuse {
		p.Reset()
	}
}

// SetLatency delays every forwarded chunk by d (0 turns it off).
func (p *Proxy) SetLatency(d time.Duration) { p.latency.Store(int64(d)) }

// Reset cuts every open connection with a TCP RST (SO_LINGER 0) on both sides and returns
// how many it cut. New connections are accepted as before.
func (p *Proxy) Reset() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		abort(c.client)
		abort(c.server)
	}
	p.reset.Add(int64(len(conns)))
	return len(conns)
}

// Open is the number of connections currently proxied.
func (p *Proxy) Open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Stats returns the counters.
func (p *Proxy) Stats() ProxyStats {
	return ProxyStats{
		Accepted: p.accepted.Load(), Refused: p.refused.Load(), Reset: p.reset.Load(),
		Delayed: p.delayed.Load(), Held: p.held.Load(),
		BytesUp: p.up.Load(), BytesDown: p.down.Load(), DialErrors: p.dialErrs.Load(),
	}
}

// String describes the link and its counters.
func (p *Proxy) String() string {
	s := p.Stats()
	return fmt.Sprintf("%s (%s → %s, %s): accepted=%d refused=%d reset=%d delayed=%d held=%d up=%dB down=%dB",
		p.Name, p.Addr(), p.upstream, p.Mode(), s.Accepted, s.Refused, s.Reset, s.Delayed, s.Held, s.BytesUp, s.BytesDown)
}

// Close stops listening, cuts every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.closing.Store(true)
	err := p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.client.Close()
		_ = c.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if p.Mode() == Refuse {
			p.refused.Add(1)
			abort(c)
			continue
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *Proxy) serve(client net.Conn) {
	defer p.wg.Done()
	d := net.Dialer{Timeout: 5 * time.Second}
	server, err := d.DialContext(context.Background(), "tcp", p.upstream)
	if err != nil {
		p.dialErrs.Add(1)
		abort(client)
		return
	}
	pc := &proxyConn{client: client, server: server}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	}
	p.conns[pc] = struct{}{}
	p.mu.Unlock()

	done := make(chan struct{}, 2)
	go func() { p.pipe(server, client, &p.up); done <- struct{}{} }()
	go func() { p.pipe(client, server, &p.down); done <- struct{}{} }()
	<-done
	// One direction ended: end the other one too (a half-closed proxied connection would hang).
	_ = client.Close()
	_ = server.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, pc)
	p.mu.Unlock()
}

// pipe copies src to dst chunk by chunk, applying the link's latency and partition.
func (p *Proxy) pipe(dst, src net.Conn, bytes *atomic.Int64) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.latency.Load()); d > 0 {
				time.Sleep(d)
				p.delayed.Add(1)
			}
			// A partitioned link holds what it read (the bytes are "in the network", and TCP
			// back-pressure stops the sender) and keeps the connection open; they arrive late
			// if the link heals while both peers still wait, as retransmitted segments would.
			if p.Mode() == Partition {
				p.held.Add(1)
				for p.Mode() == Partition && !p.closing.Load() {
					time.Sleep(5 * time.Millisecond)
				}
				if p.closing.Load() {
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			bytes.Add(int64(n))
		}
		if err != nil {
			return // io.EOF or a reset: serve closes both sides
		}
	}
}

// abort closes c with an RST instead of a FIN.
func abort(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
