package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvserve/kvserve/internal/kv"
)

// metrics are the engine's Prometheus metrics, named after vLLM's under the
// kvserve_ prefix.
type metrics struct {
	ttft, itl, queueTime, e2e      prometheus.Histogram
	stepTime                       prometheus.Histogram
	batchSeqs, batchTokens         prometheus.Histogram
	prefix                         *prefixCounters
	sessionsIdled                  prometheus.Counter
	sessionsPrefetched             prometheus.Counter
	sessionBlocksPrefetched        prometheus.Counter
	diskWait                       prometheus.Histogram
	preemptions                    prometheus.Counter
	promptTokens, generatedTokens  prometheus.Counter
	finished                       *prometheus.CounterVec
	running, waitingGauge, kvUsage prometheus.Gauge
	blocks                         *prometheus.GaugeVec
	blocksByRetention              *prometheus.GaugeVec
	runningCount                   atomic.Int64
}

func newMetrics(reg prometheus.Registerer, pool *kv.Pool) (*metrics, error) {
	latency := []float64{.001, .005, .01, .02, .04, .06, .08, .1, .25, .5, .75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}
	m := &metrics{
		diskWait: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_kv_disk_wait_seconds",
			Help:    "How long requests whose prompt continued on disk (G3) waited, queued, for those blocks to be read back.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 12)}),
		sessionsIdled: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_sessions_idled_total",
			Help: "Agent sessions whose blocks were demoted after the idle timeout."}),
		sessionsPrefetched: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_sessions_prefetched_total",
			Help: "Agent sessions whose blocks on disk were read back into memory ahead of their expected next turn."}),
		sessionBlocksPrefetched: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_session_prefetched_blocks_total",
			Help: "Blocks read back from disk ahead of agent sessions' expected next turns."}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_time_to_first_token_seconds",
			Help: "Time from arrival to the first generated token.", Buckets: latency}),
		itl: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_inter_token_latency_seconds",
			Help: "Time between consecutive generated tokens of a request.", Buckets: latency}),
		queueTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_request_queue_time_seconds",
			Help: "Time from arrival to first admission.", Buckets: latency}),
		e2e: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_e2e_request_latency_seconds",
			Help: "Time from arrival to the end of the last sample.", Buckets: latency}),
		stepTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_step_seconds",
			Help: "Duration of one forward pass.", Buckets: latency}),
		batchSeqs: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_batch_sequences",
			Help: "Sequences per forward pass.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		batchTokens: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kvserve_batch_tokens",
			Help: "Tokens per forward pass.", Buckets: prometheus.ExponentialBuckets(1, 2, 13)}),
		prefix: &prefixCounters{
			queriesDesc: prometheus.NewDesc("kvserve_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", nil, nil),
			hitsDesc:    prometheus.NewDesc("kvserve_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", nil, nil),
		},
		preemptions: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_num_preemptions_total",
			Help: "Sequences preempted (blocks released, recomputed later)."}),
		promptTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_prompt_tokens_total",
			Help: "Prompt tokens computed (prefix-cache hits excluded)."}),
		generatedTokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvserve_generation_tokens_total",
			Help: "Tokens generated."}),
		finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvserve_request_success_total",
			Help: "Finished samples by finish reason."}, []string{"finished_reason"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvserve_num_requests_running",
			Help: "Sequences in the running set."}),
		waitingGauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvserve_num_requests_waiting",
			Help: "Sequences waiting for admission."}),
		kvUsage: prometheus.NewGauge(prometheus.GaugeOpts{Name: "kvserve_kv_cache_usage_perc",
			Help: "Fraction of KV blocks referenced by running sequences (0-1)."}),
		blocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvserve_kv_blocks",
			Help: "KV blocks by state: free, active (referenced), cached (unreferenced, findable)."}, []string{"state"}),
		blocksByRetention: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "kvserve_kv_prefix_blocks",
			Help: "Findable KV blocks (active or cached) by retention class: the highest class any request gave them."}, []string{"retention"}),
	}
	if reg == nil {
		return m, nil
	}
	// The tiers' traffic, read from the pool when scraped.
	stat := func(f func(kv.Stats) float64) func() float64 { return func() float64 { return f(pool.Stats()) } }
	tiers := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_kv_pinned_blocks",
			Help: "Cached KV blocks held by pins until they expire (not evictable)."}, stat(func(s kv.Stats) float64 { return float64(s.Pinned) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_evicted_blocks_total",
			Help: "KV blocks evicted from the pool (G1), moved to host memory (G2) when it has room."}, stat(func(s kv.Stats) float64 { return float64(s.Evictions) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_peer_exported_blocks_total",
			Help: "KV blocks copied out to other workers of a cluster (their requests' prefixes, from this worker's memory)."}, stat(func(s kv.Stats) float64 { return float64(s.ExportedBlocks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_peer_imported_blocks_total",
			Help: "KV blocks copied in from other workers of a cluster instead of being computed."}, stat(func(s kv.Stats) float64 { return float64(s.ImportedBlocks) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_kv_host_blocks",
			Help: "KV blocks in the host-memory tier (G2)."}, stat(func(s kv.Stats) float64 { return float64(s.Host.Blocks) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_offloaded_blocks_total",
			Help: "KV blocks moved from the pool (G1) down to host memory (G2)."}, stat(func(s kv.Stats) float64 { return float64(s.Host.Stored) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_onboarded_blocks_total",
			Help: "KV blocks brought back from host memory (G2) into the pool on a prefix hit instead of being recomputed."}, stat(func(s kv.Stats) float64 { return float64(s.Host.Onboarded) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_host_evicted_blocks_total",
			Help: "KV blocks dropped from host memory (G2) to make room."}, stat(func(s kv.Stats) float64 { return float64(s.Host.Evicted) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_kv_disk_blocks",
			Help: "KV blocks in the disk tier (G3)."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Blocks) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_kv_disk_bytes",
			Help: "Bytes of KV block files in the disk tier (G3)."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Bytes) })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kvserve_kv_disk_queue_depth",
			Help: "KV blocks waiting to be written to the disk tier (G3), or being written."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.QueueDepth) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_written_blocks_total",
			Help: "KV blocks written to the disk tier (G3)."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Written) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_write_errors_total",
			Help: "KV blocks the disk tier (G3) failed to write (full or failing disk); each was dropped."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.WriteErrors) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_dropped_blocks_total",
			Help: "KV blocks not written to the disk tier (G3): its queue or budget full of more valuable blocks."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Dropped) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_evicted_blocks_total",
			Help: "KV block files deleted from the disk tier (G3) to make room."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Evicted) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_loaded_blocks_total",
			Help: "KV blocks read back from the disk tier (G3) ahead of the requests that need them."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Loaded) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_load_seconds_total",
			Help: "Time spent reading and decrypting KV blocks from the disk tier (G3)."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.LoadNanos) / 1e9 })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_onboarded_blocks_total",
			Help: "KV blocks brought from the disk tier (G3) into the pool on a prefix hit instead of being recomputed."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Hits) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kvserve_kv_disk_corrupt_blocks_total",
			Help: "KV block files that failed authentication or were cut short: each a miss, deleted, never served."}, stat(func(s kv.Stats) float64 { return float64(s.Disk.Corrupt) })),
	}
	for _, c := range tiers {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{m.ttft, m.itl, m.queueTime, m.e2e, m.stepTime, m.batchSeqs, m.batchTokens,
		m.prefix, m.preemptions, m.promptTokens, m.generatedTokens, m.finished,
		m.running, m.waitingGauge, m.kvUsage, m.blocks, m.blocksByRetention, m.sessionsIdled, m.sessionsPrefetched, m.sessionBlocksPrefetched, m.diskWait, tierCollector{pool}} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("engine: register metrics: %w", err)
		}
	}
	return m, nil
}

