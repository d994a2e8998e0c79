//! The metrics catalog: every Prometheus metric pirq exports, in one place.
//!
//! Gateways and workers emit metrics by these constants (`metrics::counter!(JOBS_COMPLETED)`),
//! never by string literals, so a renamed metric breaks the build instead of a dashboard. The
//! [`CATALOG`] describes each one (type, unit, labels, help, who emits it and when); from it come
//! the `# HELP` lines on `/metrics` ([`describe`]), the histogram buckets ([`Metric::buckets`]),
//! `docs/metrics.md` ([`markdown_table`], kept in step by a test), and the checks that the
//! Grafana dashboard and the end-to-end suite only name metrics that exist.
//!
//! Names follow `pirq_<component>_<what>_<unit>` and Prometheus conventions: base units
//! (`_seconds`, `_bytes`), `_total` on every counter and nowhere else, counts of things
//! (`_jobs`, `_keys`) as plain numbers.

use metrics::Unit;

/// Prometheus metric type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

impl Kind {
    /// As written on a `# TYPE` line (histograms are exported with buckets, see [`Metric::buckets`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        }
    }
}

/// Which process exports a metric on its `/metrics` endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Emitter {
    /// `pirq-gateway`; the `pirq_queue_*` gauges are sampled from Redis by the gateway.
    Gateway,
    /// `pirq-worker`.
    Worker,
}

impl Emitter {
    pub fn as_str(self) -> &'static str {
        match self {
            Emitter::Gateway => "gateway",
            Emitter::Worker => "worker",
        }
    }
}

/// When a metric has samples, so that checks know what to expect on a given deployment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// From start-up on (counters are registered at zero so `rate()` works from the first scrape).
    Always,
    /// Once the process has answered at least one query.
    AfterTraffic,
    /// Only on workers running the CUDA backend.
    Cuda,
}

/// One catalog entry.
#[derive(Clone, Copy, Debug)]
pub struct Metric {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    /// Label names; the values a label takes are described in `help`.
    pub labels: &'static [&'static str],
    pub emitter: Emitter,
    pub presence: Presence,
    pub help: &'static str,
}

// ---- names ------------------------------------------------------------------------------------

/// HTTP requests answered by the gateway.
pub const GATEWAY_HTTP_REQUESTS: &str = "pirq_gateway_http_requests_total";
/// Gateway request handling time.
pub const GATEWAY_HTTP_REQUEST_DURATION: &str = "pirq_gateway_http_request_duration_seconds";
/// Queries accepted and queued (one job each).
pub const GATEWAY_QUERIES_ACCEPTED: &str = "pirq_gateway_queries_accepted_total";
/// DPF keys in accepted queries.
pub const GATEWAY_KEYS_ACCEPTED: &str = "pirq_gateway_keys_accepted_total";
/// Idempotent replays: a POST with a known Idempotency-Key answered with its first request id.
pub const GATEWAY_IDEMPOTENT_REPLAYS: &str = "pirq_gateway_idempotent_replays_total";
/// Queries refused with 429 because the backlog is over --max-backlog.
pub const GATEWAY_QUERIES_THROTTLED: &str = "pirq_gateway_queries_throttled_total";
/// Clients refused by a gateway cap (`--max-connections`, `--max-waiters`).
pub const GATEWAY_REFUSALS: &str = "pirq_gateway_refusals_total";
/// TLS handshakes that failed or timed out.
pub const GATEWAY_TLS_HANDSHAKE_FAILURES: &str = "pirq_gateway_tls_handshake_failures_total";
/// Requests refused by the gateway's access rules (`--query-tokens`, `--token-rate`, `--ip-rate`).
pub const GATEWAY_ACCESS_REFUSALS: &str = "pirq_gateway_access_refusals_total";
/// Clients waiting for a result (long-poll or SSE).
pub const GATEWAY_WAITERS: &str = "pirq_gateway_waiters";
/// Whether the gateway's one pub/sub connection is up.
pub const GATEWAY_PUBSUB_CONNECTED: &str = "pirq_gateway_pubsub_connected";

