//! What every handler gets: configuration, Redis, the event hub, metrics. Built once in `main`.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusHandle;
use pirq_shared::layout::Layout;

use crate::config::Config;
use crate::dbinfo::DbCache;
use crate::events::Events;
use crate::store::{Store, StoreError};

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub db: Arc<DbCache>,
    pub events: Events,
    /// `None` when the process has no Prometheus recorder (then `/metrics` is empty).
    pub metrics: Option<PrometheusHandle>,
}

/// Why the state could not be built (bad prefix or Redis URL).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(transparent)]
    Prefix(#[from] pirq_shared::layout::PrefixError),
    #[error("redis url: {0}")]
    Redis(#[from] redis::RedisError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl AppState {
    /// Builds the state and starts the pub/sub listener. Does not need Redis to be up.
    pub fn new(config: Config, metrics: Option<PrometheusHandle>) -> Result<AppState, StateError> {
        let layout = Layout::new(&config.prefix)?;
        let client = redis::Client::open(config.redis_url.as_str())?;
        let store = Store::new(client.clone(), layout.clone(), config.redis_timeout())?;
        let events = Events::start(client, layout.events());
        let db = Arc::new(DbCache::new(store.clone(), Duration::from_secs(1)));
        Ok(AppState {
            config: Arc::new(config),
            store,
            db,
            events,
            metrics,
        })
    }
}
