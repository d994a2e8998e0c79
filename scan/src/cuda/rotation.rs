//! The CUDA backend's rotating scan ([`crate::rotation`]).
//!
//! The rotation keeps one workspace of the pool for its whole life. Its key columns (the
//! selection buffer's, the answer buffer's) are handed out one key at a time: a joining group of
//! keys gets the lowest free run of columns and its records are packed into the same place of
//! the pinned key buffer. The expansion writes 16-key column groups whole (`dpf_expand_leaves`
//! with `np_first`), so the groups the new keys touch are expanded again from every record in
//! them: the keys in flight there get the same bits back (a key's expansion depends on its record
//! alone), and free columns get bits no answer reads. Packing keys, not 16-key groups, matters
//! because most jobs are one key: with a group each, 256 keys of capacity held only 16 jobs
//! (measured on an H100: 272 queries/s at any load).
//!
//! Joins are settled at the next step, all at once ([`CudaRotation::settle_joins`]): the records
//! of every touched 16-key group go up and each run of touched groups is expanded in one launch
//! sequence, and the new keys' answer pages are zeroed. Expanding at each join instead cost a
//! whole 16-key group's expansion per job, and most jobs are one key: at 512 clients ~37 one-key
//! joins a segment, ~16x the expansion work of a pass for the same keys. A step then, on the
//! workspace's stream, after the joins:
//! 1. scans the segment's 256-page blocks for columns `0..hi` (the highest column in use,
//!    padded for the plan) — the kernels see the segment as a smaller database, both operands'
//!    pointers moved to its first block; `partial` is cleared first and `scan_unpack`
//!    XORs the parities into the answer pages (`accumulate`), which persist across segments;
//! 2. merges the epoch table's entries of the segment's pages (`epoch_merge` with a page range)
//!    with the table of the base the segment was just read from, under the same read lock;
//! 3. copies the answers of the groups whose turn ended to the host, once.
//!
//! **Steps are queued one ahead.** A call to `step` launches its step on the stream behind the
//! one still running, then waits for that one and hands back the groups it finished: the device
//! always has the next segment queued, and the host's work between two segments (waking up,
//! handing the answers over, taking and packing the next joins) happens while the device scans.
//! Waiting for each step before launching the next left the GPU idle 0.42 ms a step at 2,048
//! clients on an H200, 13 % of a turn (docs/bench/host-path.md). So a group's answers come
//! back one call after the step that finished them ([`Rotation::steps_ahead`]). A call returns
//! as soon as it has them, and names when the next call is best made
//! ([`Rotation::launch_at`]): [`LAUNCH_AHEAD`] before the step it queued is expected to end
//! (the last step's device time). A caller that gathers its joins until then has them enter
//! the next step, as when every step was waited for; only those of the last stretch enter one
//! step later. The epoch state is
//! read under its lock while a step is launched; an update that takes the write lock waits for
//! the device work in flight before it changes anything the device reads
//! ([`CudaScanner::apply_update`](super::CudaScanner)), so a segment never runs beside a fold.
//!
//! The answers are copied into pinned blocks of the rotation's answer pool
//! ([`answer_pool`](crate::answer_pool)) and handed to the worker as slices of them: the bytes
//! the device wrote are the bytes the worker's Redis command reads, with no copy on the host
//! between (the block goes back to the pool when the worker drops the answers). Groups the pool
//! cannot take (dry, or a group larger than a block) are copied into the workspace's pinned
//! buffer and out of it into a vector, as before the pool; `pirq_worker_answer_pages_total`
//! counts both ways.
//!
//! The selection layout follows the load, with the passes' rule ([`ScanPlan::for_keys_wgmma`]):
//! on Hopper, `wgmma` while more than [`MMA_MAX_KEYS`] key columns are in use, and `mma.sync`
//! below, where a pass of few keys reads HBM at its floor and `wgmma` at N = 128 does not (a
//! lone key's 15-segment turn measured 24.5 ms on `wgmma` against a 22.7 ms `mma.sync` pass,
//! H100, 64 GiB). The two layouts arrange the same bits differently, so a switch re-expands
//! every key in flight at the next step (their answers so far are pages, which do not depend on
//! the layout); switching down waits for [`MMA_BACK_KEYS`] columns, so that a load hovering
//! around the threshold does not pay that expansion at every step. Elsewhere every segment runs
//! on `mma.sync` or the CUDA-core kernel, like passes.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use cudarc::driver::result;
use pirq_shared::dpf::DpfKey;
use pirq_shared::metrics::{record_answer_pages, record_phase, Phase};

