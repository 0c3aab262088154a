package webhook

import (
	"cmp"
	"context"
	"slices"
	"sync"
)

// budgetPool is one share of the in-flight budget, charged as a request's body arrives rather
// than as its Content-Length declares: a client that declares 64 MiB and sends nothing holds
// nothing. Charging in pieces could deadlock — two large reviews each holding half the pool
// with their bodies, each waiting for the rest of its charge — so the pool grants a piece only
// when every request holding a charge could still be charged in full one after another (the
// banker's algorithm on one resource): some holder can always finish, and a request that
// holds nothing never makes the pool unsafe, so a declared size alone blocks no one.
//
// Waiters are served in order of arrival, except that a request already holding a charge may
// pass one that holds none: new requests cannot starve an older large one, and the holder
// whose turn would make the pool safe again is never stuck behind a newcomer.
type budgetPool struct {
	mu      sync.Mutex
	size    int64
	free    int64
	holders map[*budgetTicket]struct{}
	waiters []*budgetWaiter
}

// budgetTicket is one request's charge: held so far, need in all (its projection from the
// declared size, raised if the body turns out larger).
type budgetTicket struct {
	held, need int64
}

type budgetWaiter struct {
	t     *budgetTicket
	n     int64
	ready chan struct{}
}

func newBudgetPool(size int64) *budgetPool {
	return &budgetPool{size: size, free: size, holders: map[*budgetTicket]struct{}{}}
}

// open starts a request expected to need need bytes in all (at most the pool: a request
// larger than its whole pool runs alone rather than never).
func (p *budgetPool) open(need int64) *budgetTicket {
	return &budgetTicket{need: min(max(need, 1), p.size)}
}

// grow charges t n more bytes, waiting until ctx ends for the pool to grant them safely; n is
// capped so that t never holds more than the pool.
func (p *budgetPool) grow(ctx context.Context, t *budgetTicket, n int64) error {
	n = min(n, p.size-t.held)
	if n <= 0 {
		return nil
	}
	p.mu.Lock()
	if len(p.waiters) == 0 || t.held > 0 {
		if p.grantLocked(t, n) {
			p.mu.Unlock()
			return nil
		}
	}
	w := &budgetWaiter{t: t, n: n, ready: make(chan struct{})}
	p.waiters = append(p.waiters, w)
	p.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		p.mu.Lock()
		defer p.mu.Unlock()
		select {
		case <-w.ready: // granted as the wait ended: keep it, the caller releases it
			return nil
		default:
		}
		p.waiters = slices.DeleteFunc(p.waiters, func(o *budgetWaiter) bool { return o == w })
		p.wakeLocked() // a holder behind it may have waited for its place, not for bytes
		return ctx.Err()
	}
}

// release returns everything t holds.
func (p *budgetPool) release(t *budgetTicket) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.free += t.held
	t.held = 0
	delete(p.holders, t)
	p.wakeLocked()
}

// grantLocked charges t n bytes if the pool stays safe.
func (p *budgetPool) grantLocked(t *budgetTicket, n int64) bool {
	if n > p.free {
		return false
	}
	held, need := t.held+n, max(t.need, t.held+n)
	if !p.safeLocked(t, held, need) {
		return false
	}
	t.held, t.need = held, need
	p.free -= n
	p.holders[t] = struct{}{}
	return true
}

// safeLocked tells whether, with t holding held of need, every holder could be charged in
// full in some order: served by what each still needs, least first, each finishing frees
// what it holds for the next.
func (p *budgetPool) safeLocked(t *budgetTicket, held, need int64) bool {
	type charge struct{ held, rest int64 }
	charges := make([]charge, 0, len(p.holders)+1)
	avail := p.free - (held - t.held)
	for h := range p.holders {
		if h != t {
			charges = append(charges, charge{h.held, h.need - h.held})
		}
	}
	charges = append(charges, charge{held, need - held})
	slices.SortFunc(charges, func(a, b charge) int { return cmp.Compare(a.rest, b.rest) })
	for _, c := range charges {
		if c.rest > avail {
			return false
		}
		avail += c.held
	}
	return true
}

// wakeLocked grants waiters in order; one that cannot be granted keeps the newcomers (holding
// nothing) behind it waiting, not the holders.
func (p *budgetPool) wakeLocked() {
	blocked := false
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if (!blocked || w.t.held > 0) && p.grantLocked(w.t, w.n) {
			close(w.ready)
			continue
		}
		if w.t.held == 0 {
			blocked = true
		}
		kept = append(kept, w)
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
}

// inUse is what the pool has charged.
func (p *budgetPool) inUse() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size - p.free
}
