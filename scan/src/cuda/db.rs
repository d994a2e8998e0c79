//! The database on the GPU, in the scan's bit-transposed layout A (`kernels/pirq_common.cuh`).
//!
//! It is allocated once and stays resident for the scanner's life. A `.pirdb` is streamed in
//! through two pinned staging buffers (the CPU fills one while the GPU copies and transposes the
//! other); benches generate synthetic pages on the device instead, so 64 GiB never crosses PCIe.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    result, CudaContext, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PinnedHostSlice,
    PushKernelArg,
};

use super::error::CudaError;
use super::kernels::Kernels;
use super::layout::{Shape, BLOCK_PAGES};

/// Bytes of one staging chunk (rounded to whole 256-page blocks, at least one block).
const STAGING_BYTES: u64 = 64 << 20;

/// The grid of the kernels that write A (`db_transpose`, `db_synthetic`) over `blocks` 256-page
/// blocks of pages of `wpp` words: a CTA per block and run of 32 page words, a warp per 32 pages.
fn transpose_config(blocks: u64, wpp: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (blocks as u32, wpp.div_ceil(32), 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The transposed database in device memory.
pub struct DeviceDb {
    shape: Shape,
    a: CudaSlice<u32>,
    ptr: u64,
}

impl DeviceDb {
    /// Allocates A for `shape`, keeping `reserve` bytes free for the workspaces; errors with the
    /// numbers when the card is too small.
    pub fn alloc(
        stream: &Arc<CudaStream>,
        shape: Shape,
        reserve: u64,
    ) -> Result<DeviceDb, CudaError> {
        let (free, _total) = stream.context().mem_get_info()?;
        let needed = shape.db_bytes() + reserve;
        if needed > free as u64 {
            return Err(CudaError::OutOfMemory {
                needed,
                free: free as u64,
            });
        }
        // SAFETY: every word is written by the transpose/synthetic kernels before any scan reads it.
        let a = unsafe { stream.alloc::<u32>((shape.db_bytes() / 4) as usize) }?;
        let ptr = a.device_ptr(stream).0;
        Ok(DeviceDb { shape, a, ptr })
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Device address of A.
    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> u64 {
        self.a.num_bytes() as u64
    }

    /// Fills A with `pirq_shared::synthetic` pages under `seed`, generated on the device.
    pub fn fill_synthetic(
        &mut self,
        stream: &Arc<CudaStream>,
        kernels: &Kernels,
        seed: u64,
    ) -> Result<(), CudaError> {
        let s = self.shape;
        let wpp = s.words_per_page() as u32;
        // A shard generates database pages from its first block on, at its own block 0: the
        // kernel computes page numbers and A's addresses from the same block index, so it gets
        // database block numbers and an A shifted back by the shard's first block (the
        // addresses it writes are all inside A). Pages past the database's end are zero.
        let a = self
            .ptr
            .wrapping_sub(s.first_block * BLOCK_PAGES * s.page_size as u64);
        let mut first = 0u64;
        // One launch per 65535 blocks (grid.x limit).
        while first < s.scan_blocks() {
            let count = (s.scan_blocks() - first).min(65535);
            let block = s.first_block + first;
            let cfg = transpose_config(count, wpp);
            let mut launch = stream.launch_builder(&kernels.synthetic);
            launch
                .arg(&a)
                .arg(&seed)
                .arg(&block)
                .arg(&s.total_pages)
                .arg(&wpp);
            // SAFETY: arguments match `db_synthetic`; A holds scan_blocks() blocks.
            unsafe { launch.launch(cfg) }?;
            first += count;
        }
        stream.synchronize()?;
        Ok(())
    }

    /// Copies and transposes `pages` (this GPU's pages back to back: the whole database, or a
    /// shard's range of it), reporting `progress(bytes_done, bytes_total)` after each chunk.
    pub fn load(
        &mut self,
        stream: &Arc<CudaStream>,
        kernels: &Kernels,
        pages: &[u8],
        mut progress: impl FnMut(u64, u64),
    ) -> Result<(), CudaError> {
        let s = self.shape;
        let ps = s.page_size as u64;
        let block_bytes = BLOCK_PAGES * ps;
        let chunk_blocks = (STAGING_BYTES / block_bytes).max(1);
        let chunk_bytes = (chunk_blocks * block_bytes) as usize;
        let ctx: &Arc<CudaContext> = stream.context();
        let mut staging: Vec<PinnedHostSlice<u8>> = Vec::new();
        let mut raw: Vec<CudaSlice<u8>> = Vec::new();
        let mut copied = Vec::new();
        for _ in 0..2 {
            // SAFETY: written by the CPU before each copy; only the written prefix is copied.
            staging.push(unsafe { ctx.alloc_pinned::<u8>(chunk_bytes) }?);
            // SAFETY: only the copied prefix is read; pages past num_pages are masked in-kernel.
            raw.push(unsafe { stream.alloc::<u8>(chunk_bytes) }?);
            copied.push(ctx.new_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC))?);
        }
        let total = pages.len() as u64;
        let wpp = s.words_per_page() as u32;
        let mut first_block = 0u64;
        let mut i = 0usize;
        while first_block < s.scan_blocks() {
            let blocks = (s.scan_blocks() - first_block).min(chunk_blocks);
            let start = (first_block * block_bytes).min(total) as usize;
            let end = ((first_block + blocks) * block_bytes).min(total) as usize;
            let slot = i % 2;
            // The previous copy out of this pinned buffer must be done before it is refilled.
            copied[slot].synchronize()?;
            let host = staging[slot].as_mut_slice()?;
            host[..end - start].copy_from_slice(&pages[start..end]);
            let dst = raw[slot].device_ptr(stream).0;
            // SAFETY: `host` is pinned and stays alive (and unmodified until `copied[slot]`).
            unsafe { result::memcpy_htod_async(dst, &host[..end - start], stream.cu_stream()) }?;
            copied[slot].record(stream)?;
            let cfg = transpose_config(blocks, wpp);
            let mut launch = stream.launch_builder(&kernels.transpose);
            launch
                .arg(&self.ptr)
                .arg(&dst)
                .arg(&first_block)
                .arg(&s.num_pages)
                .arg(&wpp);
            // SAFETY: arguments match `db_transpose`; `raw[slot]` holds the chunk's pages.
            unsafe { launch.launch(cfg) }?;
            first_block += blocks;
            i += 1;
            progress(end as u64, total);
        }
        stream.synchronize()?;
        Ok(())
    }

    /// Times one read of all of A with the `read_all` kernel: the floor of any pass, in ms.
    pub fn time_read_all(
        &self,
        stream: &Arc<CudaStream>,
        kernels: &Kernels,
        sink: u64,
    ) -> Result<f32, CudaError> {
        let ctx = stream.context();
        let (e0, e1) = (
            ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
            ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?,
        );
        let sms = kernels.sms;
        let n16 = self.bytes() / 16;
        let cfg = LaunchConfig {
            grid_dim: (sms * 16, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        e0.record(stream)?;
        let mut launch = stream.launch_builder(&kernels.read_all);
        launch.arg(&self.ptr).arg(&n16).arg(&sink);
        // SAFETY: arguments match `read_all`; `sink` is a device word.
        unsafe { launch.launch(cfg) }?;
        e1.record(stream)?;
        e1.synchronize()?;
        Ok(e0.elapsed_ms(&e1)?)
    }
}
