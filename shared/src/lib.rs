//! `pirq-shared`: everything that crosses a process boundary in pirq, per `docs/spec/v1.md` ("SPEC").
//!
//! - [`dpf`]: DPF v1 keys (SPEC §1): generation, strict parsing, point and full-domain evaluation.
//! - [`db`]: the `.pirdb` page database file (SPEC §2), written atomically, and its deterministic
//!   synthetic pages.
//! - [`digest`]: the database digest (SPEC §2.1) that tells two parties' contents apart.
//! - [`wire`]: HTTP request/result bodies (SPEC §4), JSON and bincode.
//! - [`layout`]: every Redis key name, in one place.
//! - [`update`]: epoch updates (whole-page replacements), JSON and bincode.
//! - [`error`]: error codes shared by gateway and worker.
//! - [`shard`]: page-range shards (`--shard I/S`) and their boundaries.
//! - [`tempfiles`]: temporary files a tool removes when it is interrupted.
//! - [`kv`]: key-value lookups over the pages by cuckoo hashing (`docs/spec/kv.md`).
//!
//! No async runtime here: both the gateway and the worker (and the client) depend on this crate.

pub mod bits;
pub mod check;
pub mod db;
pub mod digest;
pub mod dpf;
pub mod error;
pub mod kv;
pub mod layout;
pub mod metrics;
pub mod outfile;
pub mod shard;
pub mod signing;
pub mod tempfiles;
pub mod update;
pub mod wire;