/// Jobs in the stream not yet delivered to any worker.
pub const QUEUE_DEPTH: &str = "pirq_queue_depth_jobs";
/// Jobs delivered to a worker and not yet acknowledged.
pub const QUEUE_PENDING: &str = "pirq_queue_pending_jobs";
/// Age of the oldest job still in the stream.
pub const QUEUE_OLDEST_JOB_AGE: &str = "pirq_queue_oldest_job_age_seconds";
/// Workers whose heartbeat is alive.
pub const QUEUE_LIVE_WORKERS: &str = "pirq_queue_live_workers";
/// Jobs delivered and not acknowledged, per consumer group (per shard).
pub const QUEUE_GROUP_PENDING: &str = "pirq_queue_group_pending_jobs";
/// Jobs not yet delivered to a consumer group (per shard).
pub const QUEUE_GROUP_LAG: &str = "pirq_queue_group_lag_jobs";
/// Redis's `used_memory`, as the gateway samples it.
pub const QUEUE_REDIS_MEMORY: &str = "pirq_queue_redis_memory_bytes";
/// The gateway's `--max-redis-memory`.
pub const GATEWAY_REDIS_MEMORY_CAP: &str = "pirq_gateway_redis_memory_cap_bytes";

/// Jobs answered.
pub const WORKER_JOBS_COMPLETED: &str = "pirq_worker_jobs_completed_total";
/// Jobs failed.
pub const WORKER_JOBS_FAILED: &str = "pirq_worker_jobs_failed_total";
/// Jobs moved to the dead-letter stream.
pub const WORKER_JOBS_DEAD_LETTERED: &str = "pirq_worker_jobs_dead_lettered_total";
/// Jobs claimed from another consumer (or handed back) after their claim-idle time.
pub const WORKER_JOBS_RECLAIMED: &str = "pirq_worker_jobs_reclaimed_total";
/// Jobs handed back to the group unanswered (to retry, or at shutdown).
pub const WORKER_JOBS_RELEASED: &str = "pirq_worker_jobs_released_total";
/// DPF keys answered.
pub const WORKER_KEYS_ANSWERED: &str = "pirq_worker_keys_answered_total";
/// Gateway acceptance to result written.
pub const WORKER_JOB_LATENCY: &str = "pirq_worker_job_latency_seconds";
/// Gateway acceptance to the worker reading the job.
pub const WORKER_QUEUE_WAIT: &str = "pirq_worker_queue_wait_seconds";
/// A key's wait for its first segment of the rotating scan.
pub const WORKER_SEGMENT_WAIT: &str = "pirq_worker_segment_wait_seconds";
/// One turn of the rotating scan: a key's first segment to its last.
pub const WORKER_TURN_DURATION: &str = "pirq_worker_turn_duration_seconds";
/// Keys in flight during one turn of the rotating scan.
pub const WORKER_TURN_KEYS: &str = "pirq_worker_turn_keys";
/// The scanner idle, nothing in flight, before keys come.
pub const WORKER_SCANNER_IDLE: &str = "pirq_worker_scanner_idle_seconds";
/// Writing a window's results to Redis.
pub const WORKER_RESULTS_WRITE: &str = "pirq_worker_results_write_duration_seconds";
/// One phase of a pass (label `phase`).
pub const WORKER_PHASE_DURATION: &str = "pirq_worker_phase_duration_seconds";
/// Unix time of the worker's last heartbeat written to Redis.
pub const WORKER_HEARTBEAT_TIMESTAMP: &str = "pirq_worker_heartbeat_timestamp_seconds";
/// Newest database epoch the worker serves.
pub const WORKER_EPOCH: &str = "pirq_worker_epoch";
/// Whether the worker is ready (its `/readyz`).
pub const WORKER_READY: &str = "pirq_worker_ready";
/// GPU memory in use on the worker's device.
pub const WORKER_VRAM_USED: &str = "pirq_worker_vram_used_bytes";
/// GPU memory on the worker's device.
pub const WORKER_VRAM_TOTAL: &str = "pirq_worker_vram_total_bytes";
/// Answer pages the CUDA scanner handed to the Redis write, by whether a pinned block was lent.
pub const WORKER_ANSWER_PAGES: &str = "pirq_worker_answer_pages_total";