// tierCollector reports, at each scrape, the findable blocks of every tier
// by retention class, and the value evictor's learned odds of reuse.
type tierCollector struct{ pool *kv.Pool }

var tierBlocksDesc = prometheus.NewDesc("kvserve_kv_tier_blocks",
	"Findable KV blocks by tier (pool: G1, host: G2, disk: G3) and retention class.", []string{"tier", "retention"}, nil)

var reuseOddsDesc = prometheus.NewDesc("kvserve_kv_reuse_odds",
	"The value evictor's learned chance that a KV block is used again, by the prompts that held it before (uses) and the prompt tokens after it (place).",
	[]string{"uses", "place"}, nil)

func (c tierCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- tierBlocksDesc
	ch <- reuseOddsDesc
}

func (c tierCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.pool.Stats()
	for _, t := range []struct {
		tier    kv.Tier
		byClass [kv.NumClasses]int
	}{{kv.TierPool, st.ByClass}, {kv.TierHost, st.Host.ByClass}, {kv.TierDisk, st.Disk.ByClass}} {
		for r := RetentionDefault; r <= RetentionPinned; r++ {
			ch <- prometheus.MustNewConstMetric(tierBlocksDesc, prometheus.GaugeValue, float64(t.byClass[r]), t.tier.String(), r.String())
		}
	}
	for _, o := range c.pool.ReuseOdds() {
		ch <- prometheus.MustNewConstMetric(reuseOddsDesc, prometheus.GaugeValue, o.Odds, o.Uses, o.Place)
	}
}