use super::answer_blocks::{answer_pool, PinnedBlock};
use super::error::CudaError;
use super::layout::{pack_key, ScanPlan, SelLayout, BLOCK_PAGES, KEY_WORDS};
use super::workspace::{Marks, Workspace};
use super::CudaScanner;
use crate::answer_pool::{BlockPool, Landing, Place, PoolStats};
use crate::rotation::{self, Groups, Rotation, Step, Ticket};
use crate::{check_keys, Answers, ScanError, Scanner};

/// Keys per column group: the expansion writes 16-key n-tile pairs whole.
const GROUP_KEYS: usize = 16;

/// Key columns in use up to which a Hopper rotation scans with `mma.sync` (the passes' threshold
/// in [`ScanPlan::for_keys_wgmma`]).
pub const MMA_MAX_KEYS: usize = 64;

/// Key columns in use at or below which a rotation on `wgmma` goes back to `mma.sync`.
pub const MMA_BACK_KEYS: usize = 32;

/// How long before the step in flight is expected to end the next one is best launched
/// ([`Rotation::launch_at`]), so that the caller's joins and the launch happen while it still
/// runs. Joins made in this last stretch of a step enter one step later (the price of the
/// queue, paid only by them); the host needed 0.42 ms between two steps at 2,048 clients on an
/// H200 (docs/bench/host-path.md).
const LAUNCH_AHEAD: Duration = Duration::from_micros(600);

/// A [`Rotation`] over a [`CudaScanner`] (made by [`Scanner::rotation`]).
pub struct CudaRotation {
    scanner: Arc<CudaScanner>,
    /// The workspace taken from the pool; given back on drop.
    ws: Option<Workspace>,
    layout: SelLayout,
    /// The turn's segments, in 256-page blocks of this GPU's range.
    segments: Vec<Range<u64>>,
    /// The group holding each key column.
    columns: Vec<Option<Ticket>>,
    groups: Groups<Cols>,
    /// Key columns joined since the last step: packed on the host, not yet on the device.
    joined: Vec<Range<usize>>,
    /// Pinned blocks the finished answers are copied into and lent out from.
    answer_pool: BlockPool<PinnedBlock>,
    /// The step launched by the last call, still on the device (see the module's doc).
    launched: Option<Launched>,
    /// Timing marks not in use: the workspace records a step's marks in its own set, which
    /// goes with the step while it is in flight and is replaced from here.
    spare_marks: Vec<Marks>,
    /// Groups a failed step dropped, for [`Rotation::clear`] to name.
    dropped: Vec<Ticket>,
    /// Device time of the last step collected: how long the next one is expected to take.
    last_step: Duration,
    /// When the next step is best launched ([`Rotation::launch_at`]).
    launch_at: Option<Instant>,
}

/// A step's finished groups, in column order, and where their answers land.
struct Landed {
    tickets: Vec<Ticket>,
    landing: Landing<PinnedBlock>,
}

/// A step on the device, what collecting it needs.
struct Launched {
    /// The step's timing marks; the last one is its end.
    marks: Marks,
    /// The groups whose turn it ends (already out of [`Groups`], their columns free: later
    /// device work reusing them is ordered after this step's copies on the stream).
    done: Vec<Group>,
    /// Where their answers land: held until the step has completed (on failure, until
    /// [`Rotation::clear`] has synchronized), so that a block never goes back to the pool while
    /// the device may still write into it.
    landed: Landed,
    /// The epoch merge's limits, read by the device until the step completes.
    _limits: Option<cudarc::driver::CudaSlice<u32>>,
    /// Keys the step scans.
    keys: usize,
    /// Set when the step closed a turn: the turn's keys.
    turn_keys: Option<usize>,
    /// When its device work was queued.
    at: Instant,
}