/// A phase of a scanner pass: the values of the `phase` label of [`WORKER_PHASE_DURATION`], and
/// the names the backends and benches time their passes by. The CPU backend has expand, scan and
/// merge; the CUDA backend all five (its merge runs on the device before d2h).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// The keys uploaded to the GPU.
    H2d,
    /// Every key expanded over the whole domain into selection bits.
    Expand,
    /// The one read of the database that answers every key (on the GPU with the unpack of
    /// parities into answer pages).
    Scan,
    /// The answers downloaded from the GPU.
    D2h,
    /// The epoch window's page changes merged into the answers of keys pinned after the base.
    Merge,
}

impl Phase {
    /// Every phase, in the order of the label's documentation.
    pub const ALL: [Phase; 5] = [
        Phase::H2d,
        Phase::Expand,
        Phase::Scan,
        Phase::D2h,
        Phase::Merge,
    ];

    /// The label value (`h2d`, `expand`, `scan`, `d2h`, `merge`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Phase::H2d => "h2d",
            Phase::Expand => "expand",
            Phase::Scan => "scan",
            Phase::D2h => "d2h",
            Phase::Merge => "merge",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

// ---- catalog ----------------------------------------------------------------------------------

const fn m(
    name: &'static str,
    kind: Kind,
    unit: Unit,
    labels: &'static [&'static str],
    emitter: Emitter,
    presence: Presence,
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        unit,
        labels,
        emitter,
        presence,
        help,
    }
}

use Emitter::{Gateway, Worker};
use Kind::{Counter, Gauge, Histogram};
use Presence::{AfterTraffic, Always, Cuda};

