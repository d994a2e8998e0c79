//! Workspaces: everything one pass needs, allocated once and reused, each with its own stream.
//!
//! The seeds' lesson was that a buffer pool without its own streams gains nothing: passes on one
//! stream serialize. Here every slot owns a CUDA stream, so while one slot's scan runs another
//! slot's key upload, expansion and answer download proceed beside it. [`Pool`] hands slots out
//! to callers of `pass` (which takes `&self`), blocking when all are busy.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice};

use pirq_shared::metrics::Phase;

use super::error::CudaError;
use super::layout::{ScanPlan, Shape, KEY_WORDS};

/// The phases of a CUDA pass in the order they run on a slot's stream: the merge (zero when no
/// key needs one) runs on the device, before the answers come back.
pub const STREAM_ORDER: [Phase; 5] = [
    Phase::H2d,
    Phase::Expand,
    Phase::Scan,
    Phase::Merge,
    Phase::D2h,
];

/// Device time of each phase of one pass, from CUDA events on the slot's stream.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PassTimings {
    /// Keys in the pass (before padding).
    pub keys: usize,
    /// Key upload (host to device).
    pub h2d: Duration,
    /// DPF full-domain expansion into the selection layout.
    pub expand: Duration,
    /// The scan, including the parity unpack into answer pages.
    pub scan: Duration,
    /// The epoch merge (`epoch_merge`; zero when every key is at the base or nothing changed).
    pub merge: Duration,
    /// Answer download (device to host).
    pub d2h: Duration,
    /// Wall time of the whole `pass` call, waiting for a slot included.
    pub wall: Duration,
}

impl PassTimings {
    /// The device time of `phase`.
    pub fn phase(&self, phase: Phase) -> Duration {
        let mut copy = *self;
        *copy.phase_mut(phase)
    }

    /// The field that holds `phase`'s device time.
    pub fn phase_mut(&mut self, phase: Phase) -> &mut Duration {
        match phase {
            Phase::H2d => &mut self.h2d,
            Phase::Expand => &mut self.expand,
            Phase::Scan => &mut self.scan,
            Phase::D2h => &mut self.d2h,
            Phase::Merge => &mut self.merge,
        }
    }
}

/// CUDA events at the boundaries of a pass's phases on one stream: one before the first phase
/// ([`STREAM_ORDER`]) and one at the end of each, so a phase lasts from the end of the one
/// before it to its own end.
pub struct Marks {
    events: [CudaEvent; STREAM_ORDER.len() + 1],
}

impl Marks {
    /// A set of events that synchronize by blocking (the waiting thread sleeps in the driver).
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Marks, CudaError> {
        let event = || ctx.new_event(Some(CUevent_flags::CU_EVENT_BLOCKING_SYNC));
        Ok(Marks {
            events: [event()?, event()?, event()?, event()?, event()?, event()?],
        })
    }

    /// Marks the start of a pass on `stream`, before its first phase.
    pub fn start(&self, stream: &CudaStream) -> Result<(), CudaError> {
        Ok(self.events[0].record(stream)?)
    }

    /// Marks the end of `phase` on `stream` (the next phase starts there).
    pub fn end(&self, phase: Phase, stream: &CudaStream) -> Result<(), CudaError> {
        Ok(self.events[Self::position(phase) + 1].record(stream)?)
    }

    /// Blocks until the device work up to the last mark recorded has completed; errors of
    /// earlier asynchronous work come back here.
    pub fn wait(&self) -> Result<(), CudaError> {
        Ok(self.events[STREAM_ORDER.len()].synchronize()?)
    }

    /// Device time of each phase of the pass last marked, `keys` keys.
    pub fn timings(&self, keys: usize) -> Result<PassTimings, CudaError> {
        let mut timings = PassTimings {
            keys,
            ..PassTimings::default()
        };
        for phase in STREAM_ORDER {
            *timings.phase_mut(phase) = self.elapsed(phase)?;
        }
        Ok(timings)
    }

    /// Device time of `phase` in the pass last marked.
    fn elapsed(&self, phase: Phase) -> Result<Duration, CudaError> {
        let i = Self::position(phase);
        let ms = self.events[i].elapsed_ms(&self.events[i + 1])?;
        Ok(Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3))
    }

    fn position(phase: Phase) -> usize {
        STREAM_ORDER
            .iter()
            .position(|&p| p == phase)
            .expect("every phase runs on the stream")
    }
}

/// One slot: a stream, its events, device buffers and pinned host buffers.
pub struct Workspace {
    pub stream: Arc<CudaStream>,
    /// Timing marks at the phases' boundaries.
    pub marks: Marks,
    pub keys_host: PinnedHostSlice<u32>,
    /// Answer bytes as the kernels wrote them (little-endian u32 words = the page bytes).
    pub answers_host: PinnedHostSlice<u8>,
    pub keys: Buffer,
    /// Ping-pong node buffers of the upper tree levels: seeds (4 words per node) and control bits.
    pub mid_seed: [Buffer; 2],
    pub mid_t: [Buffer; 2],
    pub sel: Buffer,
    pub partial: Buffer,
    pub answers: Buffer,
    /// Keys the buffers were sized for (after padding).
    pub capacity_keys: usize,
}

/// A device allocation and its address (event tracking is off: the slot's stream orders all use).
pub struct Buffer {
    _slice: CudaSlice<u8>,
    pub ptr: u64,
}

impl Buffer {
    fn new(stream: &Arc<CudaStream>, bytes: usize) -> Result<Buffer, CudaError> {
        // SAFETY: every buffer is written by a kernel or a copy before it is read in a pass.
        let slice = unsafe { stream.alloc::<u8>(bytes.max(16)) }?;
        let ptr = slice.device_ptr(stream).0;
        Ok(Buffer { _slice: slice, ptr })
    }
}

