package engine

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestPrefixCountersConsistent: a scrape never sees more prefix-cache hits
// than lookups, however it interleaves with the step loop's additions
// (every lookup here is a full hit, so a torn read would show more).
func TestPrefixCountersConsistent(t *testing.T) {
	c := &prefixCounters{
		queriesDesc: prometheus.NewDesc("q_total", "lookups", nil, nil),
		hitsDesc:    prometheus.NewDesc("h_total", "hits", nil, nil),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 20000 {
			c.add(100, 100)
		}
	}()
	for scraping := true; scraping; {
		select {
		case <-done:
			scraping = false
		default:
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var q, h float64
		for _, f := range families {
			v := f.GetMetric()[0].GetCounter().GetValue()
			if f.GetName() == "q_total" {
				q = v
			} else {
				h = v
			}
		}
		if h > q {
			t.Fatalf("a scrape saw %v hits for %v lookups", h, q)
		}
	}
}
