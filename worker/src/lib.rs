//! `pirq-worker`: answers PIR queries by scanning the page database.
//!
//! The scanners (the [`pirq_scan::Scanner`] boundary and its backends) live in `pirq-scan`; the
//! scheduling loop here ([`schedule`]) feeds their rotating scan from Redis and never knows which backend runs.
//! [`run`] ([`startup`]) is the whole worker as one call: `main` parses the flags and hands it
//! the shutdown signal.

pub mod backend;
pub mod config;
pub mod epoch_follower;
pub mod guard;
pub mod health;
pub mod metrics_export;
pub mod rotation_book;
pub mod schedule;
pub mod serve;
pub mod share;
pub mod startup;
pub mod verify;

pub use startup::run;