/// Device bytes one workspace needs for batches of up to `max_keys` keys.
pub fn workspace_bytes(shape: &Shape, max_keys: usize) -> u64 {
    let padded = padded_capacity(max_keys) as u64;
    let top_nodes = padded << shape.top_levels();
    padded * KEY_WORDS as u64 * 4
        + 2 * top_nodes * 17
        + shape.sel_words(padded as usize) as u64 * 4
        + shape.mtiles() as u64 * (padded / 8) * 16
        + padded * shape.page_size as u64
}

/// Key columns every plan fits in for batches of up to `max_keys` keys.
fn padded_capacity(max_keys: usize) -> usize {
    (1..=max_keys)
        .map(|q| {
            let mma = ScanPlan::for_keys(q).padded_keys(q);
            mma.max(ScanPlan::for_keys_wgmma(q).padded_keys(q))
        })
        .max()
        .unwrap_or(16)
        .max(max_keys.next_multiple_of(128))
}

impl Workspace {
    pub fn new(
        ctx: &Arc<CudaContext>,
        shape: &Shape,
        max_keys: usize,
    ) -> Result<Workspace, CudaError> {
        let stream = ctx.new_stream()?;
        let padded = padded_capacity(max_keys);
        let top_nodes = padded << shape.top_levels();
        Ok(Workspace {
            marks: Marks::new(ctx)?,
            // SAFETY (both): written before use, keys by the CPU, answers by a copy.
            keys_host: unsafe { ctx.alloc_pinned::<u32>(padded * KEY_WORDS) }?,
            answers_host: unsafe {
                ctx.alloc_pinned_with_flags::<u8>(padded * shape.page_size, 0)
            }?,
            keys: Buffer::new(&stream, padded * KEY_WORDS * 4)?,
            mid_seed: [
                Buffer::new(&stream, top_nodes * 16)?,
                Buffer::new(&stream, top_nodes * 16)?,
            ],
            mid_t: [
                Buffer::new(&stream, top_nodes)?,
                Buffer::new(&stream, top_nodes)?,
            ],
            sel: Buffer::new(&stream, shape.sel_words(padded) * 4)?,
            partial: Buffer::new(&stream, shape.mtiles() * (padded / 8) * 16)?,
            answers: Buffer::new(&stream, padded * shape.page_size)?,
            capacity_keys: padded,
            stream,
        })
    }

    /// Phase durations from the marks of the pass that just finished on this slot.
    pub fn timings(&self, keys: usize) -> Result<PassTimings, CudaError> {
        self.marks.timings(keys)
    }
}

/// A bounded set of workspaces; `take` blocks until one is free.
pub struct Pool {
    free: Mutex<Vec<Workspace>>,
    ready: Condvar,
    size: usize,
}

impl Pool {
    pub fn new(slots: Vec<Workspace>) -> Pool {
        let size = slots.len();
        Pool {
            free: Mutex::new(slots),
            ready: Condvar::new(),
            size,
        }
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Takes a free workspace out of the pool for good (blocking until one is free): the
    /// rotating scan keeps one for its whole life and gives it back with [`put_back`](Self::put_back).
    pub fn take_owned(&self) -> Workspace {
        let mut slot = self.take();
        slot.ws
            .take()
            .expect("slot holds a workspace until dropped")
    }

    /// Returns a workspace taken with [`take_owned`](Self::take_owned).
    pub fn put_back(&self, ws: Workspace) {
        self.free.lock().unwrap_or_else(|e| e.into_inner()).push(ws);
        self.ready.notify_one();
    }

    /// Borrows a free workspace until the guard drops.
    pub fn take(&self) -> Slot<'_> {
        let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(ws) = free.pop() {
                return Slot {
                    pool: self,
                    ws: Some(ws),
                };
            }
            free = self.ready.wait(free).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A workspace on loan from a [`Pool`].
pub struct Slot<'a> {
    pool: &'a Pool,
    ws: Option<Workspace>,
}

impl std::ops::Deref for Slot<'_> {
    type Target = Workspace;
    fn deref(&self) -> &Workspace {
        self.ws
            .as_ref()
            .expect("slot holds a workspace until dropped")
    }
}

impl std::ops::DerefMut for Slot<'_> {
    fn deref_mut(&mut self) -> &mut Workspace {
        self.ws
            .as_mut()
            .expect("slot holds a workspace until dropped")
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if let Some(ws) = self.ws.take() {
            self.pool
                .free
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(ws);
            self.pool.ready.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A phase missing from the stream order would have no marks; one listed twice, two.
    #[test]
    fn every_phase_runs_on_the_stream_once() {
        for phase in Phase::ALL {
            let times = STREAM_ORDER.iter().filter(|&&p| p == phase).count();
            assert_eq!(times, 1, "{phase} is in the stream order {times} times");
        }
        assert_eq!(STREAM_ORDER.len(), Phase::ALL.len());
    }

    #[test]
    fn pass_timings_hold_each_phase_in_its_own_field() {
        let mut t = PassTimings::default();
        for (i, phase) in Phase::ALL.into_iter().enumerate() {
            *t.phase_mut(phase) = Duration::from_millis(i as u64 + 1);
        }
        for (i, phase) in Phase::ALL.into_iter().enumerate() {
            assert_eq!(
                t.phase(phase),
                Duration::from_millis(i as u64 + 1),
                "{phase}"
            );
        }
        assert_eq!(
            (t.h2d, t.d2h, t.merge),
            (
                Duration::from_millis(1),
                Duration::from_millis(4),
                Duration::from_millis(5)
            )
        );
    }
}