/// The CUDA backend's part of a group ([`rotation::Group`]): where its keys' columns start.
#[derive(Debug)]
struct Cols {
    /// First key column.
    first: usize,
}

type Group = rotation::Group<Cols>;

impl CudaRotation {
    /// A rotation of `segments` segments (fewer when the range has fewer 256-page blocks).
    /// Takes a workspace out of the scanner's pool (waiting for one) until dropped.
    pub fn new(scanner: Arc<CudaScanner>, segments: usize) -> CudaRotation {
        let blocks = scanner.db.shape().scan_blocks();
        let layout = match scanner.config.plan {
            Some(plan) => plan.sel_layout(),
            None => SelLayout::Mma,
        };
        let ws = scanner.pool.take_owned();
        let columns = vec![None; ws.capacity_keys / GROUP_KEYS * GROUP_KEYS];
        let answer_pool = answer_pool(
            &scanner.ctx,
            scanner.config.max_batch_keys,
            scanner.db.shape().page_size,
        );
        let segments = rotation::split(blocks, segments, 1);
        CudaRotation {
            groups: Groups::new(segments.len()),
            segments,
            ws: Some(ws),
            layout,
            scanner,
            columns,
            joined: Vec::new(),
            answer_pool,
            launched: None,
            spare_marks: Vec::new(),
            dropped: Vec::new(),
            last_step: Duration::ZERO,
            launch_at: None,
        }
    }

    /// What the answer pool did so far (for tests: blocks lent, reused, answers copied).
    pub fn answer_blocks(&self) -> PoolStats {
        self.answer_pool.stats()
    }

    /// The selection layout the next step scans with.
    pub fn sel_layout(&self) -> SelLayout {
        self.layout
    }

