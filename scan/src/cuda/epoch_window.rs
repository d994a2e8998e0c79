//! Epochs on the GPU: the base in device memory, the window's page changes resident beside it.
//!
//! The scheme is the CPU scanner's (`crate::epoch_window`, SPEC §3): one scan of the base answers keys
//! pinned to any epoch in the window, and each answer is fixed up with the pages changed since
//! the base, `answer(e) = scan(base) XOR Σ bit(p) · diff_e(p)`. On the device:
//! - every epoch after the base keeps its **steps** in device memory, `step_e(p) = page_p(e) XOR
//!   page_p(e - 1)` for the pages it wrote, uploaded once when the update arrives. The sum of a
//!   page's steps up to `e` is `diff_e(p)`, so a table of all steps sorted by epoch serves every
//!   epoch: a key pinned to `e` merges the prefix of epochs `<= e`;
//! - `epoch_merge` (kernels/epoch_merge.cu) merges all keys of a pass in one launch, right after
//!   the scan, reading the selection bits from the buffer the expansion wrote;
//! - an update is diffed against base pages read back from the transposed database
//!   (`db_page_read`), so no host copy of the database is kept;
//! - when the window is full and the base moves forward, the oldest epoch's steps (already on the
//!   device) are XORed into exactly those pages' bits of the transposed database (`db_page_xor`):
//!   compaction touches only the changed pages, never a second copy of the database, and drops
//!   that epoch's steps.
//!
//! The host keeps the [`DeltaWindow`] (epoch bookkeeping, the same checks as the CPU backend).
//!
//! Passes hold the state lock shared for their whole length. An update is prepared (pages read
//! back, steps computed and uploaded, the next window built) while passes go on, serialized with
//! other updates by `update_lock`; then it takes the lock exclusively only to XOR a folded epoch
//! into the database (when the window was full) and swap the state in. So a pass never sees a
//! half-moved base, and queries stop only for the rewrite of the changed pages.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{CudaSlice, DevicePtr, LaunchConfig, PushKernelArg};
use pirq_shared::bits::xor_into;
use pirq_shared::dpf::DpfKey;
use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;

use super::error::CudaError;
use super::layout::SelLayout;
use super::workspace::{PassTimings, Workspace};
use super::CudaScanner;
use crate::epoch_window::{DeltaWindow, EpochError};
use crate::{Answers, ScanError};

/// Pages a single `db_page_read` launch stages (bounded host and device staging).
const PAGES_PER_LAUNCH: usize = 4096;
/// Table entries one `epoch_merge` block walks (grid.z splits longer tables).
const ENTRIES_PER_SLICE: usize = 256;
/// Keys one `epoch_merge` block owns (`PIRQ_MERGE_KEYS`).
const MERGE_KEYS: usize = 32;

/// One epoch's page steps in device memory (nothing allocated for an epoch without changes).
pub(super) struct DeviceStep {
    /// Changed pages, ascending, each once.
    pages: Vec<u64>,
    /// `pages` on the device, and the steps: `pages.len()` pages of bytes, in that order.
    dev: Option<(CudaSlice<u64>, CudaSlice<u8>)>,
    pages_ptr: u64,
    data_ptr: u64,
}

/// The merge table of every step in the window, sorted by epoch.
struct Table {
    /// Page index of each entry, and the device address of its step.
    _pages: CudaSlice<u64>,
    _diffs: CudaSlice<u64>,
    pages_ptr: u64,
    diffs_ptr: u64,
}

/// The window on the host and its steps on the device; always changed together.
pub(super) struct EpochState {
    window: DeltaWindow,
    /// Steps of epochs `oldest + 1 ..= newest`.
    steps: VecDeque<Arc<DeviceStep>>,
    table: Option<Table>,
    /// `ends[i]`: table entries of `steps[..=i]`.
    ends: Vec<u32>,
}

impl EpochState {
    pub(super) fn new(window: DeltaWindow) -> EpochState {
        EpochState {
            window,
            steps: VecDeque::new(),
            table: None,
            ends: Vec::new(),
        }
    }

    /// Whether `epoch` is in the window (an error when not).
    pub(super) fn resolve(&self, epoch: u64) -> Result<u64, EpochError> {
        self.window.resolve(Some(epoch))
    }

