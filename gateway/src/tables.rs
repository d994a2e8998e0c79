//! The party's tables as a gateway learns them (issue 38): the table `default` is the state the
//! gateway starts with; a named table is learnt from the workers' registration (`{P}:tables`,
//! `docs/redis.md`, "Tables") the first time a request names it, and kept: its producer (the
//! gateway's connection, the table's keys), its registration cache, a status-channel listener
//! feeding the gateway's one set of waiters, its own drain sampler (with a backlog or memory
//! bound: a table's backlog is bounded by its own drain rate, not `default`'s), and under
//! `--durability replica` its own check of its partitions' primaries (on a Redis Cluster they
//! need not be `default`'s: [`crate::durability`]).
//!
//! A request for a table the party does not list is 404 `unknown_table`, decided by one `SMEMBERS`
//! (a name that is not a table name at all costs no Redis command); a known table costs no Redis
//! command to find.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use pirq_queue::RedisTarget;
use pirq_shared::error::ErrorCode;
use pirq_shared::layout::{check_table_name, DEFAULT_TABLE};

use crate::backpressure::Drain;
use crate::dbinfo::DbCache;
use crate::error::ApiError;
use crate::state::{AppState, Parts};

/// The named tables this gateway has served so far.
pub struct Tables {
    target: RedisTarget,
    known: Mutex<HashMap<String, AppState>>,
}

impl Tables {
    pub fn new(target: RedisTarget) -> Tables {
        Tables {
            target,
            known: Mutex::new(HashMap::new()),
        }
    }
}

/// 404 `unknown_table`, naming the table and where the list is.
pub fn unknown_table(name: &str) -> ApiError {
    ApiError::new(
        ErrorCode::UnknownTable,
        format!("this party serves no table {name:?} (GET /v1/tables lists its tables)"),
    )
}

impl AppState {
    /// The state the handlers of table `name` run with: this one for `default`, else the
    /// table's (its producer, its registration cache), learnt on first use.
    pub async fn for_table(&self, name: &str) -> Result<AppState, ApiError> {
        if name == DEFAULT_TABLE {
            return Ok(self.clone());
        }
        check_table_name(name).map_err(|_| unknown_table(name))?;
        if let Some(table) = self.tables.known.lock().unwrap().get(name) {
            return Ok(table.clone());
        }
        if !self.producer.table_names().await?.iter().any(|t| t == name) {
            return Err(unknown_table(name));
        }
        let layout = self
            .producer
            .layout()
            .table(name)
            .map_err(|_| unknown_table(name))?;
        // On a Redis Cluster the table's keys may sit on other primaries than `default`'s.
        let durable = self.durable.for_table(&self.tables.target, &layout).await;
        let mut known = self.tables.known.lock().unwrap();
        // Two first requests at once: the first one in makes the table's state.
        let table = known.entry(name.to_string()).or_insert_with(|| {
            let producer = self.producer.for_table(layout.clone());
            self.events
                .listen_to_table(self.tables.target.clone(), layout.clone());
            let drain = Drain::default();
            if self.config.bounds_admission() {
                drain.spawn(&self.tables.target, layout, self.config.redis_timeout());
            }
            tracing::info!(table = name, "serving a table of the party");
            AppState::of(Parts {
                db: Arc::new(DbCache::new(producer.clone())),
                producer,
                drain,
                durable,
                table: Arc::from(name),
                accepted: crate::metrics::Accepted::of(name),
                ..Parts::clone(self)
            })
        });
        Ok(table.clone())
    }

    /// The `Location` of query `id` of this table: under `/v1` for `default`, under
    /// `/v1/tables/NAME` for the others. Built in one buffer of its final size (it is on every
    /// accepted query's answer; `format!` grew it twice).
    pub fn query_location(&self, id: &str) -> String {
        const QUERIES: &str = "/queries/";
        let mut location = String::with_capacity(12 + self.table.len() + QUERIES.len() + id.len());
        if &*self.table == DEFAULT_TABLE {
            location.push_str("/v1");
        } else {
            location.push_str("/v1/tables/");
            location.push_str(&self.table);
        }
        location.push_str(QUERIES);
        location.push_str(id);
        location
    }
}