    /// Segments from the measured read of the whole database (`read_all`, the floor of a
    /// pass): about [`rotation::TARGET_SEGMENT`] each, at least [`rotation::MIN_SEGMENTS`].
    pub fn measured(scanner: Arc<CudaScanner>) -> Result<CudaRotation, CudaError> {
        scanner.time_read_all()?;
        let ms = scanner.time_read_all()?;
        let turn = Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3);
        let segments = rotation::segments_for(turn, scanner.db.shape().scan_blocks());
        Ok(CudaRotation::new(scanner, segments))
    }

    /// The turn's segments, in pages of this GPU's range.
    pub fn segment_pages(&self) -> Vec<Range<u64>> {
        self.segments
            .iter()
            .map(|b| b.start * BLOCK_PAGES..b.end * BLOCK_PAGES)
            .collect()
    }

    fn ws(&self) -> &Workspace {
        self.ws.as_ref().expect("the workspace is held until drop")
    }

    /// 16-key groups wide the selection and answer buffers are.
    fn stride(&self) -> usize {
        self.columns.len() / GROUP_KEYS
    }

    /// The plan for key columns `0..q` in this rotation's layout.
    fn plan(&self, q: usize) -> ScanPlan {
        match self.scanner.config.plan {
            Some(plan) => plan,
            None if self.layout == SelLayout::Wgmma => ScanPlan::wgmma_for(q),
            None if self.scanner.kernels.has_binary_mma() => ScanPlan::for_keys(q),
            None => self.scanner.plan_for(q),
        }
    }

    /// The layout for `hi` key columns in use, from the current one: see the module's doc. A
    /// plan fixed in the configuration fixes the layout.
    fn layout_for(&self, hi: usize) -> SelLayout {
        if self.scanner.config.plan.is_some() || !self.scanner.kernels.has_wgmma() {
            return self.layout;
        }
        match self.layout {
            SelLayout::Mma if hi > MMA_MAX_KEYS => SelLayout::Wgmma,
            SelLayout::Wgmma if hi <= MMA_BACK_KEYS => SelLayout::Mma,
            current => current,
        }
    }

    /// The highest key column in use, plus one.
    fn columns_in_use(&self) -> usize {
        self.groups
            .iter()
            .map(|g| g.own.first + g.keys)
            .max()
            .unwrap_or(0)
    }

    /// The first key column of the lowest run of `n` free columns.
    fn free_run(&self, n: usize) -> Option<usize> {
        let mut run = 0;
        for (i, c) in self.columns.iter().enumerate() {
            run = if c.is_none() { run + 1 } else { 0 };
            if run == n {
                return Some(i + 1 - n);
            }
        }
        None
    }

    fn release(&mut self, g: &Group) {
        for c in &mut self.columns[g.own.first..g.own.first + g.keys] {
            *c = None;
        }
    }

    /// Packs a joining group's key records into its columns of the pinned key buffer. No
    /// device work: the records go up at the next step with every other join's. The step in
    /// flight may be copying the 16-key groups of its own joins from this buffer meanwhile; a
    /// column packed now was free when that step was launched, so whatever that copy reads of
    /// it expands into a free column's bits, which no answer reads, and the column's group is
    /// uploaded and expanded again at its own step.
    fn pack_at(&mut self, keys: &[DpfKey], first: usize) -> Result<(), CudaError> {
        let ws = self.ws.as_mut().expect("the workspace is held until drop");
        let host = ws.keys_host.as_mut_slice()?;
        let records = &mut host[first * KEY_WORDS..(first + keys.len()) * KEY_WORDS];
        for (key, rec) in keys.iter().zip(records.chunks_exact_mut(KEY_WORDS)) {
            pack_key(key, rec);
        }
        Ok(())
    }

    /// Puts the joins since the last step on the device: the records of every 16-key group they
    /// touch go up, each run of adjacent touched groups is expanded in one launch sequence, and
    /// the new keys' answer pages are zeroed (adjacent ranges in one memset). With `relayout`
    /// (the layout just changed) every group in use is expanded again the same way.
    /// Asynchronous, on the workspace's stream, ahead of the step's scan.
    fn settle_joins(&mut self, relayout: bool) -> Result<(), CudaError> {
        if self.joined.is_empty() && !relayout {
            return Ok(());
        }
        let ps = self.scanner.db.shape().page_size;
        let (stride, layout) = (self.stride(), self.layout);
        let joined = runs(std::mem::take(&mut self.joined));
        let expanded: Vec<Range<usize>> = if relayout {
            self.groups
                .iter()
                .map(|g| g.own.first..g.own.first + g.keys)
                .collect()
        } else {
            joined.clone()
        };
        let groups = runs(
            expanded
                .iter()
                .map(|c| c.start / GROUP_KEYS..c.end.div_ceil(GROUP_KEYS))
                .collect(),
        );
        let scanner = self.scanner.clone();
        let ws = self.ws.as_mut().expect("the workspace is held until drop");
        let stream = ws.stream.clone();
        for run in groups {
            let records = run.start * GROUP_KEYS * KEY_WORDS..run.end * GROUP_KEYS * KEY_WORDS;
            let device = ws.keys.ptr + (records.start * 4) as u64;
            // SAFETY: pinned; the records of columns in use are not written again while they
            // are in use, and a free column written meanwhile is harmless (see `pack_at`).
            unsafe {
                result::memcpy_htod_async(
                    device,
                    &ws.keys_host.as_slice()?[records],
                    stream.cu_stream(),
                )
            }?;
            let n = run.end - run.start;
            scanner.expand_into(ws, device, n * GROUP_KEYS, n, layout, run.start, stride)?;
        }
        for cols in joined {
            // SAFETY: the answer buffer holds `stride * 16` pages; only new columns are zeroed.
            unsafe {
                result::memset_d8_async(
                    ws.answers.ptr + (cols.start * ps) as u64,
                    0,
                    cols.len() * ps,
                    stream.cu_stream(),
                )
            }?;
        }
        Ok(())
    }

    /// The device work of one step, through the answers' copy to the host, for the groups
    /// `done` (indices into `groups`) whose turn it ends. Returns the merge's limits and where
    /// the answers land, which must both live until the step has completed.
    fn launch_step(
        &mut self,
        st: &super::epoch_window::EpochState,
        segment: Range<u64>,
        done: &[usize],
    ) -> Result<(Option<cudarc::driver::CudaSlice<u32>>, Landed), CudaError> {
        let ps = self.scanner.db.shape().page_size;
        let hi = self.columns_in_use();
        if hi == 0 {
            // Every mark of the step recorded all the same (no time between them).
            let ws = self.ws();
            for phase in [Phase::Scan, Phase::Merge, Phase::D2h] {
                ws.marks.end(phase, &ws.stream)?;
            }
            let landed = Landed {
                tickets: Vec::new(),
                landing: self.answer_pool.land(&[]),
            };
            return Ok((None, landed));
        }
        let (stride, layout, plan) = (self.stride(), self.layout, self.plan(hi));
        let padded = plan.padded_keys(hi).min(stride * GROUP_KEYS);
        let mut limits = vec![0u32; hi];
        for g in self.groups.iter() {
            // Resolved under this same lock by the caller.
            let limit = st.limit(g.epoch).unwrap_or(0);
            limits[g.own.first..g.own.first + g.keys].fill(limit);
        }
        let scanner = &self.scanner;
        let ws = self.ws.as_mut().expect("the workspace is held until drop");
        scanner.scan_blocks(ws, &plan, hi, padded, stride, segment.clone(), true)?;
        ws.marks.end(Phase::Scan, &ws.stream)?;
        let pages = segment.start * BLOCK_PAGES..segment.end * BLOCK_PAGES;
        let kept = match st.merge_pages(&limits, pages) {
            Some(m) => Some(scanner.merge(ws, &m, hi, stride * GROUP_KEYS, layout)?),
            None => None,
        };
        ws.marks.end(Phase::Merge, &ws.stream)?;
        let stream = ws.stream.clone();
        let host = ws.answers_host.as_mut_slice()?;
        // The finished groups in column order, so that adjacent groups landing back to back
        // are copied at once.
        let mut finished: Vec<&Group> = done.iter().map(|&i| &self.groups[i]).collect();
        finished.sort_by_key(|g| g.own.first);
        let lens: Vec<usize> = finished.iter().map(|g| g.keys * ps).collect();
        let starts: Vec<usize> = finished.iter().map(|g| g.own.first * ps).collect();
        let tickets = finished.iter().map(|g| g.ticket).collect();
        let mut landing = self.answer_pool.land(&lens);
        let mut copied: Result<(), CudaError> = Ok(());
        for t in landing.transfers(&starts) {
            let src = ws.answers.ptr + t.src.start as u64;
            let dst = match t.to {
                Place::Lent { block, offset } => {
                    &mut landing.block_mut(block)[offset..offset + t.src.len()]
                }
                Place::Copied => &mut host[t.src],
            };
            // SAFETY: pinned host memory (a lent block, or the workspace's buffer, as large as
            // the answer buffer), written only by this copy until the step completes and read
            // only after: the step's `Launched` holds the blocks until then. A group's columns
            // of the workspace's buffer are written by no other step meanwhile (a column given
            // to a later join finishes a whole turn later).
            copied = unsafe { result::memcpy_dtoh_async(dst, src, stream.cu_stream()) }
                .map_err(CudaError::from);
            if copied.is_err() {
                break;
            }
        }
        if let Err(e) = copied.and_then(|()| ws.marks.end(Phase::D2h, &stream)) {
            // Copies already queued may still write into the landing's blocks.
            let _ = stream.synchronize();
            return Err(e);
        }
        Ok((kept, Landed { tickets, landing }))
    }

    /// Marks the start of a step's device work (before the joins' uploads and expansions).
    fn mark_start(&self) -> Result<(), CudaError> {
        let ws = self.ws();
        ws.marks.start(&ws.stream)?;
        ws.marks.end(Phase::H2d, &ws.stream)
    }

    /// Launches the next step behind the one in flight: the joins' uploads and expansions,
    /// then the segment's scan, merge and the finished groups' copies. Groups whose epoch left
    /// the window leave at once, into `step.finished`.
    fn launch(&mut self, step: &mut Step) -> Result<Launched, CudaError> {
        let fresh = match self.spare_marks.pop() {
            Some(marks) => marks,
            None => Marks::new(&self.scanner.ctx)?,
        };
        let now = Instant::now();
        let segment = self.segments[self.groups.segment()].clone();
        self.groups.begin_turn();
        let layout = self.layout_for(self.columns_in_use());
        let relayout = layout != self.layout;
        self.layout = layout;
        self.mark_start()?;
        self.settle_joins(relayout)?;
        self.ws().marks.end(Phase::Expand, &self.ws().stream)?;
        let scanner = self.scanner.clone();
        // Held while the step is launched; an update's write lock then waits for the device
        // work in flight (see the module's doc).
        let st = scanner.epochs.read().unwrap_or_else(|e| e.into_inner());
        let left_window = self
            .groups
            .start_step(now, |epoch| st.resolve(epoch).map(drop).map_err(Into::into));
        for (g, e) in left_window {
            self.release(&g);
            step.finished.push(g.finish(Err(e), now));
        }
        let keys = self.groups.keys();
        let done: Vec<usize> = (0..self.groups.len())
            .filter(|&i| self.groups[i].in_last_segment())
            .collect();
        let (limits, landed) = self.launch_step(&st, segment, &done)?;
        drop(st);
        let (done, turn_keys) = self.groups.end_step();
        for g in &done {
            self.release(g);
        }
        let ws = self.ws.as_mut().expect("the workspace is held until drop");
        Ok(Launched {
            marks: std::mem::replace(&mut ws.marks, fresh),
            done,
            landed,
            _limits: limits,
            keys,
            turn_keys,
            at: Instant::now(),
        })
    }

    /// Waits for a launched step to complete and hands its finished groups over, with their
    /// answers, into `step`.
    fn collect(&mut self, launched: Launched, step: &mut Step) -> Result<(), CudaError> {
        let Launched {
            marks,
            done,
            landed,
            keys,
            turn_keys,
            ..
        } = launched;
        // Everything that can fail comes before the first group is handed over.
        let timings = marks.wait().and_then(|()| marks.timings(keys));
        let host = self.ws().answers_host.as_slice().map_err(CudaError::from);
        let (timings, host) = match (timings, host) {
            (Ok(t), Ok(h)) => (t, h),
            (Err(e), _) | (_, Err(e)) => {
                // The landing's blocks go back to the pool only once nothing writes them.
                let _ = self.ws().stream.synchronize();
                self.dropped.extend(done.iter().map(|g| g.ticket));
                return Err(e);
            }
        };
        let end = Instant::now();
        let mut last_step = None;
        if keys > 0 {
            let mut total = Duration::ZERO;
            for phase in [Phase::Expand, Phase::Scan, Phase::Merge, Phase::D2h] {
                record_phase(phase, timings.phase(phase));
                total += timings.phase(phase);
            }
            last_step = Some(total);
        }
        let ps = self.scanner.db.shape().page_size;
        let mut lent: HashMap<Ticket, Bytes> = HashMap::new();
        let Landed { tickets, landing } = landed;
        for (ticket, share) in tickets.into_iter().zip(landing.into_shares()) {
            lent.extend(share.map(|bytes| (ticket, bytes)));
        }
        let (mut lent_pages, mut copied_pages) = (0, 0);
        for g in &done {
            let answers = match lent.remove(&g.ticket) {
                // As the device wrote them, in a block lent until the worker drops them.
                Some(bytes) => {
                    lent_pages += g.keys;
                    Answers::shared(ps, bytes)
                }
                // Not in the pool: out of the workspace's buffer, which a later step reuses.
                None => {
                    copied_pages += g.keys;
                    let first = g.own.first;
                    Answers::new(ps, host[first * ps..(first + g.keys) * ps].to_vec())
                }
            };
            step.finished.push(g.finish(Ok(answers), end));
        }
        if !done.is_empty() {
            record_answer_pages(lent_pages as u64, copied_pages as u64);
        }
        step.keys = keys;
        step.turn_keys = turn_keys;
        self.last_step = last_step.unwrap_or(self.last_step);
        self.spare_marks.push(marks);
        Ok(())
    }

    /// A failed step: the groups it finished are dropped with every other (their tickets wait
    /// for [`Rotation::clear`], which the caller calls to fail or retry them all).
    fn fail(&mut self, step: Step, e: CudaError) -> ScanError {
        self.dropped.extend(step.finished.iter().map(|f| f.ticket));
        e.into()
    }
}

