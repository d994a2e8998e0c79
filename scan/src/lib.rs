//! `pirq-scan`: the scanner boundary. One pass over the database answers a whole batch of keys.
//!
//! A backend expands every key of the batch into its selection bitmap and then streams the
//! database once, XORing each page into the accumulator of every key that selects it. Backends:
//! [`cpu`] (always) and `cuda` (cargo feature `cuda`). Both answer every epoch of their
//! [`epoch_window`] exactly. The worker feeds a scanner from Redis; the `pirq` tool runs one
//! locally (`pirq answer`, `pirq bench scan`): neither knows which backend it holds.

pub mod answer_pool;
pub mod cpu;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod epoch_window;
pub mod rotation;

use bytes::Bytes;
use pirq_shared::dpf::DpfKey;
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;

// ---- defaults ---------------------------------------------------------------------------------
// The worker's flags (`--max-batch-keys`, `--epoch-window`, `--workspaces`) take their defaults
// from here, and so do the scanners built without them (tests, benches, `pirq answer`): one
// number each, so a library default and a flag default cannot drift apart.

/// Largest batch one pass accepts (`--max-batch-keys`). A pass reads the database once for the
/// whole batch, so larger batches answer more keys per read until compute binds: 256 keys is
/// past that knee on an H100 at 64 GiB (7,397 keys/s, `docs/bench/gpu-scan.md`).
/// On the CPU the scan is linear in Q and this only bounds memory per pass; on the GPU it also
/// sizes the workspaces.
pub const DEFAULT_MAX_BATCH_KEYS: usize = 256;

/// Epochs answered exactly, the base included (`--epoch-window`): a client pinned to an epoch
/// up to 15 updates old still gets an exact answer, while only changed pages cost memory (the
/// window keeps page diffs, never a second copy of the database).
pub const DEFAULT_EPOCH_WINDOW: usize = 16;

/// CUDA workspaces, each with its own stream and buffers (`--workspaces`). Two let one
/// window's key upload and expansion run beside another's scan; more only queue once one scan
/// fills the GPU (measured: `docs/bench/gpu-scan.md`, "Pool").
pub const DEFAULT_WORKSPACES: usize = 2;

/// Shape of the database a scanner serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub num_pages: u64,
    pub page_size: usize,
    /// Domain bits `n` that every key must have (SPEC §2).
    pub domain_bits: u8,
}

/// The answers of one pass: `Q` pages of `page_size` bytes, `answer(q)` answers `keys[q]`.
///
/// The bytes are a [`Bytes`]: the buffer the scanner wrote them into (the CPU scanner's
/// accumulators, or a buffer a backend lends), passed on by reference count, never copied, to the
/// worker's write of the job's result ([`Answers::into_shared`]), so the worker's code copies the
/// answer bytes once on their way to Redis: into the Redis command (issue 28,
/// `docs/bench/worker-cpu.md`). The CUDA rotation lends the pinned blocks the device copied the
/// answers into ([`answer_pool`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answers {
    page_size: usize,
    bytes: Bytes,
}

impl Answers {
    /// Wraps `bytes`, which holds whole answers back to back (taken over, not copied).
    pub fn new(page_size: usize, bytes: Vec<u8>) -> Answers {
        Answers::shared(page_size, Bytes::from(bytes))
    }

    /// Wraps answers held in a shared buffer, e.g. a slice of a buffer the backend lends until
    /// the last reference is dropped ([`Bytes::from_owner`]).
    pub fn shared(page_size: usize, bytes: Bytes) -> Answers {
        assert_eq!(bytes.len() % page_size, 0, "answers are whole pages");
        Answers { page_size, bytes }
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / self.page_size
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn answer(&self, q: usize) -> &[u8] {
        &self.bytes[q * self.page_size..(q + 1) * self.page_size]
    }

    pub fn iter(&self) -> std::slice::ChunksExact<'_, u8> {
        self.bytes.chunks_exact(self.page_size)
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes as an owned vector: no copy when they came from one ([`Answers::new`]) and
    /// nothing else holds them.
    pub fn into_bytes(self) -> Vec<u8> {
        Vec::from(self.bytes)
    }

    /// The bytes as they are held, without a copy: what the worker hands to its Redis write.
    pub fn into_shared(self) -> Bytes {
        self.bytes
    }
}

/// Why a pass failed. A key error fails the whole pass: the worker validates keys first.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("key {index} has {got} domain bits, the database needs {want}")]
    DomainBits { index: usize, got: u8, want: u8 },
    #[error("batch of {got} keys exceeds this scanner's maximum of {max}")]
    BatchTooLarge { got: usize, max: usize },
    #[error(transparent)]
    Epoch(#[from] crate::epoch_window::EpochError),
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
    #[error("device error: {0}")]
    Device(String),
    /// The CUDA backend's error, kept whole (its cause stays reachable as the source).
    #[cfg(feature = "cuda")]
    #[error("device error: {0}")]
    Cuda(#[source] crate::cuda::CudaError),
}

/// What a pass costs on one scanner, measured: where passes stop being memory-bound (benches
/// report it; the worker's batch-per-pass window policy, which the rotating scan replaced, was
/// derived from it).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PassCost {
    /// Wall time of a one-key pass: the database read once, the floor of any pass.
    pub one_key: std::time::Duration,
    /// Wall time of a pass of `full_keys` keys (the largest batch).
    pub full: std::time::Duration,
    pub full_keys: usize,
    /// The scan's own part of that full pass (the rest is upload, expansion, download, copies).
    pub full_scan: std::time::Duration,
}

/// A full pass this much slower than a one-key pass has a knee inside the batch range; below,
/// the whole range counts as memory-bound (run-to-run spread is a few per cent).
const COMPUTE_BOUND_RATIO: f64 = 1.15;

impl PassCost {
    /// The batch size from which a pass is compute-bound: where the per-key cost of a full pass
    /// adds up to the one-key pass (`max_keys` and beyond when a full pass is hardly slower).
    pub fn knee(&self, max_keys: usize) -> usize {
        let (one, full) = (self.one_key.as_secs_f64(), self.full.as_secs_f64());
        if self.full_keys <= 1 || one <= 0.0 || full < one * COMPUTE_BOUND_RATIO {
            return max_keys.max(self.full_keys);
        }
        let per_key = full / self.full_keys as f64;
        ((one / per_key).ceil() as usize).clamp(1, max_keys.max(1))
    }

