//! `pirq-gateway`: the HTTP front of one party.
//!
//! The gateway never scans. It validates a query, puts it on the party's Redis job stream, and
//! hands back the result a worker wrote under the request id, by polling, long-polling or
//! Server-Sent Events. Modules, one job each:
//!
//! - [`config`]: command-line flags and `PIRQ_*` environment variables.
//! - [`state`]: what every handler shares, among it the party's [`pirq_queue::producer::Producer`], through
//!   which goes every Redis command the gateway sends.
//! - [`events`]: the one pub/sub connection and its fan-out to waiting requests.
//! - [`dbinfo`]: the registered database, cached for validation; [`tables`]: the party's
//!   named tables (issue 38), learnt from the workers' registration.
//! - [`routes`]: thin handlers behind one middleware each, [`front`] (head limits, request
//!   metrics, the access checks), [`error`]: error → HTTP status + JSON, [`body`]: request bodies
//!   read only after the checks that need none, bounded in size and time.
//! - [`admission`]: whether a submit is taken now, every gate in order and its answer;
//!   [`idempotency`], [`backpressure`], [`durability`]: `Idempotency-Key`, the drain rate and
//!   memory behind 429 and 507, `--durability fsync|replica`.
//! - [`cors`]: which browser origins may call the party (`--cors-origin`); [`access`]: who may
//!   query and how fast (`--query-tokens`, `--token-rate`, `--ip-rate`).
//! - [`server`]: the accept loop, its caps and timeouts; [`tls`]: `--tls-cert`, rotation on
//!   SIGHUP; [`reload`]: what SIGHUP re-reads (the certificate, the query tokens).
//! - [`startup`]: the whole gateway as one call, [`serve`]: its start-up steps in order, the
//!   listeners and the drain; `main` parses the flags and hands it the shutdown signal.
//! - [`metrics`]: the Prometheus recorder and request metrics; [`queue_metrics`]: the
//!   `pirq_queue_*` gauges sampled from Redis.

pub mod access;
pub mod admission;
pub mod backpressure;
pub mod body;
pub mod caps;
pub mod config;
pub mod cors;
pub mod dbinfo;
pub mod durability;
pub mod error;
pub mod events;
pub mod front;
pub mod idempotency;
pub mod lanes;
pub mod metrics;
pub mod queue_metrics;
pub mod reload;
pub mod retention;
pub mod routes;
pub mod server;
pub mod shards;
pub mod startup;
pub mod state;
pub mod tables;
pub mod tls;
pub mod waiters;

pub use config::Config;
pub use routes::{router, router_for, Route, Routes};
pub use startup::serve;
pub use state::AppState;