impl Drop for CudaRotation {
    fn drop(&mut self) {
        if let Some(ws) = self.ws.take() {
            let _ = ws.stream.synchronize();
            self.scanner.pool.put_back(ws);
        }
    }
}

impl Rotation for CudaRotation {
    fn join(&mut self, keys: &[DpfKey], epoch: u64) -> Result<Ticket, ScanError> {
        // The keys leaving with the step in flight hold no column any more (as in `fits`).
        let room = self.capacity().saturating_sub(self.groups.keys());
        check_keys(&self.scanner.geometry(), keys, room)?;
        self.scanner
            .epochs
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .resolve(epoch)?;
        let Some(first) = self.free_run(keys.len()) else {
            return Err(ScanError::BatchTooLarge {
                got: keys.len(),
                max: room,
            });
        };
        let joined = Instant::now();
        self.pack_at(keys, first)?;
        let ticket = self.groups.join(epoch, keys.len(), Cols { first }, joined);
        for c in &mut self.columns[first..first + keys.len()] {
            *c = Some(ticket);
        }
        self.joined.push(first..first + keys.len());
        Ok(ticket)
    }

    fn step(&mut self) -> Result<Step, ScanError> {
        let mut step = Step::default();
        // This call's step goes on the stream first, so the device has it queued while the
        // host waits for the step before it and hands that one's answers over.
        let launched = match self.groups.is_empty() {
            true => None,
            false => match self.launch(&mut step) {
                Ok(launched) => Some(launched),
                Err(e) => return Err(self.fail(step, e)),
            },
        };
        let mut started = launched.as_ref().map(|l| l.at);
        if let Some(before) = std::mem::replace(&mut self.launched, launched) {
            if let Err(e) = self.collect(before, &mut step) {
                return Err(self.fail(step, e));
            }
            // This call's step starts on the device once the one before has ended: now.
            started = started.map(|at| at.max(Instant::now()));
        }
        self.launch_at = started.map(|at| at + self.last_step.saturating_sub(LAUNCH_AHEAD));
        Ok(step)
    }

