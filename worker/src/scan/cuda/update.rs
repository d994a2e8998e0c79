//! Epochs on the GPU: a base copy in device memory plus page diffs on the host.
//!
//! The scheme is the CPU scanner's (`crate::epochs`): one scan of the base answers keys pinned
//! to any epoch in the window, and each answer is fixed up with the pages changed since the base,
//! `answer(e) = scan(base) XOR Σ bit(p) · diff_e(p)`. The GPU parts are small:
//! - the selection bits of the changed pages are gathered on the device right after expansion
//!   (`sel_gather`), so the host never needs a key's full bitmap;
//! - an update is diffed against base pages read back from the transposed database
//!   (`db_page_read`), so no host copy of the database is kept;
//! - when the window is full and the base moves forward, the folded diffs are XORed into exactly
//!   those pages' bits of the transposed database (`db_page_xor`): a page update touches its
//!   page only, never a whole block.
//!
//! Passes hold the window lock shared for their whole length; an update holds it exclusively, so
//! the base never moves under a running scan.

use std::collections::BTreeMap;
use std::sync::Arc;

use cudarc::driver::{CudaSlice, LaunchConfig, PushKernelArg};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::DpfKey;
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;
use rayon::prelude::*;

use super::workspace::{PassTimings, Workspace};
use super::{CudaError, CudaScanner};
use crate::scan::{Answers, ScanError};

/// Pages a single `db_page_*` launch handles (grid.x limit, and bounded staging).
const PAGES_PER_LAUNCH: usize = 4096;

impl CudaScanner {
    /// Oldest and newest epoch answered exactly.
    pub fn window_range(&self) -> EpochRange {
        let w = self.window.read().unwrap_or_else(|e| e.into_inner());
        EpochRange {
            oldest: w.oldest(),
            newest: w.newest(),
        }
    }

    /// Adds epoch `newest + 1` (whole-page replacements): all of it applies, or none. When the
    /// window is full the base moves forward one epoch on the GPU.
    pub fn apply_update(&self, update: &EpochUpdate) -> Result<(), ScanError> {
        let mut window = self.window.write().unwrap_or_else(|e| e.into_inner());
        window.check(update.epoch, &update.pages)?;
        let mut indices: Vec<u64> = update.pages.iter().map(|w| w.index).collect();
        indices.sort_unstable();
        indices.dedup();
        let base: BTreeMap<u64, Vec<u8>> = indices
            .iter()
            .copied()
            .zip(self.read_pages(&indices)?)
            .collect();
        let folded = window.push(update.epoch, &update.pages, |p| base[&p].clone())?;
        if !folded.is_empty() {
            self.xor_pages(&folded)?;
        }
        Ok(())
    }

    /// A pass answering `keys[q]` at `epochs[q]` (each in the window), with phase timings.
    pub fn pass_at_timed(
        &self,
        keys: &[DpfKey],
        epochs: &[u64],
    ) -> Result<(Answers, PassTimings), ScanError> {
        assert_eq!(keys.len(), epochs.len(), "one epoch per key");
        let window = self.window.read().unwrap_or_else(|e| e.into_inner());
        for &e in epochs {
            window.resolve(Some(e))?;
        }
        // Diff sets are cumulative: the newest asked-for epoch's set holds every page any of
        // the asked-for epochs changed.
        let changed: Vec<u64> = epochs
            .iter()
            .max()
            .and_then(|&e| window.diffs_at(e))
            .map(|d| d.keys().copied().collect())
            .unwrap_or_default();
        let plan = self.plan_for(keys.len());
        let (answers, timings, bits) = self.run_pass(keys, plan, &changed)?;
        if changed.is_empty() {
            return Ok((answers, timings));
        }
        let ps = self.db.shape().page_size;
        let per_key = changed.len().div_ceil(32);
        let mut bytes = answers.into_bytes();
        bytes
            .par_chunks_mut(ps)
            .zip(epochs.par_iter())
            .enumerate()
            .for_each(|(q, (answer, &epoch))| {
                let Some(diffs) = window.diffs_at(epoch) else {
                    return;
                };
                let words = &bits[q * per_key..(q + 1) * per_key];
                for (page, diff) in diffs {
                    let i = changed.binary_search(page).expect("cumulative diff sets");
                    if words[i / 32] >> (i % 32) & 1 == 1 {
                        xor_into(answer, diff);
                    }
                }
            });
        Ok((Answers::new(ps, bytes), timings))
    }

