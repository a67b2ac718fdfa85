package faults

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
	e.T.Helper()
	return e.startCallbackd(name, "pgwire", pg.Addr(), opts)
}
