//! Prometheus metrics: the recorder, and the count and time of every request ([`Tracked`]).
//!
//! Names follow `pirq_gateway_<what>_<unit>`; the route label is the matched route template
//! (`/v1/queries/{id}`), never the raw path, so request ids do not explode the label space.

use std::sync::Mutex;
use std::time::Instant;

use axum::extract::Request;
use axum::http::Method;
use axum::response::Response;
use metrics::{Counter, Histogram, SharedString};
use metrics_exporter_prometheus::PrometheusHandle;

/// Installs the process-wide Prometheus recorder and its upkeep. Call once, from `main`,
/// inside the runtime.
pub fn install() -> Result<PrometheusHandle, metrics_exporter_prometheus::BuildError> {
    use pirq_shared::metrics::Emitter;
    // The catalog's buckets, the same the workers use, so histograms aggregate across processes;
    // served on the gateway's own `/metrics` route.
    let handle = pirq_party::metrics::builder(Emitter::Gateway)?.install_recorder()?;
    // Help text from the catalog, and the counters at zero before the first request.
    pirq_party::metrics::described(Emitter::Gateway);
    crate::caps::register_refusals();
    crate::access::register_refusals();
    pirq_party::metrics::spawn_upkeep(handle.clone());
    Ok(handle)
}

/// The accepted-query counters of one table (`pirq_gateway_queries_accepted_total` and
/// `pirq_gateway_keys_accepted_total`, labelled `table` as the worker's job counters are),
/// registered at zero and looked up once, when the table's state is made: a query's count
/// is then two atomic adds, no label lookup.
#[derive(Clone)]
pub struct Accepted {
    queries: Counter,
    keys: Counter,
}

impl Accepted {
    pub fn of(table: &str) -> Accepted {
        use pirq_shared::metrics::{zero_table_counters, Emitter, TABLE};
        zero_table_counters(Emitter::Gateway, table);
        Accepted {
            queries: metrics::counter!(pirq_shared::metrics::GATEWAY_QUERIES_ACCEPTED, TABLE => table.to_string()),
            keys: metrics::counter!(pirq_shared::metrics::GATEWAY_KEYS_ACCEPTED, TABLE => table.to_string()),
        }
    }

    /// One query of `keys` keys accepted.
    pub fn count(&self, keys: u64) {
        self.queries.increment(1);
        self.keys.increment(keys);
    }
}

/// The request metrics of one route (`pirq_gateway_http_requests_total` and
/// `pirq_gateway_http_request_duration_seconds`), their handles looked up once per label set
/// and kept: a request is then counted and timed with two atomic operations instead of two
/// registry lookups (each one builds a key, formats the status, hashes the labels and compares
/// them: ~4 % of the gateway's instructions a query, docs/bench/host-path.md). The label sets a
/// route meets are few (its method, a handful of statuses, the party's tables); past
/// [`RouteMetrics::MAX_KEPT`] of them a request is counted through the registry as before, so
/// the cache stays small whatever clients send.
pub struct RouteMetrics {
    /// The route's template (`/v1/queries/{id}`), never the raw path.
    route: &'static str,
    kept: Mutex<Vec<Kept>>,
}

/// The handles of one label set of a route.
struct Kept {
    method: SharedString,
    status: u16,
    table: SharedString,
    requests: Counter,
    duration: Histogram,
}

impl RouteMetrics {
    /// Label sets kept a route.
    const MAX_KEPT: usize = 32;

    pub fn new(route: &'static str) -> RouteMetrics {
        RouteMetrics {
            route,
            kept: Mutex::new(Vec::new()),
        }
    }

    /// Counts one request and records its duration.
    fn record(&self, method: SharedString, status: u16, table: SharedString, secs: f64) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = kept
            .iter()
            .find(|k| k.status == status && k.method == method && k.table == table)
        {
            k.requests.increment(1);
            k.duration.record(secs);
            return;
        }
        let requests = metrics::counter!(pirq_shared::metrics::GATEWAY_HTTP_REQUESTS, "route" => self.route, "method" => method.clone(), "status" => status.to_string(), "table" => table.clone());
        let duration = metrics::histogram!(pirq_shared::metrics::GATEWAY_HTTP_REQUEST_DURATION, "route" => self.route, "table" => table.clone());
        requests.increment(1);
        duration.record(secs);
        if kept.len() < Self::MAX_KEPT {
            kept.push(Kept {
                method,
                status,
                table,
                requests,
                duration,
            });
        }
    }
}

/// One request on its way through its route, counted and timed by route, method, status and
/// table when its answer is ready ([`crate::front`] starts and finishes it).
pub struct Tracked {
    start: Instant,
    method: SharedString,
    /// The table the path names, if it names one.
    named: Option<String>,
}

impl Tracked {
    /// Starts the clock for `req`.
    pub fn start(req: &Request) -> Tracked {
        let method = match *req.method() {
            Method::GET => SharedString::const_str("GET"),
            Method::POST => SharedString::const_str("POST"),
            Method::HEAD => SharedString::const_str("HEAD"),
            ref other => SharedString::from(other.to_string()),
        };
        Tracked {
            start: Instant::now(),
            method,
            named: table_of(req.uri().path()),
        }
    }

    /// Counts the request in `route`'s metrics with the status of `resp` and records how long
    /// it took.
    pub fn finish(self, route: &RouteMetrics, resp: &Response) {
        let status = resp.status().as_u16();
        let table = table_label(route.route, self.named, status);
        route.record(
            self.method,
            status,
            table,
            self.start.elapsed().as_secs_f64(),
        );
    }
}

/// The table a `/v1/tables/NAME/…` or `/v1/admin/tables/NAME/…` path names, if it is a valid
/// table name.
fn table_of(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/v1/tables/")
        .or_else(|| path.strip_prefix("/v1/admin/tables/"))?;
    let name = rest.split('/').next()?;
    pirq_shared::layout::check_table_name(name).ok()?;
    Some(name.to_string())
}

/// The `table` label: the table a table route names (but on a 404, which may be
/// `unknown_table`: names sent by anyone must not grow the label space), `default` on the
/// per-database routes without a table name, `-` elsewhere.
fn table_label(route: &str, named: Option<String>, status: u16) -> SharedString {
    const DEFAULT_ROUTES: [&str; 6] = [
        "/v1/queries",
        "/v1/queries/{id}",
        "/v1/queries/{id}/events",
        "/v1/info",
        "/v1/manifests",
        "/v1/admin/epochs",
    ];
    match named {
        Some(name) if status != 404 => SharedString::from(name),
        Some(_) => SharedString::const_str("-"),
        None if DEFAULT_ROUTES.contains(&route) => {
            SharedString::const_str(pirq_shared::layout::DEFAULT_TABLE)
        }
        None => SharedString::const_str("-"),
    }
}