func (m *metrics) observeStep(seqs, tokens int, d time.Duration) {
	m.stepTime.Observe(d.Seconds())
	m.batchSeqs.Observe(float64(seqs))
	m.batchTokens.Observe(float64(tokens))
}

func (m *metrics) observeFinish(st *Stream, reason FinishReason) {
	m.finished.WithLabelValues(reason.String()).Inc()
	if st.finishedAll() {
		m.e2e.Observe(st.clock.Now().Sub(st.arrival).Seconds())
	}
}

// updateGauges refreshes the state gauges after a step.
func (e *Engine) updateGauges() {
	st := e.kv.Stats()
	e.m.running.Set(float64(len(e.running)))
	e.m.runningCount.Store(int64(len(e.running)))
	e.m.waitingGauge.Set(float64(len(e.queue)))
	e.m.kvUsage.Set(float64(st.Active) / float64(st.Total))
	e.m.blocks.WithLabelValues("free").Set(float64(st.Free))
	e.m.blocks.WithLabelValues("active").Set(float64(st.Active))
	e.m.blocks.WithLabelValues("cached").Set(float64(st.Cached))
	for c := RetentionEphemeral; c <= RetentionPinned; c++ {
		e.m.blocksByRetention.WithLabelValues(c.String()).Set(float64(st.ByClass[c]))
	}

	var used, allocated int64
	for _, s := range e.running {
		used += int64(s.kv.Len())
		allocated += int64(max(s.kv.NumBlocks()*e.cfg.BlockSize, s.reserved))
	}
	e.occupancy.used.Add(used)
	e.occupancy.allocated.Add(allocated)
	if n := int64(len(e.running)); n > e.occupancy.peakRunning.Load() {
		e.occupancy.peakRunning.Store(n)
	}
}

// prefixCounters are the prefix cache's lookups and hits in prompt tokens,
// added and collected together: as two counters a scrape could read a hit
// before its lookup, and a dashboard's ratio of their increases over a
// short window would pass 1.
type prefixCounters struct {
	mu                    sync.Mutex
	queries, hits         float64
	queriesDesc, hitsDesc *prometheus.Desc
}

func (c *prefixCounters) add(queries, hits int) {
	c.mu.Lock()
	c.queries += float64(queries)
	c.hits += float64(hits)
	c.mu.Unlock()
}

func (c *prefixCounters) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.queriesDesc
	ch <- c.hitsDesc
}

func (c *prefixCounters) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	queries, hits := c.queries, c.hits
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.queriesDesc, prometheus.CounterValue, queries)
	ch <- prometheus.MustNewConstMetric(c.hitsDesc, prometheus.CounterValue, hits)
}
