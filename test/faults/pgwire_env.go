package faults

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/seed-1cff2221/callback-platform/callbackd/config"
)

// NewPGProxyFor starts a wire-aware proxy in front of the Env's PostgreSQL, closed when the
// test ends.
func (e *Env) NewPGProxyFor() *PGProxy {
	t := e.T
	t.Helper()
	p, err := NewPGProxy(e.PG.Addr())
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() {
		p.SetRule(nil)
		_ = p.Close()
	})
	return p
}

// StartCallbackdPG is StartCallbackd with the process's PostgreSQL link chained through the
// wire-aware proxy pg: callbackd → Links.PG (TCP link proxy) → pg → PostgreSQL. Everything else
// (Redis and Sentinel links, configuration, readiness, clean-up) is as StartCallbackd does it.
func (e *Env) StartCallbackdPG(name string, pg *PGProxy, opts CallbackdOptions) *Callbackd {
	t := e.T
	t.Helper()
	links := &Links{}
	newProxy := func(what, upstream string) *Proxy {
		p, err := NewProxy(name+"→"+what, upstream)
		if err != nil {
			t.Fatalf("%v", err)
		}
		t.Cleanup(func() { _ = p.Close() })
		return p
	}
	links.PG = newProxy("pgwire", pg.Addr())
	var r *config.Redis
	var extra []string
	if e.Redis != nil && !opts.NoRedis {
		var mapping []string
		for i, n := range e.Redis.Nodes() {
			p := newProxy(fmt.Sprintf("redis-%d", i), n.Addr)
			links.Redis = append(links.Redis, p)
			mapping = append(mapping, e.announced(i)+"="+p.Addr())
		}
		var sentinels []string
		for i, s := range e.Redis.Sentinels() {
			p := newProxy(fmt.Sprintf("sentinel-%d", i), s.Addr)
			links.Sentinels = append(links.Sentinels, p)
			sentinels = append(sentinels, p.Addr())
		}
		timeout := opts.RedisTimeout
		if timeout <= 0 {
			timeout = defaultRedisTimeout
		}
		r = &config.Redis{SentinelAddrs: sentinels, MasterName: e.Redis.MasterName}
		r.Timeout.Duration = timeout
		extra = append(extra, EnvRedisAddrMap+"="+strings.Join(mapping, ","))
	}
	extra = append(extra, opts.Env...)

	c := &Callbackd{Name: name, Links: links, env: e, extra: extra}
	var lastErr error
	for attempt := range 3 { // a free port can be taken before callbackd binds it
		port := freePort(t)
		listen := fmt.Sprintf("127.0.0.1:%d", port)
		c.Base = "http://" + listen
		c.cfgPath = e.writeConfig(t, fmt.Sprintf("%s-%d", name, attempt), listen, proxiedDSN(t, e.DSN, links.PG.Addr()), r)
		c.logPath = filepath.Join(e.dir, fmt.Sprintf("%s-%d.log", name, attempt))
		if lastErr = c.start(); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("start callbackd %s: %v", name, lastErr)
	}
	t.Cleanup(func() {
		c.Stop(t)
		if t.Failed() {
			t.Logf("callbackd %s log (tail):\n%s", name, e.Redact(tailString(c.Log(), 30)))
		}
	})
	e.mu.Lock()
	e.instances = append(e.instances, c)
	e.mu.Unlock()
	return c
}
