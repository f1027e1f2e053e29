// Package telemetry holds the node's Prometheus collectors: what the HTTP
// layer answers, what the grains accept and the executor runs, and how the
// store's group commits behave. Each node has its own registry (served at
// /metrics), so tests and benchmarks that run several nodes in one process
// do not share counters.
package telemetry

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics is one node's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	requests       *prometheus.CounterVec   // route, method, status
	requestSeconds *prometheus.HistogramVec // route, method
	opsAccepted    *prometheus.CounterVec   // kind
	opsExecuted    *prometheus.CounterVec   // kind, status
	opSeconds      *prometheus.HistogramVec // kind
	commits        prometheus.Counter
	commitWrites   prometheus.Counter
	commitPages    prometheus.Counter
	commitSeconds  prometheus.Histogram
	fenced         *prometheus.CounterVec // executor
	passes         prometheus.Counter
	passRuns       prometheus.Counter
}

// New registers the node's collectors, with the Go runtime's and the
// process's.
func New() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wts_http_requests_total", Help: "HTTP requests answered, by route template, method and status.",
		}, []string{"route", "method", "status"}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wts_http_request_duration_seconds", Help: "Time from reading a request to writing its answer.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12), // 100 µs to ~2.4 s
		}, []string{"route", "method"}),
		opsAccepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wts_operations_accepted_total", Help: "Operations durably accepted (new ones, not idempotent retries), by kind.",
		}, []string{"kind"}),
		opsExecuted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wts_operations_executed_total", Help: "Operations the executor ran to an end, by kind and final status.",
		}, []string{"kind", "status"}),
		opSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "wts_operation_execution_seconds", Help: "Executor time of an operation, by kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12), // 1 ms to ~3 min
		}, []string{"kind"}),
		commits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wts_store_commits_total", Help: "Group commits: store writes logged and fsynced together.",
		}),
		commitWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wts_store_commit_writes_total", Help: "Writes carried by those commits; divided by wts_store_commits_total it is the mean group size.",
		}),
		commitPages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wts_store_commit_pages_total", Help: "Pages those commits wrote (log records, and the store file's pages at checkpoints); per write it is the store's write amplification.",
		}),
		commitSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "wts_store_commit_duration_seconds", Help: "Time of one group commit, syncs included.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14), // 100 µs to ~0.8 s
		}),
		fenced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wts_executor_fenced_total", Help: "Commands an executor refused because they came from a grain activation older than one it has seen (a stale activation after a restart or a move).",
		}, []string{"executor"}),
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wts_trainer_passes_total", Help: "Passes of forward and forward_backward micro-batches through a base model on the trainer's executor.",
		}),
		passRuns: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "wts_trainer_pass_runs_total", Help: "Runs' micro-batches those passes carried; divided by wts_trainer_passes_total it is the mean number of runs that shared a pass.",
		}),
	}
	m.Registry.MustRegister(m.requests, m.requestSeconds, m.opsAccepted, m.opsExecuted, m.opSeconds,
		m.commits, m.commitWrites, m.commitPages, m.commitSeconds, m.fenced, m.passes, m.passRuns,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Request records one answered HTTP request.
func (m *Metrics) Request(route, method string, status int, took time.Duration) {
	m.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.requestSeconds.WithLabelValues(route, method).Observe(took.Seconds())
}

// Accepted records a newly accepted operation.
func (m *Metrics) Accepted(kind string) { m.opsAccepted.WithLabelValues(kind).Inc() }

// Executed records an operation the executor ran, with its final status.
func (m *Metrics) Executed(kind, status string, took time.Duration) {
	m.opsExecuted.WithLabelValues(kind, status).Inc()
	m.opSeconds.WithLabelValues(kind).Observe(took.Seconds())
}

// Fenced records a command an executor refused as stale.
func (m *Metrics) Fenced(executor string) { m.fenced.WithLabelValues(executor).Inc() }

// Pass records one pass through a base model that carried runs' micro-batches.
func (m *Metrics) Pass(runs int) {
	m.passes.Inc()
	m.passRuns.Add(float64(runs))
}

// Commit records one group commit of the store.
func (m *Metrics) Commit(writes, pages int, took time.Duration) {
	m.commits.Inc()
	m.commitWrites.Add(float64(writes))
	m.commitPages.Add(float64(pages))
	m.commitSeconds.Observe(took.Seconds())
}

// Gauge registers a gauge whose value read reads at each scrape.
func (m *Metrics) Gauge(name, help string, read func() float64) {
	m.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, read))
}