/// Every metric pirq exports. Order is the order of `docs/metrics.md`.
#[rustfmt::skip]
pub const CATALOG: &[Metric] = &[
    m(GATEWAY_HTTP_REQUESTS, Counter, Unit::Count, &["route", "method", "status", "table"], Gateway, AfterTraffic,
      "HTTP requests answered, by matched route template (never the raw path), method, status code and table (`default` on the routes without one; `-` where there is no table or a 404 may name none)."),
    m(GATEWAY_HTTP_REQUEST_DURATION, Histogram, Unit::Seconds, &["route", "table"], Gateway, AfterTraffic,
      "Time from request to response head, by route template and table; for SSE and long-poll this includes the wait."),
    m(GATEWAY_QUERIES_ACCEPTED, Counter, Unit::Count, &["table"], Gateway, Always,
      "Queries validated and queued (202), one job each: the jobs accepted; `table`: the query's table (`default` or a named table), registered at zero for `default` at start and for a named table when the gateway first serves it."),
    m(GATEWAY_KEYS_ACCEPTED, Counter, Unit::Count, &["table"], Gateway, Always,
      "DPF keys in accepted queries, by table."),
    m(GATEWAY_IDEMPOTENT_REPLAYS, Counter, Unit::Count, &[], Gateway, Always,
      "POSTs whose Idempotency-Key was known with the same body: answered with the first request's id, nothing queued."),
    m(GATEWAY_QUERIES_THROTTLED, Counter, Unit::Count, &[], Gateway, Always,
      "Queries refused with 429 backlog_full because the job backlog was over --max-backlog."),
    m(GATEWAY_REFUSALS, Counter, Unit::Count, &["cap"], Gateway, Always,
      "Clients refused with 503 and Retry-After by a cap of this gateway: cap=\"connections\" (--max-connections, every connection busy) or cap=\"waiters\" (--max-waiters)."),
    m(GATEWAY_TLS_HANDSHAKE_FAILURES, Counter, Unit::Count, &[], Gateway, Always,
      "TLS handshakes that failed or did not finish within --header-timeout-ms (scanners, plain HTTP sent to a TLS port, clients that do not trust the certificate); each is logged at debug only."),
    m(GATEWAY_ACCESS_REFUSALS, Counter, Unit::Count, &["reason"], Gateway, Always,
      "Query submits and result reads refused by the access rules: reason=\"unauthorized\" (401, no valid --query-tokens token), \"token_rate\" (429 rate_limited, over --token-rate) or \"ip_rate\" (429 rate_limited, over --ip-rate)."),
    m(GATEWAY_WAITERS, Gauge, Unit::Count, &[], Gateway, Always,
      "Clients waiting on this gateway for a result (long-poll or SSE)."),
    m(GATEWAY_PUBSUB_CONNECTED, Gauge, Unit::Count, &[], Gateway, Always,
      "1 while the gateway's one Redis pub/sub connection (completion events) is up, else 0."),
    m(QUEUE_DEPTH, Gauge, Unit::Count, &["table"], Gateway, Always,
      "Jobs in the table's streams not yet delivered to any worker (stream length minus pending), sampled from Redis; `table`: `default` or a named table of the party."),
    m(QUEUE_PENDING, Gauge, Unit::Count, &["table"], Gateway, Always,
      "Jobs of the table delivered to a worker and not yet acknowledged (XPENDING), sampled from Redis."),
    m(QUEUE_OLDEST_JOB_AGE, Gauge, Unit::Seconds, &["table"], Gateway, Always,
      "Age of the table's oldest job still in its streams, waiting or in progress (0 when empty), from its stream id."),
    m(QUEUE_LIVE_WORKERS, Gauge, Unit::Count, &["table"], Gateway, Always,
      "Workers registered for the table whose heartbeat key has not expired."),
    m(QUEUE_GROUP_PENDING, Gauge, Unit::Count, &["group", "table"], Gateway, AfterTraffic,
      "Jobs delivered and not yet acknowledged, per consumer group (`workers`, or `shard-I-of-S`: one per shard of a sharded table) and table."),
    m(QUEUE_GROUP_LAG, Gauge, Unit::Count, &["group", "table"], Gateway, AfterTraffic,
      "Jobs in the stream not yet delivered to the consumer group (XINFO GROUPS lag): a shard whose lag grows is the one holding the party back."),
    m(QUEUE_REDIS_MEMORY, Gauge, Unit::Bytes, &[], Gateway, Always,
      "Redis used_memory (INFO memory), sampled every second by the gateway's admission sampler; compare with pirq_gateway_redis_memory_cap_bytes."),
    m(GATEWAY_REDIS_MEMORY_CAP, Gauge, Unit::Bytes, &[], Gateway, Always,
      "The gateway's --max-redis-memory: while Redis holds more, new queries get 429 storage_full (0: no cap)."),
    m(WORKER_JOBS_COMPLETED, Counter, Unit::Count, &["table"], Worker, Always,
      "Jobs answered: result written, completion published, stream entry acknowledged; `table`: the job's table (`default` or a named table the worker serves), as on every per-table worker metric."),
    m(WORKER_JOBS_FAILED, Counter, Unit::Count, &["table"], Worker, Always,
      "Jobs answered with status failed (invalid job, epoch out of window, scanner error)."),
    m(WORKER_JOBS_DEAD_LETTERED, Counter, Unit::Count, &["table"], Worker, Always,
      "Jobs moved to the table's dead-letter stream ({P}:dead for `default`): failed on their last allowed delivery, or delivered more than --max-deliveries times."),
    m(WORKER_JOBS_RECLAIMED, Counter, Unit::Count, &["table"], Worker, Always,
      "Jobs this worker claimed (XAUTOCLAIM) after they sat unacknowledged past the claim-idle time: a dead worker's, or handed back."),
    m(WORKER_JOBS_RELEASED, Counter, Unit::Count, &["table"], Worker, Always,
      "Jobs this worker handed back to the group unanswered: failed with deliveries left (retry elsewhere), or held but not started at shutdown."),
    m(WORKER_KEYS_ANSWERED, Counter, Unit::Count, &["table"], Worker, Always,
      "DPF keys answered; its rate summed over workers and tables is the party's keys/s."),
    m(WORKER_JOB_LATENCY, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "End to end inside the party: gateway acceptance to result written (clocks of gateway and worker hosts)."),
    m(WORKER_QUEUE_WAIT, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "Gateway acceptance to the worker reading the job from the stream."),
    m(WORKER_SEGMENT_WAIT, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "Rotating scan: a job read by the worker to the start of its keys' first segment: the wait for the next segment boundary (and for room, at capacity; and, on a worker of several tables, for the scanner its tables share)."),
    m(WORKER_TURN_DURATION, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "Rotating scan: one full turn over the table's pages (the worker's share of them) for a job's keys, first segment to last, every page XORed once."),
    m(WORKER_TURN_KEYS, Histogram, Unit::Count, &["table"], Worker, AfterTraffic,
      "Rotating scan: keys of the table in flight during one turn (every key scanned in one of its segments): the batch size that matters for throughput."),
    m(WORKER_SCANNER_IDLE, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "Rotating scan: how long the table's rotation stood idle, none of its keys in flight, before keys came (on a worker of one table, the scanner's idle time). Under load it never idles; at low load this is the time between queries."),
    m(WORKER_RESULTS_WRITE, Histogram, Unit::Seconds, &["table"], Worker, AfterTraffic,
      "Writing one window's results of the table to Redis (records, completion events, acknowledgements), from its pass' end."),
    m(WORKER_PHASE_DURATION, Histogram, Unit::Seconds, &["phase"], Worker, AfterTraffic,
      "One phase of a pass: h2d (keys to GPU), expand (DPF to selection bits), scan, d2h (answers back), merge (epoch deltas). The CPU backend reports expand, scan and merge; the CUDA backend h2d, expand, scan, d2h and merge. In the worker's rotating scan: expand at each join, scan and merge per segment (CPU); per segment, the GPU's own time (CUDA events) of the joins' expansion (their records' upload included), the segment's scan, the merge and the finished answers' copies (CUDA): their sum against `pirq_worker_turn_duration_seconds` shows the host's share. The scanner's, over every table the worker serves (no `table` label)."),
    m(WORKER_HEARTBEAT_TIMESTAMP, Gauge, Unit::Seconds, &[], Worker, Always,
      "Unix time of the worker's last heartbeat written to Redis (of any of its tables: one process, one runtime); time() minus it is the staleness."),
    m(WORKER_EPOCH, Gauge, Unit::Count, &["table"], Worker, Always,
      "Newest epoch of the table the worker serves (each table has its own epochs)."),
    m(WORKER_READY, Gauge, Unit::Count, &[], Worker, Always,
      "1 while the worker's /readyz answers 200 (database loaded, updates applied, registered, job-stream reads succeeding, Redis answering), else 0; evaluated at each scrape."),
    m(WORKER_VRAM_USED, Gauge, Unit::Bytes, &[], Worker, Cuda,
      "GPU memory in use on the worker's device (database, workspaces, everything else)."),
    m(WORKER_VRAM_TOTAL, Gauge, Unit::Bytes, &[], Worker, Cuda,
      "GPU memory on the worker's device."),
    m(WORKER_ANSWER_PAGES, Counter, Unit::Count, &["path"], Worker, Cuda,
      "Answer pages the CUDA scanner handed to the Redis write, by path: \"lent\" (copied by the GPU into a pinned block that is lent to the write, no copy on the host before the Redis command's) or \"copied\" (the block pool was dry or a job's keys outgrew a block: copied out of the workspace's buffer first); a lasting share of copied pages means the pool is too small for the load."),
];

