package sim

import (
	"sync"
	"time"
)

// VirtualClock is time that passes only when told: the simulator's forward
// passes advance it by their modelled cost, and a driver (Run) moves it on
// to the next arrival while the engine is idle. It starts at a fixed epoch,
// so runs are reproducible.
type VirtualClock struct {
	mu  sync.Mutex
	now time.Time
}

// Epoch is where every VirtualClock starts.
var Epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// NewVirtualClock returns a clock at Epoch.
func NewVirtualClock() *VirtualClock { return &VirtualClock{now: Epoch} }

// Now is the clock's time.
func (c *VirtualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock d forward (d < 0 is ignored: time does not go
// back).
func (c *VirtualClock) Advance(d time.Duration) {
	if d <= 0 {
		return
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// AdvanceTo moves the clock to t if t is later.
func (c *VirtualClock) AdvanceTo(t time.Time) {
	c.mu.Lock()
	if t.After(c.now) {
		c.now = t
	}
	c.mu.Unlock()
}

// Since is the time elapsed on the clock since Epoch.
func (c *VirtualClock) Since() time.Duration { return c.Now().Sub(Epoch) }
