//! `pirq-worker`: answers PIR queries by scanning the page database.
//!
//! [`scan`] holds the [`scan::Scanner`] boundary and its backends; the queue loop that feeds it
//! from Redis lives beside it and never knows which backend runs.

pub mod backend;
pub mod batcher;
pub mod config;
pub mod epochs;
pub mod metrics_export;
pub mod policy;
pub mod queue;
pub mod reclaim;
pub mod registry;
pub mod scan;
pub mod serve;
pub mod updates;