/// Buckets of the `_seconds` histograms: 100 µs to 60 s, roughly ×2.5 apart.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

/// Buckets of the batch-size histograms: powers of two up to 4096.
pub const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

impl Metric {
    /// The bucket bounds a Prometheus exporter should use for this histogram, `None` otherwise.
    /// Without explicit buckets `metrics-exporter-prometheus` exports summaries, which cannot be
    /// aggregated across workers; callers pass these to `set_buckets_for_metric`.
    pub fn buckets(&self) -> Option<&'static [f64]> {
        match (self.kind, self.unit) {
            (Kind::Histogram, Unit::Seconds) => Some(SECONDS_BUCKETS),
            (Kind::Histogram, _) => Some(BATCH_BUCKETS),
            _ => None,
        }
    }
}

/// Seconds from a Unix time in milliseconds (as carried in a job's `accepted_ms`) to now, by
/// this host's clock; 0 when the clocks disagree the other way. For [`WORKER_QUEUE_WAIT`] and
/// [`WORKER_JOB_LATENCY`], whose start was stamped by the gateway.
pub fn seconds_since_unix_ms(ms: u64) -> f64 {
    crate::clock::since_unix_ms(ms).as_secs_f64()
}

/// Records one phase of a pass in [`WORKER_PHASE_DURATION`].
pub fn record_phase(phase: Phase, took: std::time::Duration) {
    metrics::histogram!(WORKER_PHASE_DURATION, "phase" => phase.as_str())
        .record(took.as_secs_f64());
}

