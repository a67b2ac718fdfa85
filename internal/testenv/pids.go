package testenv

// PID returns the process id of the running postmaster, or 0 while the server is stopped. Tools
// that start servers outside tests (the demo) report it so that their own checks can prove
// nothing is left behind.
func (p *Postgres) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return 0
	}
	return p.proc.pid()
}

// PIDs returns the process ids of the group's running redis-server processes, data nodes and
// Sentinels alike.
func (g *RedisGroup) PIDs() []int {
	var pids []int
	for _, n := range g.allNodes() {
		n.mu.Lock()
		if n.proc != nil {
			pids = append(pids, n.proc.pid())
		}
		n.mu.Unlock()
	}
	return pids
}
