//! The CUDA scanner: many keys per pass over a GPU-resident database, on binary tensor cores.
//!
//! A pass answers a batch of Q keys in four phases on one workspace's stream:
//! 1. **h2d**: the keys, packed as fixed-size records, go up from a pinned buffer;
//! 2. **expand**: `dpf_expand_nodes` / `dpf_expand_leaves` evaluate every key over the whole
//!    domain (one ChaCha8 block per tree node) straight into the scan's selection layout;
//! 3. **scan**: one read of the bit-transposed database computes all Q answers as a GF(2) matrix
//!    product (`mma.m16n8k256 .b1 and.popc`), then `scan_unpack` turns parities into pages;
//!    keys pinned to epochs after the base then get the window's page changes merged in by
//!    `epoch_merge` (the **merge** phase, see [`epoch_window`]);
//! 4. **d2h**: the answers come back into a pinned buffer.
//!
//! Layouts and kernel choices are explained in `kernels/*.cu` and [`layout`]; the measured
//! numbers that chose them are in `docs/bench/gpu-scan.md`. Several threads may call
//! [`Scanner::pass`] at once: each takes its own workspace (own stream and buffers) from the
//! [`workspace::Pool`], so one batch's upload and expansion overlap another's scan.

mod answer_blocks;
mod db;
mod epoch_window;
mod error;
mod kernels;
pub mod layout;
mod rotation;
mod workspace;

pub use self::error::CudaError;
pub use self::rotation::CudaRotation;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use cudarc::driver::{
    result, CudaContext, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchArgs, LaunchConfig,
    PushKernelArg,
};
use pirq_db::PirDb;
use pirq_shared::dpf::DpfKey;
use pirq_shared::metrics::Phase;

use self::db::DeviceDb;
use self::epoch_window::{EpochState, Merge};
use self::kernels::Kernels;
use self::layout::{
    pack_key, SelLayout, Shape, KEY_MAX_LEVELS, KEY_WORDS, NODE_LEVELS_PER_LAUNCH,
    WGMMA_CTA_MTILES, WGMMA_THREADS,
};
use self::workspace::{workspace_bytes, Pool, Workspace};
use crate::epoch_window::DeltaWindow;
use crate::{check_keys, Answers, Geometry, PassCost, ScanError, Scanner};

pub use self::epoch_window::UpdateTimings;
pub use self::layout::ScanPlan;
pub use self::workspace::PassTimings;

/// How to set up a [`CudaScanner`].
#[derive(Clone, Debug)]
pub struct CudaConfig {
    /// CUDA device ordinal (`--gpu`).
    pub device: usize,
    /// Workspaces, each with its own stream (`--workspaces`).
    pub workspaces: usize,
    /// Largest batch one pass accepts (`--max-batch-keys`); sizes the workspaces.
    pub max_batch_keys: usize,
    /// Forces one scan plan for every batch (benches); `None` picks by batch size.
    pub plan: Option<ScanPlan>,
    /// Epochs answered exactly: the GPU base and up to this many minus one later epochs.
    pub epoch_window: usize,
}

impl Default for CudaConfig {
    fn default() -> CudaConfig {
        CudaConfig {
            device: 0,
            workspaces: crate::DEFAULT_WORKSPACES,
            max_batch_keys: crate::DEFAULT_MAX_BATCH_KEYS,
            plan: None,
            epoch_window: crate::DEFAULT_EPOCH_WINDOW,
        }
    }
}

/// A [`Scanner`] that keeps the database on one GPU.
pub struct CudaScanner {
    ctx: Arc<CudaContext>,
    /// The stream that loaded the database; also used for one-off measurements.
    main: Arc<CudaStream>,
    kernels: Kernels,
    db: DeviceDb,
    pool: Pool,
    config: CudaConfig,
    /// A device word that `read_all` may write.
    sink: CudaSlice<u32>,
    /// The epoch window: the base on the GPU is at its oldest epoch, later epochs are page
    /// steps resident on the device and merged into answers (see [`epoch_window`]). Passes hold it
    /// shared for their whole length, an update exclusively only to swap in the next state
    /// (and fold the oldest epoch into the base), so a pass never sees a half-moved base.
    epochs: RwLock<EpochState>,
    /// Serializes updates: one is prepared at a time, while passes go on.
    update_lock: Mutex<()>,
}

/// Device memory one scanner over pages `range` of a `total_pages`-page database of
/// `page_size`-byte pages takes with `config`: the transposed database, the workspaces and the
/// headroom every scanner keeps (what [`CudaScanner::new`] checks against the free memory). A
/// worker serving several tables adds theirs up before it loads any (issue 38).
pub fn device_bytes_needed(
    page_size: usize,
    total_pages: u64,
    range: std::ops::Range<u64>,
    config: &CudaConfig,
) -> u64 {
    let shape = Shape::shard(page_size, total_pages, range);
    shape.db_bytes() + scanner_reserve(&shape, config)
}