/// Counts a step's finished answer pages in [`WORKER_ANSWER_PAGES`]: `lent` in pinned blocks,
/// `copied` out of the scanner's own buffer.
pub fn record_answer_pages(lent: u64, copied: u64) {
    metrics::counter!(WORKER_ANSWER_PAGES, "path" => "lent").increment(lent);
    metrics::counter!(WORKER_ANSWER_PAGES, "path" => "copied").increment(copied);
}

/// Sets the VRAM gauges ([`WORKER_VRAM_USED`], [`WORKER_VRAM_TOTAL`]) from the device's
/// numbers (e.g. `cuMemGetInfo`: used = total − free).
pub fn set_vram(used_bytes: u64, total_bytes: u64) {
    metrics::gauge!(WORKER_VRAM_USED).set(used_bytes as f64);
    metrics::gauge!(WORKER_VRAM_TOTAL).set(total_bytes as f64);
}

/// The label naming the table a per-table metric is about: `default` (the party's table of
/// `--db`) or a named table (`--table NAME=FILE`); the gateway's `pirq_queue_*` gauges and
/// accepted-query counters and the worker's job, key and rotation metrics carry it.
pub const TABLE: &str = "table";

/// Registers at zero, for `table`, every counter of `emitter` labelled by [`TABLE`] alone, so a
/// table's counters appear (and `rate()` works) from the first scrape, as [`describe`] does for
/// the unlabelled ones (it cannot for these: it does not know the tables). A worker calls it for
/// each table it serves, a gateway for `default` at start and for a named table when it first
/// serves it. Never lowers a counter: registering one already counting adds 0.
pub fn zero_table_counters(emitter: Emitter, table: &str) {
    for m in of(emitter).filter(|m| m.kind == Kind::Counter && m.labels == [TABLE]) {
        metrics::counter!(m.name, TABLE => table.to_string()).increment(0);
    }
}

/// Looks a metric up by name.
pub fn get(name: &str) -> Option<&'static Metric> {
    CATALOG.iter().find(|m| m.name == name)
}

/// The metrics one process exports.
pub fn of(emitter: Emitter) -> impl Iterator<Item = &'static Metric> {
    CATALOG.iter().filter(move |m| m.emitter == emitter)
}

