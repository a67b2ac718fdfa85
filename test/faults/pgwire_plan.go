package faults

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
)

// CommitPlan assigns a PGAction to the first COMMIT of a transaction that carries an order's
// number among its statement parameters: callbackd's apply transaction for that order (the
// receipt insert, the order lock, the ledger and outbox inserts all name it). Later commits of
// the same order pass untouched, so the provider's retry finds a healthy link.
type CommitPlan struct {
	re *regexp.Regexp

	mu      sync.Mutex
	actions map[string]PGAction
	used    map[string]bool
}

// NewCommitPlan returns an empty plan for the orders of ns (all from one NewPayments call).
func NewCommitPlan(ns []Notification) *CommitPlan {
	alts := make([]string, 0, len(ns))
	seen := map[string]bool{}
	for _, n := range ns {
		if !seen[n.OrderNo] {
			seen[n.OrderNo] = true
			alts = append(alts, regexp.QuoteMeta(n.OrderNo))
		}
	}
	return &CommitPlan{re: regexp.MustCompile(`(?:` + strings.Join(alts, "|") + `)`),
		actions: map[string]PGAction{}, used: map[string]bool{}}
}

// Set plans act for the first commit of orderNo.
func (p *CommitPlan) Set(orderNo string, act PGAction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.actions[orderNo] = act
}

// Used reports whether the planned action of orderNo was carried out.
func (p *CommitPlan) Used(orderNo string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used[orderNo]
}

// Rule is the PGRule carrying out the plan.
func (p *CommitPlan) Rule(q PGQuery) PGAction {
	if !q.IsCommit() || len(q.Tx) == 0 {
		return PGAction{}
	}
	m := p.re.Find(q.Tx)
	if m == nil {
		return PGAction{}
	}
	o := string(m)
	p.mu.Lock()
	defer p.mu.Unlock()
	act, ok := p.actions[o]
	if !ok || p.used[o] {
		return PGAction{}
	}
	p.used[o] = true
	return act
}

// EffectState is what the database holds of one order's payment.
type EffectState struct {
	Receipt, Ledger, Event bool
	Status                 string
}

// Whole reports whether the effect is all there or all absent (never half).
func (s EffectState) Whole() bool {
	all := s.Receipt && s.Ledger && s.Event && s.Status == "PAID"
	none := !s.Receipt && !s.Ledger && !s.Event && s.Status == "PENDING"
	return all || none
}

// Present reports whether the whole effect is committed.
func (s EffectState) Present() bool {
	return s.Receipt && s.Ledger && s.Event && s.Status == "PAID"
}

// Effects reads the payment effect of every order in a snapshot.
func Effects(s Snapshot) map[string]EffectState {
	out := map[string]EffectState{}
	for o, st := range s.Orders {
		out[o] = EffectState{Status: st}
	}
	for _, r := range s.Receipts {
		if r.Kind == KindPayment {
			e := out[r.OrderNo]
			e.Receipt = true
			out[r.OrderNo] = e
		}
	}
	for _, l := range s.Ledger {
		if l.EntryType == "payment" {
			e := out[l.OrderNo]
			e.Ledger = true
			out[l.OrderNo] = e
		}
	}
	for _, ev := range s.Events {
		if ev.EventType == "payment.succeeded" {
			e := out[ev.OrderNo]
			e.Event = true
			out[ev.OrderNo] = e
		}
	}
	return out
}

// RandomCommitFaults resets the connection at a share of the COMMITs of transactions that carry
// one of the orders of ns, at random, every time (not only the first): half of the faults before
// forwarding the COMMIT (rolled back), half after PostgreSQL answered it (committed, unanswered).
// Its counters are the evidence.
type RandomCommitFaults struct {
	plan *CommitPlan // for its order matcher only

	mu       sync.Mutex
	rng      *rand.Rand
	permille int64
	commits  int64
}

// The labels RandomCommitFaults uses.
const (
	LabelRandomResetBefore = "random-reset-before-commit"
	LabelRandomResetAfter  = "random-reset-after-commit"
)

// NewRandomCommitFaults faults rate of the commits of ns's orders; seed makes it reproducible.
func NewRandomCommitFaults(ns []Notification, rate float64, seed uint64) *RandomCommitFaults {
	return &RandomCommitFaults{plan: NewCommitPlan(ns), rng: rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d)),
		permille: int64(rate * 1000)}
}

// Commits is the number of matching COMMITs seen (faulted or not).
func (f *RandomCommitFaults) Commits() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.commits
}

// Rule is the PGRule.
func (f *RandomCommitFaults) Rule(q PGQuery) PGAction {
	if !q.IsCommit() || len(q.Tx) == 0 || f.plan.re.Find(q.Tx) == nil {
		return PGAction{}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commits++
	n := f.rng.Int64N(2000)
	switch {
	case n < f.permille:
		return PGAction{Label: LabelRandomResetBefore, ResetBefore: true}
	case n < 2*f.permille:
		return PGAction{Label: LabelRandomResetAfter, ResetAfter: true}
	}
	return PGAction{}
}
