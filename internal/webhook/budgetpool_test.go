package webhook

import (
	"context"
	"testing"
	"time"
)

func growWithin(p *budgetPool, t *budgetTicket, n int64, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	return p.grow(ctx, t, n)
}

// TestBudgetPoolNeverDeadlocks: two requests each expected to need most of the pool cannot
// both hold half of it with their bodies; the second waits for its first piece until the
// first has been charged in full and released.
func TestBudgetPoolNeverDeadlocks(t *testing.T) {
	p := newBudgetPool(100)
	a, b := p.open(80), p.open(80)
	if err := growWithin(p, a, 30, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := growWithin(p, b, 30, 50*time.Millisecond); err == nil {
		t.Fatalf("b was charged 30 while a holds 30 of 80: neither could then be charged in full (free %d)", p.free)
	}
	if err := growWithin(p, b, 10, 50*time.Millisecond); err != nil {
		t.Fatalf("b could not be charged 10 while a holds 30 of 80, though a could still be charged in full: %v", err)
	}
	got := make(chan error, 1)
	go func() { got <- growWithin(p, b, 20, 5*time.Second) }()
	if err := growWithin(p, a, 50, time.Second); err != nil {
		t.Fatalf("a could not take the rest of its charge: %v", err)
	}
	p.release(a)
	if err := <-got; err != nil {
		t.Fatalf("b was not charged once a was done: %v", err)
	}
	if err := growWithin(p, b, 50, time.Second); err != nil {
		t.Fatal(err)
	}
	p.release(b)
	if p.inUse() != 0 {
		t.Fatalf("in use after both released: %d", p.inUse())
	}
}

// TestBudgetPoolDeclaredSizeHoldsNothing: requests that declared the whole pool and sent
// nothing block no one; each piece sent is all they hold.
func TestBudgetPoolDeclaredSizeHoldsNothing(t *testing.T) {
	p := newBudgetPool(100)
	var idle []*budgetTicket
	for range 10 {
		idle = append(idle, p.open(1000)) // clamped to the pool
	}
	trickler := p.open(100)
	if err := growWithin(p, trickler, 5, time.Second); err != nil {
		t.Fatal(err)
	}
	small := p.open(40)
	if err := growWithin(p, small, 40, 50*time.Millisecond); err != nil {
		t.Fatalf("a request of 40 could not be charged while ten declared the pool and one sent 5: %v", err)
	}
	p.release(small)
	for _, i := range idle {
		p.release(i)
	}
	p.release(trickler)
}

// TestBudgetPoolServesNewcomersInOrder: a newcomer does not pass an older request waiting for
// its first piece (a large review is not starved by smaller ones), but a request already
// holding a charge does.
func TestBudgetPoolServesNewcomersInOrder(t *testing.T) {
	p := newBudgetPool(100)
	running := p.open(60)
	if err := growWithin(p, running, 60, time.Second); err != nil {
		t.Fatal(err)
	}
	holder := p.open(20)
	if err := growWithin(p, holder, 10, time.Second); err != nil {
		t.Fatal(err)
	}
	large := p.open(90)
	largeDone := make(chan error, 1)
	go func() { largeDone <- growWithin(p, large, 90, 5*time.Second) }()
	for p.waiting() == 0 {
		time.Sleep(time.Millisecond)
	}
	if err := growWithin(p, p.open(5), 5, 50*time.Millisecond); err == nil {
		t.Error("a newcomer passed the large request waiting before it")
	}
	if err := growWithin(p, holder, 10, 50*time.Millisecond); err != nil {
		t.Errorf("a request holding a charge could not take the rest of it behind a waiting newcomer: %v", err)
	}
	p.release(holder)
	p.release(running)
	if err := <-largeDone; err != nil {
		t.Errorf("the large request was not served once the pool emptied: %v", err)
	}
	p.release(large)
}

func (p *budgetPool) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.waiters)
}