/// Device memory free now on GPU `device` (bytes).
pub fn free_device_memory(device: usize) -> Result<u64, CudaError> {
    // SAFETY: this only tries to open the shared library by name.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::Unsupported(
            "no CUDA driver library (libcuda.so) on this machine".into(),
        ));
    }
    let ctx = CudaContext::new(device)?;
    let (free, _total) = ctx.mem_get_info()?;
    Ok(free as u64)
}

/// Device memory a scanner keeps beside its database: its workspaces and 256 MiB of headroom.
fn scanner_reserve(shape: &Shape, config: &CudaConfig) -> u64 {
    let keys = config.max_batch_keys.clamp(1, 4096);
    workspace_bytes(shape, keys) * config.workspaces.max(1) as u64 + (256 << 20)
}

impl CudaScanner {
    /// The worker's constructor: loads pages `range` of `db` (all of them, or a shard's) onto
    /// the GPU of `config`, logging load progress.
    pub fn new(
        db: Arc<PirDb>,
        range: std::ops::Range<u64>,
        config: CudaConfig,
    ) -> Result<CudaScanner, CudaError> {
        let mut next_report = 0u64;
        CudaScanner::from_pirdb_range(&db, range, config, |done, total| {
            if done >= next_report || done == total {
                tracing::info!(
                    done_bytes = done,
                    total_bytes = total,
                    "loading database onto the GPU"
                );
                next_report = done + total / 10 + 1;
            }
        })
    }

    /// Loads `db` onto the GPU (progress as `(bytes_done, bytes_total)`) and sets up the pool.
    pub fn from_pirdb(
        db: &PirDb,
        config: CudaConfig,
        progress: impl FnMut(u64, u64),
    ) -> Result<CudaScanner, CudaError> {
        CudaScanner::from_pirdb_range(db, 0..db.num_pages(), config, progress)
    }

    /// Loads only pages `range` of `db` (a shard, `pirq_shared::shard`): answers are then the
    /// XOR of the selected pages of the range, and keys are expanded over the leaf-kernel nodes
    /// that cover it only.
    pub fn from_pirdb_range(
        db: &PirDb,
        range: std::ops::Range<u64>,
        config: CudaConfig,
        progress: impl FnMut(u64, u64),
    ) -> Result<CudaScanner, CudaError> {
        let ps = db.page_size();
        let first = db.first_page();
        if range.start < first || range.end > first + db.num_pages() {
            return Err(CudaError::Unsupported(format!(
                "{} holds database pages {:?}, not {range:?}",
                db.path().display(),
                first..first + db.num_pages()
            )));
        }
        let shape = Shape::shard(ps, db.total_pages(), range.clone());
        let mut scanner = CudaScanner::with_shape(shape, config)?;
        let pages =
            &db.pages()[(range.start - first) as usize * ps..(range.end - first) as usize * ps];
        scanner
            .db
            .load(&scanner.main, &scanner.kernels, pages, progress)?;
        scanner.epochs = scanner.new_epochs(db.header().epoch);
        Ok(scanner)
    }

    /// A scanner over `num_pages` synthetic pages (`pirq_shared::synthetic` under `seed`),
    /// generated on the device: benches and GPU tests need no file.
    pub fn synthetic(
        page_size: usize,
        num_pages: u64,
        seed: u64,
        config: CudaConfig,
    ) -> Result<CudaScanner, CudaError> {
        CudaScanner::synthetic_range(page_size, num_pages, 0..num_pages, seed, config)
    }

    /// Pages `range` of a `num_pages`-page synthetic database, generated on the device: a shard
    /// of a database larger than the host could hold as a file.
    pub fn synthetic_range(
        page_size: usize,
        num_pages: u64,
        range: std::ops::Range<u64>,
        seed: u64,
        config: CudaConfig,
    ) -> Result<CudaScanner, CudaError> {
        let shape = Shape::shard(page_size, num_pages, range);
        let mut scanner = CudaScanner::with_shape(shape, config)?;
        scanner
            .db
            .fill_synthetic(&scanner.main, &scanner.kernels, seed)?;
        Ok(scanner)
    }