    fn launch_at(&self) -> Option<Instant> {
        self.launch_at
    }

    fn steps_ahead(&self) -> usize {
        1
    }

    fn in_flight(&self) -> usize {
        let landing: usize = self
            .launched
            .iter()
            .flat_map(|l| &l.done)
            .map(|g| g.keys)
            .sum();
        self.groups.keys() + landing
    }

    fn capacity(&self) -> usize {
        self.scanner.config.max_batch_keys
    }

    fn fits(&self, keys: usize) -> bool {
        // The keys of the step in flight that leave with it hold no column any more: counting
        // them kept a tenth of the rotation empty at load.
        self.groups.keys() + keys <= self.capacity() && self.free_run(keys).is_some()
    }

    fn segments(&self) -> usize {
        self.segments.len()
    }

    fn clear(&mut self) -> Vec<Ticket> {
        let _ = self.ws().stream.synchronize();
        // Synchronized: the blocks of the step in flight can go back to the pool.
        let mut tickets = std::mem::take(&mut self.dropped);
        if let Some(launched) = self.launched.take() {
            tickets.extend(launched.done.iter().map(|g| g.ticket));
            self.spare_marks.push(launched.marks);
        }
        self.columns.fill(None);
        self.joined.clear();
        tickets.extend(self.groups.clear());
        tickets
    }
}

/// `ranges` sorted and merged where they touch or overlap: one copy, expansion or memset for
/// each run instead of one for each range.
fn runs(mut ranges: Vec<Range<usize>>) -> Vec<Range<usize>> {
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match merged.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => merged.push(r),
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_merge_touching_and_overlapping_ranges_only() {
        assert_eq!(
            runs(vec![5..7, 0..2, 2..3, 9..10, 6..8]),
            vec![0..3, 5..8, 9..10]
        );
        assert_eq!(runs(vec![]), Vec::<std::ops::Range<usize>>::new());
        assert_eq!(runs(vec![3..4, 1..2]), vec![1..2, 3..4]);
    }
}
