//! `pirq-shared`: everything that crosses a process boundary in pirq, per `docs/spec/v1.md` ("SPEC").
//!
//! - [`dpf`]: DPF v1 keys (SPEC §1): generation, strict parsing, point and full-domain evaluation.
//! - [`synthetic`]: deterministic synthetic pages, the same on every machine and on the GPU.
//! - [`digest`]: the database digest (SPEC §2.1) that tells two parties' contents apart.
//! - [`wire`]: HTTP request/result bodies (SPEC §4), JSON and bincode.
//! - [`layout`]: every Redis key name, in one place.
//! - [`update`]: epoch updates (whole-page replacements), JSON and bincode.
//! - [`error`]: error codes shared by gateway and worker.
//! - [`shard`]: page-range shards (`--shard I/S`) and their boundaries.
//! - [`clock`]: Unix time as records carry it; [`backoff`]: the one retry back-off.
//! - [`request_id`]: [`RequestId`], the 128-bit random id of a query (SPEC §4.1): minted by the
//!   gateways, checked by the clients before it becomes part of a URL.
//! - [`kv`]: key-value lookups over the pages by cuckoo hashing (`docs/spec/kv.md`).
//!
//! The `.pirdb` file itself (SPEC §2: header, reader, writers) is the `pirq-db` crate's, built on
//! the header blocks defined here ([`signing::BLOCK`], [`kv::BLOCK`]).
//!
//! No async runtime, no file mappings, no thread pool (unless the `parallel` feature asks for
//! one): both the gateway and the worker, and the client, depend on this crate.

pub mod backoff;
pub mod bits;
pub mod check;
pub mod clock;
pub mod digest;
pub mod dpf;
pub mod error;
pub mod kv;
pub mod layout;
pub mod metrics;
pub mod request_id;
pub mod shard;
pub mod signing;
pub mod synthetic;
pub mod update;
pub mod wire;

pub use request_id::RequestId;