/// Registers help text and unit of every metric `emitter` exports with the installed recorder,
/// and registers its unlabeled counters at zero so they appear (and `rate()` works) before the
/// first event (per-table counters: [`zero_table_counters`]). Call once after installing the
/// recorder.
pub fn describe(emitter: Emitter) {
    for m in of(emitter) {
        match m.kind {
            Kind::Counter => {
                metrics::describe_counter!(m.name, m.unit, m.help);
                if m.labels.is_empty() {
                    metrics::counter!(m.name).absolute(0);
                }
            }
            Kind::Gauge => metrics::describe_gauge!(m.name, m.unit, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}

/// [`describe`] for every emitter: for a process that exports all of them (tests).
pub fn describe_all() {
    describe(Emitter::Gateway);
    describe(Emitter::Worker);
}

/// The catalog as the Markdown table in `docs/metrics.md` (between the `catalog` markers).
pub fn markdown_table() -> String {
    let mut out = String::from(
        "| Metric | Type | Unit | Labels | Emitted by | Present | Meaning |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for m in CATALOG {
        let labels = if m.labels.is_empty() {
            "–".to_string()
        } else {
            m.labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let presence = match m.presence {
            Presence::Always => "always",
            Presence::AfterTraffic => "after traffic",
            Presence::Cuda => "CUDA workers",
        };
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            m.name,
            m.kind.as_str(),
            m.unit.as_str(),
            labels,
            m.emitter.as_str(),
            presence,
            m.help.replace('|', "\\|"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_follow_the_scheme() {
        let mut seen = HashSet::new();
        for m in CATALOG {
            assert!(seen.insert(m.name), "{} listed twice", m.name);
            let component = match m.emitter {
                Emitter::Gateway => ["pirq_gateway_", "pirq_queue_"].as_slice(),
                Emitter::Worker => ["pirq_worker_"].as_slice(),
            };
            assert!(
                component.iter().any(|p| m.name.starts_with(p)),
                "{} does not name its component",
                m.name
            );
            assert!(
                m.name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{} is not snake_case",
                m.name
            );
            assert!(
                !m.help.is_empty() && m.help.ends_with('.'),
                "{}: help",
                m.name
            );
        }
    }

    #[test]
    fn units_and_suffixes_follow_prometheus_conventions() {
        for m in CATALOG {
            // `_total` on counters and nowhere else.
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}: `_total` is for counters only",
                m.name
            );
            // Base units only, and spelled in the name, so that an exporter with
            // unit suffixes turned on renders the same name.
            match m.unit {
                Unit::Count => {}
                Unit::Seconds | Unit::Bytes => {
                    let stem = m.name.trim_end_matches("_total");
                    assert!(
                        stem.ends_with(m.unit.as_str()),
                        "{}: name must end in its unit {}",
                        m.name,
                        m.unit.as_str()
                    );
                }
                other => panic!("{}: use base units, not {other:?}", m.name),
            }
            for word in m.name.split('_') {
                assert!(
                    ![
                        "milliseconds",
                        "microseconds",
                        "ms",
                        "us",
                        "kib",
                        "mib",
                        "count"
                    ]
                    .contains(&word),
                    "{}: {word} is not a Prometheus base unit",
                    m.name
                );
            }
        }
    }

    #[test]
    fn histograms_and_only_histograms_get_increasing_buckets() {
        for m in CATALOG {
            match m.buckets() {
                Some(b) => {
                    assert_eq!(m.kind, Kind::Histogram, "{}", m.name);
                    assert!(b.windows(2).all(|w| w[0] < w[1]), "{}", m.name);
                }
                None => assert_ne!(m.kind, Kind::Histogram, "{}", m.name),
            }
        }
    }

    #[test]
    fn elapsed_since_a_unix_timestamp() {
        let now_ms = crate::clock::unix_ms();
        let ten_s_ago = seconds_since_unix_ms(now_ms - 10_000);
        assert!((9.9..11.0).contains(&ten_s_ago), "{ten_s_ago}");
        // A gateway clock ahead of ours reads as no wait, not a negative one.
        assert_eq!(seconds_since_unix_ms(now_ms + 60_000), 0.0);
    }

    #[test]
    fn covers_what_operations_needs() {
        // Issue 8's list: a metric for each, so the dashboard has something to show.
        for name in [
            QUEUE_DEPTH,
            QUEUE_PENDING,
            QUEUE_OLDEST_JOB_AGE,
            GATEWAY_QUERIES_ACCEPTED,
            WORKER_JOBS_COMPLETED,
            WORKER_JOBS_FAILED,
            WORKER_JOBS_DEAD_LETTERED,
            WORKER_JOB_LATENCY,
            WORKER_QUEUE_WAIT,
            WORKER_SEGMENT_WAIT,
            WORKER_TURN_DURATION,
            WORKER_TURN_KEYS,
            WORKER_PHASE_DURATION,
            WORKER_HEARTBEAT_TIMESTAMP,
            WORKER_VRAM_USED,
            GATEWAY_HTTP_REQUESTS,
            GATEWAY_HTTP_REQUEST_DURATION,
        ] {
            assert!(get(name).is_some(), "{name} is not in the catalog");
        }
        assert_eq!(get(WORKER_PHASE_DURATION).unwrap().labels, &["phase"]);
        assert!(get("pirq_nope").is_none());
    }

    #[test]
    fn the_phase_help_names_every_phase() {
        let help = get(WORKER_PHASE_DURATION).unwrap().help;
        for phase in Phase::ALL {
            assert!(
                help.contains(phase.as_str()),
                "{phase} missing from: {help}"
            );
        }
    }

    /// `docs/metrics.md` carries the generated table; regenerate with
    /// `PIRQ_BLESS=1 cargo test -p pirq-shared metrics`.
    #[test]
    fn docs_table_matches_the_catalog() {
        const BEGIN: &str = "<!-- catalog:begin (generated from shared/src/metrics.rs) -->\n";
        const END: &str = "<!-- catalog:end -->";
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/metrics.md");
        let doc = std::fs::read_to_string(path).expect("docs/metrics.md");
        let start = doc.find(BEGIN).expect("begin marker") + BEGIN.len();
        let end = doc.find(END).expect("end marker");
        let want = markdown_table();
        if doc[start..end] != want {
            if std::env::var_os("PIRQ_BLESS").is_some() {
                let updated = format!("{}{}{}", &doc[..start], want, &doc[end..]);
                std::fs::write(path, updated).expect("writing docs/metrics.md");
            } else {
                panic!(
                    "docs/metrics.md is out of date with the catalog; \
                     run PIRQ_BLESS=1 cargo test -p pirq-shared metrics"
                );
            }
        }
    }

    /// Through a real Prometheus render: help lines, zeroed counters, buckets.
    #[test]
    fn describe_registers_help_and_zeroed_counters() {
        use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
        let mut builder = PrometheusBuilder::new();
        for m in CATALOG {
            if let Some(b) = m.buckets() {
                builder = builder
                    .set_buckets_for_metric(Matcher::Full(m.name.into()), b)
                    .unwrap();
            }
        }
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe_all();
            metrics::counter!(WORKER_JOBS_COMPLETED, TABLE => "users").increment(3);
            metrics::counter!(GATEWAY_KEYS_ACCEPTED, TABLE => "users").increment(3);
            for emitter in [Emitter::Gateway, Emitter::Worker] {
                zero_table_counters(emitter, "default");
                zero_table_counters(emitter, "users");
            }
            metrics::histogram!(WORKER_TURN_DURATION, TABLE => "default").record(0.02);
        });
        let text = handle.render();
        for m in CATALOG
            .iter()
            .filter(|m| m.kind == Kind::Counter && m.labels.is_empty())
        {
            assert!(
                text.contains(&format!("# HELP {} {}", m.name, m.help)),
                "{}",
                m.name
            );
            assert!(
                text.contains(&format!("{} 0\n", m.name)),
                "{} not at zero",
                m.name
            );
        }
        // Per-table counters: at zero for each table registered, and a count already made is
        // kept (registering adds nothing).
        let per_table: Vec<_> = CATALOG
            .iter()
            .filter(|m| m.kind == Kind::Counter && m.labels == [TABLE])
            .collect();
        assert!(per_table.len() >= 8, "{per_table:?}");
        for m in per_table {
            assert!(
                text.contains(&format!("# HELP {} {}", m.name, m.help)),
                "{}",
                m.name
            );
            let users = if [WORKER_JOBS_COMPLETED, GATEWAY_KEYS_ACCEPTED].contains(&m.name) {
                3
            } else {
                0
            };
            for (table, want) in [("default", 0), ("users", users)] {
                assert!(
                    text.contains(&format!("{}{{table=\"{table}\"}} {want}\n", m.name)),
                    "{} of {table} not at {want}:\n{text}",
                    m.name
                );
            }
        }
        assert!(text.contains(&format!("# TYPE {WORKER_TURN_DURATION} histogram")));
        assert!(text.contains(&format!(
            "{WORKER_TURN_DURATION}_bucket{{table=\"default\",le=\"0.025\"}} 1"
        )));
    }
}