    /// Launches `sel_gather` on the workspace's stream for `pages` (sorted); the returned device
    /// words are valid once the stream has synchronized.
    pub(super) fn gather_bits(
        &self,
        ws: &Workspace,
        q: usize,
        padded: usize,
        pages: &[u64],
    ) -> Result<CudaSlice<u32>, CudaError> {
        let stream = &ws.stream;
        let dev_pages = stream.clone_htod(pages)?;
        let out = stream.alloc_zeros::<u32>(q * pages.len().div_ceil(32))?;
        let (np_total, count, q32) = ((padded / 16) as u32, pages.len() as u32, q as u32);
        let threads = pages.len() as u64 * q as u64;
        let cfg = LaunchConfig {
            grid_dim: (threads.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.kernels.sel_gather);
        launch
            .arg(&ws.sel.ptr)
            .arg(&np_total)
            .arg(&dev_pages)
            .arg(&count)
            .arg(&q32)
            .arg(&out);
        // SAFETY: arguments match `sel_gather`; sel holds the expanded bits of `padded` keys.
        unsafe { launch.launch(cfg) }?;
        Ok(out)
    }

    /// Base pages read back from the transposed database, in the order of `pages`.
    pub(super) fn read_pages(&self, pages: &[u64]) -> Result<Vec<Vec<u8>>, CudaError> {
        let ps = self.db.shape().page_size;
        let mut out = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(PAGES_PER_LAUNCH) {
            let dev_pages = self.main.clone_htod(chunk)?;
            let mut dev_out = self.main.alloc_zeros::<u8>(chunk.len() * ps)?;
            self.launch_page_kernel(true, &dev_pages, chunk.len(), &mut dev_out)?;
            let bytes = self.main.clone_dtoh(&dev_out)?;
            out.extend(bytes.chunks_exact(ps).map(<[u8]>::to_vec));
        }
        Ok(out)
    }

    /// XORs `diffs` (page index, page-sized diff; each page at most once) into the base.
    pub(super) fn xor_pages(&self, diffs: &[(u64, Arc<[u8]>)]) -> Result<(), CudaError> {
        for chunk in diffs.chunks(PAGES_PER_LAUNCH) {
            let indices: Vec<u64> = chunk.iter().map(|(p, _)| *p).collect();
            let data: Vec<u8> = chunk.iter().flat_map(|(_, d)| d.iter().copied()).collect();
            let dev_pages = self.main.clone_htod(&indices)?;
            let mut dev_diffs = self.main.clone_htod(&data)?;
            self.launch_page_kernel(false, &dev_pages, chunk.len(), &mut dev_diffs)?;
        }
        self.main.synchronize()?;
        Ok(())
    }

    /// `db_page_read` (`read`) or `db_page_xor` over `count` pages on the main stream.
    fn launch_page_kernel(
        &self,
        read: bool,
        pages: &CudaSlice<u64>,
        count: usize,
        data: &mut CudaSlice<u8>,
    ) -> Result<(), CudaError> {
        let wpp = self.db.shape().words_per_page() as u32;
        let cfg = LaunchConfig {
            grid_dim: (count as u32, wpp.div_ceil(256), 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let (db, count) = (self.db.ptr(), count as u32);
        let func = if read {
            &self.kernels.page_read
        } else {
            &self.kernels.page_xor
        };
        let mut launch = self.main.launch_builder(func);
        if read {
            launch.arg(&db).arg(pages).arg(&count).arg(data).arg(&wpp);
        } else {
            launch.arg(&db).arg(pages).arg(&count).arg(&*data).arg(&wpp);
        }
        // SAFETY: arguments match `db_page_read(a, pages, count, out, wpp)` and
        // `db_page_xor(a, pages, count, diffs, wpp)`; `data` holds count pages.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }
}
