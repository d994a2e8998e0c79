//! What every handler gets: configuration, Redis, the event hub, metrics. Built once in `main`.

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;

use tokio::sync::watch;

use crate::access::Access;
use crate::backpressure::Drain;
use crate::config::Config;
use crate::dbinfo::DbCache;
use crate::durability::Durable;
use crate::events::Events;
use crate::retention::Retention;
use crate::waiters::Waiters;
use pirq_queue::producer::Producer;
use pirq_queue::RedisTarget;
use pirq_shared::layout::Layout;

/// The state of a router, its [`Parts`] behind one `Arc`: axum clones a router's state for
/// every request, at each layer and again for the handler's `State`, and a clone of this is
/// one refcount where the parts' own clones were a dozen (3 % of the gateway's CPU a query
/// went to cloning and dropping them, docs/bench/host-path.md). Fields read through `Deref`.
#[derive(Clone)]
pub struct AppState(Arc<Parts>);

impl Deref for AppState {
    type Target = Parts;

    fn deref(&self) -> &Parts {
        &self.0
    }
}

/// What an [`AppState`] holds: each a handle of its own (mostly `Arc`s), shared by the states
/// made from it ([`AppState::for_lane`], [`AppState::for_table`]).
#[derive(Clone)]
pub struct Parts {
    pub config: Arc<Config>,
    pub producer: Producer,
    pub db: Arc<DbCache>,
    pub events: Events,
    /// `None` when the process has no Prometheus recorder (then `/metrics` is empty).
    pub metrics: Option<PrometheusHandle>,
    /// The party's drain rate, for `Retry-After` on 429.
    pub drain: Drain,
    /// `--durability`: how a durable accept is obtained, and whether it holds now.
    pub durable: Durable,
    /// Turns true on SIGTERM: waiters answer at once and streams end.
    pub shutdown: watch::Receiver<bool>,
    /// Slots for long-polls and event streams (`--max-waiters`).
    pub waiters: Waiters,
    /// How long a read result is kept (`--fetched-result-bytes`).
    pub retention: Retention,
    /// `--query-tokens`, `--token-rate`, `--ip-rate`.
    pub access: Access,
    /// The table `producer` and `db` are of (`default` unless made by [`AppState::for_table`]).
    pub table: Arc<str>,
    /// The party's named tables, learnt from the workers' registration ([`crate::tables`]).
    pub tables: Arc<crate::tables::Tables>,
    /// The accepted-query counters of `table`.
    pub accepted: crate::metrics::Accepted,
}

pub use crate::error::StateError;

impl AppState {
    /// Builds the state and starts the pub/sub listener. Does not need Redis to be up.
    pub fn new(config: Config, metrics: Option<PrometheusHandle>) -> Result<AppState, StateError> {
        let layout = config.layout()?;
        let access = Access::of(&config).map_err(StateError::Access)?;
        let target = config.redis.target().map_err(StateError::Target)?;
        let producer = producer(&config, &target, &layout)?;
        let events = Events::start(target.clone(), layout.clone());
        let tables = Arc::new(crate::tables::Tables::new(target.clone()));
        let db = Arc::new(DbCache::new(producer.clone()));
        let drain = Drain::default();
        metrics::gauge!(pirq_shared::metrics::GATEWAY_REDIS_MEMORY_CAP)
            .set(config.max_redis_memory as f64);
        if config.bounds_admission() {
            drain.spawn(&target, layout, config.redis_timeout());
        }
        let waiters = Waiters::new(crate::caps::waiters(
            config.max_waiters,
            crate::caps::memory_bytes(),
        ));
        let retention = Retention::new(
            config.fetched_result_budget()?,
            Duration::from_secs(config.fetched_result_ttl),
        );
        retention.spawn(producer.clone());
        Ok(AppState::of(Parts {
            config: Arc::new(config),
            producer,
            db,
            events,
            metrics,
            drain,
            durable: Durable::ack(),
            shutdown: watch::channel(false).1,
            waiters,
            retention,
            access,
            table: Arc::from(pirq_shared::layout::DEFAULT_TABLE),
            tables,
            accepted: crate::metrics::Accepted::of(pirq_shared::layout::DEFAULT_TABLE),
        }))
    }

    /// A state of these parts.
    pub fn of(parts: Parts) -> AppState {
        AppState(Arc::new(parts))
    }

    /// The state a connection lane serves from ([`crate::lanes`]): a producer of its own (its
    /// Redis connection and submitters), so that a lane's submits and reads never wait on
    /// another thread's connection. Everything else is shared, the registration cache and the
    /// named tables' states above all: a pushed epoch invalidates the one cache every lane reads
    /// (a cache of its own would serve the old epoch for up to a second after a push through
    /// another lane, and refuse queries for the new one).
    pub fn for_lane(&self) -> Result<AppState, StateError> {
        let target = self.config.redis.target().map_err(StateError::Target)?;
        Ok(AppState::of(Parts {
            producer: producer(&self.config, &target, self.producer.layout())?,
            ..Parts::clone(self)
        }))
    }

    /// With the durability mode probed at start (`--durability fsync`).
    pub fn with_durability(mut self, durable: Durable) -> AppState {
        Arc::make_mut(&mut self.0).durable = durable;
        self
    }

    /// With the shutdown signal `main` turns on at SIGTERM.
    pub fn with_shutdown(mut self, shutdown: watch::Receiver<bool>) -> AppState {
        Arc::make_mut(&mut self.0).shutdown = shutdown;
        self
    }
}

/// A producer of the gateway's settings over a connection of its own (the gateway's, or a
/// connection lane's).
fn producer(
    config: &Config,
    target: &RedisTarget,
    layout: &Layout,
) -> Result<Producer, StateError> {
    Ok(
        Producer::new(target, layout.clone(), config.redis_timeout())?
            .with_submit_tick(config.submit_tick()),
    )
}
