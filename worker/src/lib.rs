//! `pirq-worker`: answers PIR queries by scanning the page database.
//!
//! The scanners (the [`pirq_scan::Scanner`] boundary and its backends) live in `pirq-scan`; the
//! queue loop here feeds them from Redis and never knows which backend runs.

pub mod backend;
pub mod batcher;
pub mod config;
pub mod epoch_follower;
pub mod guard;
pub mod health;
pub mod metrics_export;
pub mod policy;
pub mod reclaim;
pub mod serve;
pub mod verify;