    /// The merge of the table entries of pages `pages` into key columns whose prefixes are
    /// `limits` (from [`limit`](Self::limit); 0 for a column at the base or unused), or `None`
    /// when there is nothing to merge.
    pub(super) fn merge_pages<'a>(
        &self,
        limits: &'a [u32],
        pages: std::ops::Range<u64>,
    ) -> Option<Merge<'a>> {
        match &self.table {
            Some(t) if limits.iter().any(|&l| l > 0) => Some(Merge {
                pages_ptr: t.pages_ptr,
                diffs_ptr: t.diffs_ptr,
                limits,
                pages,
            }),
            _ => None,
        }
    }

    /// Table entries a key pinned to `epoch` merges (0 at the base).
    pub(super) fn limit(&self, epoch: u64) -> Result<u32, EpochError> {
        let e = self.window.resolve(Some(epoch))?;
        Ok(match e - self.window.oldest() {
            0 => 0,
            i => self.ends[i as usize - 1],
        })
    }
}

/// What a pass merges: the table and each key's prefix of it.
pub(super) struct Merge<'a> {
    pages_ptr: u64,
    diffs_ptr: u64,
    limits: &'a [u32],
    /// Only the table entries of these pages (all of them for a pass; a rotation's segment).
    pages: std::ops::Range<u64>,
}

/// Where the time of one [`CudaScanner::apply_update`] went.
#[derive(Clone, Copy, Debug, Default)]
pub struct UpdateTimings {
    /// Distinct pages the update wrote.
    pub pages: usize,
    /// Base pages read back, steps computed and uploaded, next window built (passes go on).
    pub prepare: Duration,
    /// Exclusive lock held: passes wait this long (includes `compaction`).
    pub blocked: Duration,
    /// Pages folded into the base by this update (0 when the window was not full).
    pub folded_pages: usize,
    /// The fold: `db_page_xor` over the folded pages, launch to completion.
    pub compaction: Duration,
}

impl CudaScanner {
    /// Oldest and newest epoch answered exactly.
    pub fn window_range(&self) -> EpochRange {
        let st = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        EpochRange {
            oldest: st.window.oldest(),
            newest: st.window.newest(),
        }
    }

    /// Adds epoch `newest + 1` (whole-page replacements): all of it applies, or none. When the
    /// window is full the base moves forward one epoch on the GPU.
    pub fn apply_update(&self, update: &EpochUpdate) -> Result<UpdateTimings, ScanError> {
        // A shard keeps only its own pages' writes, re-indexed from its first page.
        let own = crate::own_writes(
            &crate::Scanner::geometry(self),
            &self.db.shape().page_range(),
            update,
        )?;
        let update = &EpochUpdate {
            epoch: update.epoch,
            pages: own,
        };
        let _serial = self.update_lock.lock().unwrap_or_else(|e| e.into_inner());
        let started = Instant::now();
        let ps = self.db.shape().page_size;
        let (next, fold, pages) = {
            let st = self.epochs.read().unwrap_or_else(|e| e.into_inner());
            st.window.check(update.epoch, &update.pages)?;
            // A page written twice in one update takes the last write.
            let writes: BTreeMap<u64, &[u8]> = update
                .pages
                .iter()
                .map(|w| (w.index, w.page.as_slice()))
                .collect();
            let indices: Vec<u64> = writes.keys().copied().collect();
            let base: BTreeMap<u64, Vec<u8>> = indices
                .iter()
                .copied()
                .zip(self.read_pages(&indices)?)
                .collect();
            // step(p) = new XOR page(newest) = new XOR base XOR diff_newest(p).
            let prev = st.window.diffs_at(st.window.newest());
            let mut data = vec![0u8; indices.len() * ps];
            for ((p, new), out) in writes.iter().zip(data.chunks_exact_mut(ps)) {
                out.copy_from_slice(new);
                xor_into(out, &base[p]);
                if let Some(d) = prev.and_then(|m| m.get(p)) {
                    xor_into(out, d);
                }
            }
            let step = Arc::new(self.upload_step(indices, &data)?);
            let mut window = st.window.clone();
            let folded = window.push(update.epoch, &update.pages, |p| base[&p].clone())?;
            let mut steps = st.steps.clone();
            steps.push_back(step);
            // The base moved iff the window's oldest epoch did (an epoch without changes folds
            // to an empty list, and its empty step must go all the same).
            let fold = match window.oldest() == st.window.oldest() {
                true => None,
                false => steps.pop_front(),
            };
            if let Some(f) = &fold {
                // The folded diffs are the oldest epoch's steps (diff at base + 1 = its step).
                debug_assert!(f.pages.iter().copied().eq(folded.iter().map(|(p, _)| *p)));
            }
            let (table, ends) = self.build_table(&steps)?;
            self.main.synchronize().map_err(CudaError::from)?;
            let next = EpochState {
                window,
                steps,
                table,
                ends,
            };
            (next, fold, writes.len())
        };
        let prepare = started.elapsed();
        let blocked_from = Instant::now();
        let mut st = self.epochs.write().unwrap_or_else(|e| e.into_inner());
        // A rotation launches its next step under the read lock and lets it run after (it
        // queues a step ahead, `super::rotation`): with the write lock held no step is launched,
        // and this waits for those on the device, which read the base and the old table.
        self.ctx.synchronize().map_err(CudaError::from)?;
        let (mut folded_pages, mut compaction) = (0, Duration::ZERO);
        if let Some(step) = &fold {
            let t = Instant::now();
            self.xor_step(step)?;
            compaction = t.elapsed();
            folded_pages = step.pages.len();
        }
        let old = std::mem::replace(&mut *st, next);
        drop(st);
        let blocked = blocked_from.elapsed();
        // Freed after the lock: passes and rotation steps that used the old table or the folded
        // steps finished before the fold (above), later ones see the new state, and freeing the
        // old host window's diffs (hundreds of MiB for big updates) takes a while. A device
        // error in the fold above leaves the base half moved: the update fails, and the worker
        // stops (worker/src/epoch_follower.rs): a device fault, not a state to answer from.
        drop(old);
        drop(fold);
        Ok(UpdateTimings {
            pages,
            prepare,
            blocked,
            folded_pages,
            compaction,
        })
    }