    fn with_shape(shape: Shape, config: CudaConfig) -> Result<CudaScanner, CudaError> {
        // cudarc loads the libraries lazily and panics when one is missing: check first, so a
        // machine without a GPU driver gets an error (and `--backend auto` the CPU backend).
        // SAFETY: these only try to open the shared libraries by name.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(CudaError::Unsupported(
                "no CUDA driver library (libcuda.so) on this machine".into(),
            ));
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(CudaError::Unsupported(
                "no NVRTC library (libnvrtc.so) on this machine".into(),
            ));
        }
        if !shape.page_size.is_power_of_two() || !(256..=65536).contains(&shape.page_size) {
            return Err(CudaError::Unsupported(format!(
                "page size {}",
                shape.page_size
            )));
        }
        if shape.tree_depth() > KEY_MAX_LEVELS {
            return Err(CudaError::Unsupported(format!(
                "{} domain bits (at most 36)",
                shape.domain_bits
            )));
        }
        let config = CudaConfig {
            workspaces: config.workspaces.max(1),
            max_batch_keys: config.max_batch_keys.clamp(1, 4096),
            ..config
        };
        let ctx = CudaContext::new(config.device)?;
        // Streams are ordered explicitly (one per workspace); cudarc's per-buffer event tracking
        // would add cross-stream waits on the shared database and serialize the slots.
        // SAFETY: no allocation exists yet in this context.
        unsafe { ctx.disable_event_tracking() };
        // Block (not spin) in synchronize: worker threads share the CPU with the queue loop.
        ctx.set_blocking_synchronize()?;
        let kernels = Kernels::load(&ctx)?;
        if config.plan.is_some_and(|p| kernels.scan(&p).is_err()) {
            return Err(CudaError::Unsupported(format!(
                "scan plan {}",
                config.plan.unwrap()
            )));
        }
        let main = ctx.new_stream()?;
        let db = DeviceDb::alloc(&main, shape, scanner_reserve(&shape, &config))?;
        let slots = (0..config.workspaces)
            .map(|_| Workspace::new(&ctx, &shape, config.max_batch_keys))
            .collect::<Result<Vec<_>, _>>()?;
        let sink = main.alloc_zeros::<u32>(4)?;
        let epochs = RwLock::new(EpochState::new(DeltaWindow::new(
            shape.page_size,
            shape.num_pages,
            0,
            config.epoch_window,
        )));
        Ok(CudaScanner {
            ctx,
            main,
            kernels,
            db,
            pool: Pool::new(slots),
            config,
            sink,
            epochs,
            update_lock: Mutex::new(()),
        })
    }

    fn new_epochs(&self, base_epoch: u64) -> RwLock<EpochState> {
        let s = self.db.shape();
        let window = DeltaWindow::new(
            s.page_size,
            s.num_pages,
            base_epoch,
            self.config.epoch_window,
        );
        RwLock::new(EpochState::new(window))
    }

    /// GPU name, for logs and bench reports.
    pub fn device_name(&self) -> String {
        self.ctx.name().unwrap_or_else(|_| "unknown GPU".into())
    }

    /// Device bytes the database occupies (transposed, padded to 256-page blocks).
    pub fn db_bytes(&self) -> u64 {
        self.db.bytes()
    }

    /// Device memory in use on this GPU, all processes included (bytes).
    pub fn vram_used(&self) -> Result<u64, CudaError> {
        let (free, total) = self.ctx.mem_get_info()?;
        Ok((total - free) as u64)
    }

    pub fn workspaces(&self) -> usize {
        self.pool.size()
    }

    /// Whether the Hopper `wgmma` kernels are built for this GPU.
    pub fn has_wgmma(&self) -> bool {
        self.kernels.has_wgmma()
    }

    /// The plan a batch of `q` keys runs with.
    pub fn plan_for(&self, q: usize) -> ScanPlan {
        match self.config.plan {
            Some(plan) => plan,
            None if self.kernels.has_wgmma() => ScanPlan::for_keys_wgmma(q),
            None if self.kernels.has_binary_mma() => ScanPlan::for_keys(q),
            None => ScanPlan::Xor {
                blocks_per_task: layout::XOR_BLOCKS_PER_TASK,
            },
        }
    }

    /// One read of the whole database by the `read_all` kernel, in ms: the floor of a pass.
    pub fn time_read_all(&self) -> Result<f32, CudaError> {
        let sink = self.sink.device_ptr(&self.main).0;
        self.db.time_read_all(&self.main, &self.kernels, sink)
    }

    /// A pass that also reports its phase timings (for metrics and benches), every key at the
    /// base (oldest) epoch of the window.
    pub fn pass_timed(&self, keys: &[DpfKey]) -> Result<(Answers, PassTimings), ScanError> {
        self.pass_with_plan(keys, self.plan_for(keys.len()))
    }

    /// A timed pass with an explicit scan plan (benches compare plans, tests compare kernels),
    /// every key at the base (oldest) epoch of the window.
    pub fn pass_with_plan(
        &self,
        keys: &[DpfKey],
        plan: ScanPlan,
    ) -> Result<(Answers, PassTimings), ScanError> {
        // Shared, like every pass: an update's fold must not rewrite the base under this scan.
        let _state = self.epochs.read().unwrap_or_else(|e| e.into_inner());
        self.run_pass(keys, plan, None)
    }

    /// One pass of the base, then (with `merge`) the epoch merge of every key into its answer.
    fn run_pass(
        &self,
        keys: &[DpfKey],
        plan: ScanPlan,
        merge: Option<Merge<'_>>,
    ) -> Result<(Answers, PassTimings), ScanError> {
        let started = Instant::now();
        let shape = self.db.shape();
        check_keys(&self.geometry(), keys, self.config.max_batch_keys)?;
        self.kernels.scan(&plan)?;
        let mut ws = self.pool.take();
        let padded = plan.padded_keys(keys.len());
        if padded > ws.capacity_keys {
            return Err(ScanError::BatchTooLarge {
                got: keys.len(),
                max: self.config.max_batch_keys,
            });
        }
        let mut answers = Vec::new();
        if !keys.is_empty() {
            let run = |ws: &mut Workspace| -> Result<Vec<u8>, CudaError> {
                self.upload_keys(ws, keys)?;
                self.expand(ws, keys.len(), padded, plan.sel_layout())?;
                self.scan(ws, &plan, keys.len(), padded)?;
                let limits = match &merge {
                    Some(m) => Some(self.merge(ws, m, keys.len(), padded, plan.sel_layout())?),
                    None => None,
                };
                ws.marks.end(Phase::Merge, &ws.stream)?;
                let answers = self.download(ws, keys.len())?;
                drop(limits);
                Ok(answers)
            };
            answers = match run(&mut ws) {
                Ok(a) => a,
                Err(e) => {
                    // Nothing this pass launched may outlive it (the caller's lock guards the
                    // merge table and the database).
                    let _ = ws.stream.synchronize();
                    return Err(e.into());
                }
            };
        }
        let mut timings = if keys.is_empty() {
            PassTimings::default()
        } else {
            ws.timings(keys.len())?
        };
        if merge.is_none() {
            timings.merge = std::time::Duration::ZERO;
        }
        timings.wall = started.elapsed();
        Ok((Answers::new(shape.page_size, answers), timings))
    }

    /// The selection bits the GPU expands for `keys`, in `eval_full`'s bitmap layout: the CPU
    /// twin's parity test reads them through this.
    pub fn expand_bitmaps(&self, keys: &[DpfKey]) -> Result<Vec<Vec<u64>>, ScanError> {
        let shape = self.db.shape();
        check_keys(&self.geometry(), keys, self.config.max_batch_keys)?;
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let plan = self.plan_for(keys.len());
        let padded = plan.padded_keys(keys.len());
        let mut ws = self.pool.take();
        self.upload_keys(&mut ws, keys)?;
        self.expand(&ws, keys.len(), padded, plan.sel_layout())?;
        let mut sel = vec![0u32; shape.sel_words(padded)];
        // SAFETY: `sel` is as long as the expanded words; the copy completes before it is read.
        unsafe { result::memcpy_dtoh_async(&mut sel[..], ws.sel.ptr, ws.stream.cu_stream()) }?;
        ws.stream.synchronize()?;
        Ok((0..keys.len())
            .map(|q| layout::sel_to_bitmap(&sel, plan.sel_layout(), padded, q, shape.domain_bits))
            .collect())
    }

    fn upload_keys(&self, ws: &mut Workspace, keys: &[DpfKey]) -> Result<(), CudaError> {
        let stream = ws.stream.clone();
        let host = ws.keys_host.as_mut_slice()?;
        for (key, rec) in keys.iter().zip(host.chunks_exact_mut(KEY_WORDS)) {
            pack_key(key, rec);
        }
        ws.marks.start(&stream)?;
        let len = keys.len() * KEY_WORDS;
        // SAFETY: pinned and alive until the pass synchronizes in `download`.
        unsafe {
            result::memcpy_htod_async(
                ws.keys.ptr,
                &ws.keys_host.as_slice()?[..len],
                stream.cu_stream(),
            )
        }?;
        ws.marks.end(Phase::H2d, &stream)?;
        Ok(())
    }

    /// Top levels with `dpf_expand_nodes` (<= 10 levels a launch, ping-pong buffers), then the
    /// leaf kernel writes the selection buffer for `padded` key columns in `layout`.
    fn expand(
        &self,
        ws: &Workspace,
        q: usize,
        padded: usize,
        layout: SelLayout,
    ) -> Result<(), CudaError> {
        let groups = padded / 16;
        self.expand_into(ws, ws.keys.ptr, q, groups, layout, 0, groups)?;
        ws.marks.end(Phase::Expand, &ws.stream)?;
        Ok(())
    }

    /// Expands the `q` key records at device address `keys` into key columns `16 * np_first ..
    /// 16 * (np_first + groups)` of a selection buffer `np_stride` 16-key groups wide (columns
    /// past `q` get zero bits). A pass fills columns 0.. of a buffer as wide as its batch; the
    /// rotating scan puts a joining group beside the keys in flight.
    #[allow(clippy::too_many_arguments)]
    fn expand_into(
        &self,
        ws: &Workspace,
        keys: u64,
        q: usize,
        groups: usize,
        layout: SelLayout,
        np_first: usize,
        np_stride: usize,
    ) -> Result<(), CudaError> {
        let shape = self.db.shape();
        let top = shape.top_levels();
        let stream = &ws.stream;
        let (mut src_seed, mut src_t) = (0u64, 0u64);
        let mut level = 0u32;
        let mut side = 0;
        while level < top {
            let step = (top - level).min(NODE_LEVELS_PER_LAUNCH);
            let (dst_seed, dst_t) = (ws.mid_seed[side].ptr, ws.mid_t[side].ptr);
            let cfg = LaunchConfig {
                grid_dim: (1 << level, q as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(&self.kernels.expand_nodes);
            launch
                .arg(&keys)
                .arg(&src_seed)
                .arg(&src_t)
                .arg(&dst_seed)
                .arg(&dst_t)
                .arg(&level)
                .arg(&step);
            // SAFETY: arguments match `dpf_expand_nodes`; buffers hold q << top nodes.
            unsafe { launch.launch(cfg) }?;
            (src_seed, src_t) = (dst_seed, dst_t);
            side ^= 1;
            level += step;
        }
        let (np_total, np_first) = (np_stride as u32, np_first as u32);
        let (q32, depth) = (q as u32, shape.tree_depth());
        let wg_layout = u32::from(layout == SelLayout::Wgmma);
        // Only the nodes above this GPU's pages (all of them unsharded): the kernel indexes its
        // input nodes and output blocks from its grid position, so the inputs start at the
        // first node and the output at the selection buffer's start.
        let nodes = shape.leaf_nodes();
        if src_seed != 0 {
            src_seed += nodes.start * 16;
            src_t += nodes.start;
        }
        let cfg = LaunchConfig {
            grid_dim: ((nodes.end - nodes.start) as u32, groups as u32, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.kernels.expand_leaves);
        launch
            .arg(&keys)
            .arg(&q32)
            .arg(&src_seed)
            .arg(&src_t)
            .arg(&depth)
            .arg(&ws.sel.ptr)
            .arg(&np_total)
            .arg(&wg_layout)
            .arg(&np_first);
        // SAFETY: arguments match `dpf_expand_leaves`; sel holds sel_blocks x np_stride * 16
        // columns, and np_first + groups <= np_stride.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    fn scan(
        &self,
        ws: &Workspace,
        plan: &ScanPlan,
        q: usize,
        padded: usize,
    ) -> Result<(), CudaError> {
        let blocks = 0..self.db.shape().scan_blocks();
        self.scan_blocks(ws, plan, q, padded, padded / 16, blocks, false)?;
        ws.marks.end(Phase::Scan, &ws.stream)?;
        Ok(())
    }

    /// The scan of database blocks `blocks` (256 pages each) for key columns `0..padded` of a
    /// selection buffer `np_stride` 16-key groups wide. Without `accumulate` the answers are
    /// written (a pass: all blocks); with it they are XORed into the answer buffer, where the
    /// rotating scan keeps each key's sum across the segments of its turn. The kernels see a
    /// segment as a smaller database: both operands' pointers start at its first block.
    #[allow(clippy::too_many_arguments)]
    fn scan_blocks(
        &self,
        ws: &Workspace,
        plan: &ScanPlan,
        q: usize,
        padded: usize,
        np_stride: usize,
        blocks: std::ops::Range<u64>,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let scan = BlockScan::new(self, ws, plan, q, np_stride, blocks, accumulate)?;
        let ntiles = (padded / 8) as u32;
        match *plan {
            ScanPlan::Mma {
                mt,
                nt,
                wn,
                warps,
                blocks_per_task,
                ..
            } => {
                // padded is a multiple of nt * 8 * wn.
                let rows = (warps / wn) * mt;
                let (x, y) = (ntiles / (nt * wn), scan.mtiles.div_ceil(rows));
                let blocks_per_task =
                    scan.split_k(warps * 32, plan.dynamic_smem(), x * y, blocks_per_task)?;
                let grid = (x, y, scan.nblocks.div_ceil(blocks_per_task));
                scan.tensor_core(grid, warps * 32, blocks_per_task)
            }
            ScanPlan::Wgmma {
                n, blocks_per_task, ..
            } => {
                // padded is a multiple of n.
                let (x, y) = (padded as u32 / n, scan.mtiles.div_ceil(WGMMA_CTA_MTILES));
                // Its CTAs fill and drain an 8-stage ring: the plan's task count, evened out.
                let blocks_per_task = task_blocks(blocks_per_task, scan.nblocks, 1);
                let grid = (x, y, scan.nblocks.div_ceil(blocks_per_task));
                scan.tensor_core(grid, WGMMA_THREADS, blocks_per_task)
            }
            ScanPlan::Xor { blocks_per_task } => scan.xor(blocks_per_task),
        }
    }

    /// `scan_unpack`: the parities in `partial` (mma C layout) become the answer pages.
    fn unpack(
        &self,
        ws: &Workspace,
        q: u32,
        wpp: u32,
        np_total: u32,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        let accumulate = u32::from(accumulate);
        let words = q as u64 * wpp as u64;
        let cfg = LaunchConfig {
            grid_dim: (words.div_ceil(256) as u32, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = ws.stream.launch_builder(&self.kernels.unpack);
        launch
            .arg(&ws.partial.ptr)
            .arg(&ws.answers.ptr)
            .arg(&q)
            .arg(&wpp)
            .arg(&np_total)
            .arg(&accumulate);
        // SAFETY: arguments match `scan_unpack`; answers hold q pages.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }

    /// Copies the answers back and out. The device words are little-endian u32, so their bytes
    /// are the page bytes: one DMA into pinned memory, one memcpy into the returned Vec (a
    /// per-word conversion here cost ~0.6 ms per MiB, 11 ms a pass with 64 KiB pages).
    fn download(&self, ws: &mut Workspace, q: usize) -> Result<Vec<u8>, CudaError> {
        let stream = ws.stream.clone();
        let len = q * self.db.shape().page_size;
        let src = ws.answers.ptr;
        {
            let host = ws.answers_host.as_mut_slice()?;
            // SAFETY: pinned; the stream is synchronized below before the bytes are read.
            unsafe { result::memcpy_dtoh_async(&mut host[..len], src, stream.cu_stream()) }?;
        }
        ws.marks.end(Phase::D2h, &stream)?;
        stream.synchronize()?;
        Ok(ws.answers_host.as_slice()?[..len].to_vec())
    }
}

use pirq_shared::update::EpochUpdate;
use pirq_shared::wire::EpochRange;

impl Scanner for CudaScanner {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn page_range(&self) -> std::ops::Range<u64> {
        self.db.shape().page_range()
    }

    fn geometry(&self) -> Geometry {
        let s = self.db.shape();
        Geometry {
            num_pages: s.total_pages,
            page_size: s.page_size,
            domain_bits: s.domain_bits,
        }
    }

    fn max_batch_keys(&self) -> usize {
        self.config.max_batch_keys
    }

    fn epoch_window(&self) -> EpochRange {
        self.window_range()
    }

    fn apply_epoch(&self, update: &EpochUpdate) -> Result<(), ScanError> {
        self.apply_update(update).map(|_| ())
    }

    fn rotation(self: Arc<Self>) -> Result<Box<dyn crate::rotation::Rotation>, ScanError> {
        Ok(Box::new(CudaRotation::measured(self)?))
    }

    /// A one-key pass and a full pass (`max_batch_keys` random keys), each the median of three
    /// after a warm-up: a fraction of a second at 64 GiB.
    fn measure_pass_cost(&self) -> Option<PassCost> {
        let n = self.db.shape().domain_bits;
        let mut rng = rand::rng();
        let full_keys = self.config.max_batch_keys;
        let keys: Vec<DpfKey> = (0..full_keys)
            .map(|i| {
                let alpha = i as u64 % self.db.shape().total_pages.max(1);
                pirq_shared::dpf::generate(n, alpha, &mut rng).map(|(k, _)| k)
            })
            .collect::<Result<_, _>>()
            .ok()?;
        let median = |keys: &[DpfKey]| -> Option<PassTimings> {
            self.pass_timed(keys).ok()?;
            let mut runs = (0..3)
                .map(|_| self.pass_timed(keys).map(|(_, t)| t).ok())
                .collect::<Option<Vec<_>>>()?;
            runs.sort_by_key(|t| t.wall);
            Some(runs[1])
        };
        let one = median(&keys[..1])?;
        let full = median(&keys)?;
        Some(PassCost {
            one_key: one.wall,
            full: full.wall,
            full_keys,
            full_scan: full.scan,
        })
    }

    fn pass_at(&self, keys: &[DpfKey], epochs: &[u64]) -> Result<Answers, ScanError> {
        let (answers, t) = self.pass_at_timed(keys, epochs)?;
        if t.keys > 0 {
            // Merge is zero when no key needed one, as on the CPU backend.
            for phase in Phase::ALL {
                pirq_shared::metrics::record_phase(phase, t.phase(phase));
            }
        }
        if let Ok((free, total)) = self.ctx.mem_get_info() {
            pirq_shared::metrics::set_vram((total - free) as u64, total as u64);
        }
        Ok(answers)
    }
}

/// One scan of a range of database blocks with its operands placed: what the launch of every
/// scan kernel takes, whichever the plan ([`CudaScanner::scan_blocks`] picks the grid).
struct BlockScan<'a> {
    scanner: &'a CudaScanner,
    ws: &'a Workspace,
    plan: &'a ScanPlan,
    func: &'a CudaFunction,
    /// Layout A from the range's first block: block b's tiles at b * mtiles * 512 bytes.
    db: u64,
    /// Layout B from the range's first block: block b's chunks at b * np_total * 512 bytes.
    sel: u64,
    mtiles: u32,
    nblocks: u32,
    np_total: u32,
    q: usize,
    words_per_page: u32,
    page_size: usize,
    accumulate: bool,
}

impl<'a> BlockScan<'a> {
    fn new(
        scanner: &'a CudaScanner,
        ws: &'a Workspace,
        plan: &'a ScanPlan,
        q: usize,
        np_stride: usize,
        blocks: std::ops::Range<u64>,
        accumulate: bool,
    ) -> Result<BlockScan<'a>, CudaError> {
        let shape = scanner.db.shape();
        let (mtiles, np_total) = (shape.mtiles() as u32, np_stride as u32);
        Ok(BlockScan {
            scanner,
            ws,
            plan,
            func: scanner.kernels.scan(plan)?,
            db: scanner.db.ptr() + blocks.start * mtiles as u64 * 512,
            sel: sel_ptr(ws, &shape, np_stride * 16) + blocks.start * np_total as u64 * 512,
            mtiles,
            nblocks: (blocks.end - blocks.start) as u32,
            np_total,
            q,
            words_per_page: shape.words_per_page() as u32,
            page_size: shape.page_size,
            accumulate,
        })
    }

    /// Blocks per split-K task for a grid whose z-slices have `slice` CTAs each (of `threads`
    /// threads and `smem` bytes of dynamic shared memory): enough tasks to fill the GPU
    /// [`MIN_WAVES`] times over, the plan's `plan_blocks` otherwise.
    fn split_k(
        &self,
        threads: u32,
        smem: u32,
        slice: u32,
        plan_blocks: u32,
    ) -> Result<u32, CudaError> {
        let resident = self
            .func
            .occupancy_max_active_blocks_per_multiprocessor(threads, smem as usize, None)?
            .max(1)
            * self.scanner.kernels.sms;
        Ok(task_blocks(
            plan_blocks,
            self.nblocks,
            (MIN_WAVES * resident).div_ceil(slice.max(1)),
        ))
    }

    /// A launch of the plan's kernel with the arguments every scan kernel starts with: the two
    /// operands, `out` (the partials or the answers), and the tile, block and chunk counts.
    fn launch<'b>(&'b self, out: &'b u64) -> LaunchArgs<'b> {
        let mut launch = self.ws.stream.launch_builder(self.func);
        launch
            .arg(&self.db)
            .arg(&self.sel)
            .arg(out)
            .arg(&self.mtiles)
            .arg(&self.nblocks)
            .arg(&self.np_total);
        launch
    }

    /// The tensor-core kernels (`scan_mma_*`, `scan_wgmma_*`) take the same arguments and
    /// accumulate parities into `partial`, cleared first; `scan_unpack` turns them into pages.
    fn tensor_core(
        &self,
        grid_dim: (u32, u32, u32),
        threads: u32,
        blocks_per_task: u32,
    ) -> Result<(), CudaError> {
        let ws = self.ws;
        // SAFETY: the partial buffer holds mtiles x (np_total * 2) x 4 words.
        unsafe {
            result::memset_d8_async(
                ws.partial.ptr,
                0,
                self.mtiles as usize * self.np_total as usize * 2 * 16,
                ws.stream.cu_stream(),
            )
        }?;
        let cfg = LaunchConfig {
            grid_dim,
            block_dim: (threads, 1, 1),
            shared_mem_bytes: self.plan.dynamic_smem(),
        };
        let mut launch = self.launch(&ws.partial.ptr);
        launch.arg(&blocks_per_task);
        // SAFETY: arguments match `scan_mma_*` and `scan_wgmma_*`; the grids the caller picks
        // stay inside the buffers (padded is a multiple of the plan's key group).
        unsafe { launch.launch(cfg) }?;
        self.scanner.unpack(
            ws,
            self.q as u32,
            self.words_per_page,
            self.np_total,
            self.accumulate,
        )
    }

    /// `scan_xor_m2_k8`: XORs the selected pages straight into the answers (cleared for a
    /// pass, kept for a rotation).
    fn xor(&self, plan_blocks: u32) -> Result<(), CudaError> {
        let ws = self.ws;
        let (warps, mt, kq) = (8u32, 2u32, 8u32);
        let q32 = self.q as u32;
        let (x, y) = (q32.div_ceil(kq), self.mtiles.div_ceil(warps * mt));
        let blocks_per_task = self.split_k(warps * 32, 0, x * y, plan_blocks)?;
        if !self.accumulate {
            // SAFETY: answers hold q pages.
            unsafe {
                result::memset_d8_async(
                    ws.answers.ptr,
                    0,
                    self.q * self.page_size,
                    ws.stream.cu_stream(),
                )
            }?;
        }
        let cfg = LaunchConfig {
            grid_dim: (x, y, self.nblocks.div_ceil(blocks_per_task)),
            block_dim: (warps * 32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = self.launch(&ws.answers.ptr);
        launch
            .arg(&q32)
            .arg(&self.words_per_page)
            .arg(&blocks_per_task);
        // SAFETY: arguments match `scan_xor_m2_k8`.
        unsafe { launch.launch(cfg) }?;
        Ok(())
    }
}

/// Device address of the selection bits of this GPU's first block (the expansion wrote the
/// blocks of the leaf nodes covering its pages, the first node's first block at the buffer's
/// start): scan and merge read from here, with page indices relative to the GPU's first page.
fn sel_ptr(ws: &Workspace, shape: &Shape, padded: usize) -> u64 {
    ws.sel.ptr + shape.sel_first_block() * padded as u64 * 32
}

/// Waves of resident CTAs an `mma.sync` or CUDA-core scan launch should have at least: with
/// fewer, the last wave's idle SMs are a large share of the launch.
const MIN_WAVES: u32 = 16;

/// Blocks per split-K task for a scan of `nblocks` blocks: the plan's task size, or smaller
/// tasks where that gives fewer than `min_tasks` z-slices, spread evenly. A rotating segment is
/// a fifteenth of the range: with the pass's task size a one-key `mma.sync` segment had a
/// fraction of a wave of CTAs and a last task much shorter than the others (H100, 64 GiB, one
/// machine, `pirq-gpu-bench --rotate-qs`: a one-key turn of 28.2–28.8 ms against a 22.9 ms
/// pass; 25.6 ms with [`MIN_WAVES`] = 16, 26.1 with 4). The `wgmma` kernel instead lost with
/// more tasks (256 keys: 35.1–37.3 ms a turn with the plan's 3 tasks a segment, 39.0 with a
/// pass's 32), so it keeps its plan's count (`min_tasks` = 1), evened out. A whole pass keeps
/// its task size.
pub(crate) fn task_blocks(plan_blocks: u32, nblocks: u32, min_tasks: u32) -> u32 {
    let tasks = nblocks
        .div_ceil(plan_blocks.max(1))
        .max(min_tasks)
        .clamp(1, nblocks.max(1));
    nblocks.div_ceil(tasks).max(1)
}

#[cfg(test)]
mod tests {
    use super::task_blocks;

    #[test]
    fn a_segment_gets_enough_even_tasks() {
        // A whole pass keeps the plan's task size.
        assert_eq!(task_blocks(1024, 65_536, 15), 1024);
        // A fifteenth of it, needing 15 z-slices for its waves: 15 even tasks.
        let per = task_blocks(1024, 4369, 15);
        assert_eq!((per, 4369u32.div_ceil(per)), (292, 15));
        // Enough slices already: the plan's count, evened out (3 of 1,457, not 2,048 + 273).
        assert_eq!(task_blocks(2048, 4369, 3), 1457);
        // Fewer blocks than tasks: one block each.
        assert_eq!(task_blocks(2048, 3, 64), 1);
        // A range not a multiple of the task size: evenly split, never longer than the plan's.
        assert_eq!(task_blocks(1024, 1500, 1), 750);
        assert_eq!(task_blocks(0, 10, 0), 1);
    }
}