    /// Share of a full pass that is not the scan itself: what overlapping two passes can hide.
    pub fn non_scan_share(&self) -> f64 {
        let full = self.full.as_secs_f64();
        if full <= 0.0 {
            return 0.0;
        }
        (1.0 - self.full_scan.as_secs_f64() / full).clamp(0.0, 1.0)
    }
}

/// A scanner backend. `pass` takes `&self` so that a backend with several workspaces (the CUDA
/// pool) can run passes from several threads at once, overlapping one batch's key upload and
/// expansion with another's scan.
pub trait Scanner: Send + Sync {
    /// Short backend name for logs and metrics (`cpu`, `cuda`).
    fn name(&self) -> &'static str;

    fn geometry(&self) -> Geometry;

    /// Largest batch one pass accepts.
    fn max_batch_keys(&self) -> usize;

    /// The pages this scanner serves: all of them, or one shard's range (`--shard I/S`). A
    /// shard's answers are partial: the XOR of the selected pages of its range only.
    fn page_range(&self) -> std::ops::Range<u64> {
        0..self.geometry().num_pages
    }

    /// The epochs this scanner answers exactly (see [`crate::epoch_window`]).
    fn epoch_window(&self) -> EpochRange;

    /// Adds epoch `newest + 1`. All of the update applies, or none of it.
    fn apply_epoch(&self, update: &EpochUpdate) -> Result<(), ScanError>;

    /// One pass over the database: the answer of every key, in order, `keys[q]` answered at
    /// `epochs[q]` (each inside [`epoch_window`](Self::epoch_window)).
    fn pass_at(&self, keys: &[DpfKey], epochs: &[u64]) -> Result<Answers, ScanError>;

    /// Times passes of this scanner (a one-key pass and a full one, with random keys), for
    /// benches; `None` when the backend does not measure.
    fn measure_pass_cost(&self) -> Option<PassCost> {
        None
    }

    /// A rotating scan over this scanner ([`rotation`]): the worker's way of answering keys.
    /// Segments are sized from a measured one-key pass. Passes may still run beside it (tools,
    /// benches); updates apply between its steps. A backend without one says so.
    fn rotation(self: std::sync::Arc<Self>) -> Result<Box<dyn rotation::Rotation>, ScanError> {
        Err(ScanError::Unsupported("the rotating scan"))
    }

    /// One pass with every key at the newest epoch.
    fn pass(&self, keys: &[DpfKey]) -> Result<Answers, ScanError> {
        let newest = self.epoch_window().newest;
        self.pass_at(keys, &vec![newest; keys.len()])
    }
}

/// The writes of `update` that fall in `range`, re-indexed from the range's first page (a
/// shard applies only its own pages). Every write is checked against the whole database first,
/// so all shards accept or refuse an update alike.
pub fn own_writes(
    geometry: &Geometry,
    range: &std::ops::Range<u64>,
    update: &EpochUpdate,
) -> Result<Vec<pirq_shared::update::PageWrite>, ScanError> {
    update
        .validate(geometry.num_pages, geometry.page_size)
        .map_err(crate::epoch_window::EpochError::from)?;
    Ok(update
        .pages
        .iter()
        .filter(|w| range.contains(&w.index))
        .map(|w| pirq_shared::update::PageWrite {
            index: w.index - range.start,
            page: w.page.clone(),
        })
        .collect())
}

/// Checks that every key fits the database's domain; shared by all backends.
pub fn check_keys(geometry: &Geometry, keys: &[DpfKey], max: usize) -> Result<(), ScanError> {
    if keys.len() > max {
        return Err(ScanError::BatchTooLarge {
            got: keys.len(),
            max,
        });
    }
    for (index, key) in keys.iter().enumerate() {
        if key.domain_bits() != geometry.domain_bits {
            return Err(ScanError::DomainBits {
                index,
                got: key.domain_bits(),
                want: geometry.domain_bits,
            });
        }
    }
    Ok(())
}