    /// A pass answering `keys[q]` at `epochs[q]` (each in the window), with phase timings.
    pub fn pass_at_timed(
        &self,
        keys: &[DpfKey],
        epochs: &[u64],
    ) -> Result<(Answers, PassTimings), ScanError> {
        assert_eq!(keys.len(), epochs.len(), "one epoch per key");
        let st = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        let limits = epochs
            .iter()
            .map(|&e| st.limit(e))
            .collect::<Result<Vec<u32>, _>>()?;
        let merge = match &st.table {
            Some(t) if limits.iter().any(|&l| l > 0) => Some(Merge {
                pages_ptr: t.pages_ptr,
                diffs_ptr: t.diffs_ptr,
                limits: &limits,
                pages: 0..u64::MAX,
            }),
            _ => None,
        };
        self.run_pass(keys, self.plan_for(keys.len()), merge)
    }

    /// Launches `epoch_merge` on the workspace's stream after the scan of `q` keys; the returned
    /// buffer (the keys' limits) must live until the stream has synchronized.
    pub(super) fn merge(
        &self,
        ws: &Workspace,
        merge: &Merge<'_>,
        q: usize,
        padded: usize,
        layout: SelLayout,
    ) -> Result<CudaSlice<u32>, CudaError> {
        let stream = &ws.stream;
        let limits = stream.clone_htod(merge.limits)?;
        let wpp = self.db.shape().words_per_page();
        let threads = wpp.min(256);
        let longest = merge.limits.iter().copied().max().unwrap_or(0) as usize;
        let cfg = LaunchConfig {
            grid_dim: (
                wpp.div_ceil(threads) as u32,
                q.div_ceil(MERGE_KEYS) as u32,
                longest.div_ceil(ENTRIES_PER_SLICE).max(1) as u32,
            ),
            block_dim: (threads as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let wg_layout = u32::from(layout == SelLayout::Wgmma);
        let (np_total, per_slice, q32, wpp32) = (
            (padded / 16) as u32,
            ENTRIES_PER_SLICE as u32,
            q as u32,
            wpp as u32,
        );
        let sel = super::sel_ptr(ws, &self.db.shape(), padded);
        let mut launch = stream.launch_builder(&self.kernels.epoch_merge);
        launch
            .arg(&sel)
            .arg(&np_total)
            .arg(&merge.pages_ptr)
            .arg(&merge.diffs_ptr)
            .arg(&per_slice)
            .arg(&limits)
            .arg(&q32)
            .arg(&ws.answers.ptr)
            .arg(&wpp32)
            .arg(&wg_layout)
            .arg(&merge.pages.start)
            .arg(&merge.pages.end);
        // SAFETY: arguments match `epoch_merge`; sel holds the expanded bits of `padded` key
        // columns, answers q pages, the table `max(limits)` entries whose steps stay allocated
        // while the caller holds the state lock shared.
        unsafe { launch.launch(cfg) }?;
        Ok(limits)
    }

    /// Uploads one epoch's steps (`pages` ascending, `data` their steps in that order).
    fn upload_step(&self, pages: Vec<u64>, data: &[u8]) -> Result<DeviceStep, CudaError> {
        if pages.is_empty() {
            return Ok(DeviceStep {
                pages,
                dev: None,
                pages_ptr: 0,
                data_ptr: 0,
            });
        }
        let dev_pages = self.main.clone_htod(&pages)?;
        let dev_data = self.main.clone_htod(data)?;
        let pages_ptr = dev_pages.device_ptr(&self.main).0;
        let data_ptr = dev_data.device_ptr(&self.main).0;
        Ok(DeviceStep {
            pages,
            dev: Some((dev_pages, dev_data)),
            pages_ptr,
            data_ptr,
        })
    }

    /// The merge table of `steps` (in epoch order) and its prefix ends.
    fn build_table(
        &self,
        steps: &VecDeque<Arc<DeviceStep>>,
    ) -> Result<(Option<Table>, Vec<u32>), CudaError> {
        let ps = self.db.shape().page_size as u64;
        let (mut pages, mut diffs, mut ends) = (Vec::new(), Vec::new(), Vec::new());
        for step in steps {
            pages.extend_from_slice(&step.pages);
            diffs.extend((0..step.pages.len() as u64).map(|i| step.data_ptr + i * ps));
            ends.push(pages.len() as u32);
        }
        if pages.is_empty() {
            return Ok((None, ends));
        }
        let dev_pages = self.main.clone_htod(&pages)?;
        let dev_diffs = self.main.clone_htod(&diffs)?;
        let pages_ptr = dev_pages.device_ptr(&self.main).0;
        let diffs_ptr = dev_diffs.device_ptr(&self.main).0;
        let table = Table {
            pages_ptr,
            diffs_ptr,
            _pages: dev_pages,
            _diffs: dev_diffs,
        };
        Ok((Some(table), ends))
    }

    /// Base pages read back from the transposed database, in the order of `pages`.
    pub(super) fn read_pages(&self, pages: &[u64]) -> Result<Vec<Vec<u8>>, CudaError> {
        let ps = self.db.shape().page_size;
        let mut out = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(PAGES_PER_LAUNCH) {
            let dev_pages = self.main.clone_htod(chunk)?;
            let dev_out = self.main.alloc_zeros::<u8>(chunk.len() * ps)?;
            let pages_ptr = dev_pages.device_ptr(&self.main).0;
            let out_ptr = dev_out.device_ptr(&self.main).0;
            self.launch_page_kernel(true, pages_ptr, chunk.len(), out_ptr)?;
            let bytes = self.main.clone_dtoh(&dev_out)?;
            out.extend(bytes.chunks_exact(ps).map(<[u8]>::to_vec));
        }
        Ok(out)
    }

    /// XORs one epoch's steps (resident on the device) into the base, and waits for it.
    fn xor_step(&self, step: &DeviceStep) -> Result<(), CudaError> {
        if step.dev.is_some() {
            self.launch_page_kernel(false, step.pages_ptr, step.pages.len(), step.data_ptr)?;
        }
        self.main.synchronize()?;
        Ok(())
    }

    /// `db_page_read` (`read`) or `db_page_xor` over `count` pages on the main stream.
    fn launch_page_kernel(
        &self,
        read: bool,
        pages: u64,
        count: usize,
        data: u64,
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
        launch.arg(&db).arg(&pages).arg(&count).arg(&data).arg(&wpp);
        // SAFETY: arguments match `db_page_read(a, pages, count, out, wpp)` and
        // `db_page_xor(a, pages, count, diffs, wpp)`; `data` holds count pages, `pages` count
        // distinct indices below num_pages.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }
}
