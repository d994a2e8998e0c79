//! The CUDA rotation's answer blocks: page-locked host memory that the device copies finished
//! answers into, lent to the worker's Redis write as [`bytes::Bytes`] ([`crate::answer_pool`]).
//! Page-locked, so that the copy is the device's own (DMA), and the answers then reach the Redis
//! command without another copy on the host.

use std::sync::Arc;

use cudarc::driver::{CudaContext, PinnedHostSlice};

use super::error::CudaError;
use crate::answer_pool::{BlockPool, PoolShape};

/// One block of page-locked host memory.
pub struct PinnedBlock {
    slice: PinnedHostSlice<u8>,
    /// `slice`'s memory, taken once: `PinnedHostSlice`'s accessors synchronize an event and can
    /// fail, and a block is read on threads where no CUDA context is current.
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `ptr` points into the allocation that `slice` owns (and `PinnedHostSlice` is `Send`);
// no other value points there. The bytes are reached only through `&self` (reads) and
// `&mut self` (writes), like a `Box<[u8]>`'s, so the block can move to another thread. Device
// copies into it run only while the rotation's landing holds it and are synchronized before
// anything reads it (`CudaRotation::step`, `clear` and `drop` synchronize first).
unsafe impl Send for PinnedBlock {}

impl PinnedBlock {
    fn new(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedBlock, CudaError> {
        // Not write-combined: the CPU reads these bytes (the Redis command copies them), and
        // reads of write-combined memory bypass the caches.
        // SAFETY: zeroed below before any reference to the bytes exists.
        let mut slice = unsafe { ctx.alloc_pinned_with_flags::<u8>(len.max(1), 0) }?;
        let ptr = slice.as_mut_ptr()?;
        // SAFETY: `ptr` is the start of `slice`'s `len.max(1)` bytes, not yet referenced.
        unsafe { std::ptr::write_bytes(ptr, 0, len) };
        Ok(PinnedBlock { slice, ptr, len })
    }
}

impl AsRef<[u8]> for PinnedBlock {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len` initialized bytes (zeroed at allocation) that live as long as `slice`;
        // shared for as long as `&self` is.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl AsMut<[u8]> for PinnedBlock {
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_ref`; exclusive for as long as `&mut self` is.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        // The last slice of a lent block may drop on a thread of the worker's Redis writer, where
        // no context is current, and `PinnedHostSlice`'s drop (right after this) frees the memory
        // with `cuMemFreeHost`, which needs one. The context lives at least as long as `slice`,
        // which holds it. A failure leaves the block unfreed (cudarc records the error); it
        // happens only as the pool goes, when the worker stops.
        let _ = self.slice.context().bind_to_thread();
    }
}

/// The answer pool of a rotation holding up to `keys` keys in flight of `page_size`-byte pages
/// (sized by [`PoolShape::for_keys`]). Without the pinned memory for it, an empty pool: every
/// answer is then copied out of the workspace's buffer, as before the pool.
pub fn answer_pool(
    ctx: &Arc<CudaContext>,
    keys: usize,
    page_size: usize,
) -> BlockPool<PinnedBlock> {
    let shape = PoolShape::for_keys(keys, page_size);
    let blocks = (0..shape.blocks)
        .map(|_| PinnedBlock::new(ctx, shape.block_pages * page_size))
        .collect::<Result<Vec<_>, _>>();
    match blocks {
        Ok(blocks) => {
            tracing::debug!(
                blocks = shape.blocks,
                block_pages = shape.block_pages,
                "answer blocks pinned"
            );
            BlockPool::new(blocks)
        }
        Err(e) => {
            tracing::warn!(
                error = %e,
                "no pinned memory for the answer blocks; answers are copied out of the workspace"
            );
            BlockPool::new(Vec::new())
        }
    }
}
