//! The database the party's workers registered, cached briefly.
//!
//! Every `POST /v1/queries` validates keys against the database's domain bits and epochs.
//! Reading `{P}:db` once a second instead of once a request keeps the submit path at one Redis
//! round trip; a missing registration is never cached, so the first worker to register is seen
//! at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use pirq_queue::producer::Producer;
use pirq_queue::{QueueError, RegisteredDb};

/// How long a read registration is used (the serve_database helper of the e2e suite waits it
/// out after a database switch).
pub const MAX_AGE: Duration = Duration::from_secs(1);

pub struct DbCache {
    producer: Producer,
    cached: Mutex<Option<(RegisteredDb, Instant)>>,
}

impl DbCache {
    pub fn new(producer: Producer) -> DbCache {
        DbCache {
            producer,
            cached: Mutex::new(None),
        }
    }

    /// Forgets the cached registration (after this gateway changed it: a pushed epoch is
    /// visible to its next query at once).
    pub fn invalidate(&self) {
        *self.cached.lock().unwrap() = None;
    }

    /// The registration, `None` when no worker has registered a database yet.
    pub async fn get(&self) -> Result<Option<RegisteredDb>, QueueError> {
        if let Some((info, at)) = *self.cached.lock().unwrap() {
            if at.elapsed() < MAX_AGE {
                return Ok(Some(info));
            }
        }
        let fresh = self.producer.database().await?;
        *self.cached.lock().unwrap() = fresh.map(|info| (info, Instant::now()));
        Ok(fresh)
    }
}
