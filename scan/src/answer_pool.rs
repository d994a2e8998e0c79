//! A pool of reusable blocks that answers are copied into once and lent out as [`Bytes`].
//!
//! The CUDA rotation copies each step's finished answers from the device straight into blocks
//! of page-locked host memory and hands each group of keys its answers as a slice of a block
//! ([`Answers::shared`](crate::Answers::shared)), so the bytes reach the worker's Redis write
//! without a copy on the host (`docs/bench/worker-cpu.md`). This module is that pool, generic
//! over the block so that its rules are tested without a GPU:
//!
//! - a block is lent to one [`Lease`] at a time: it leaves the free list when leased and goes
//!   back only when the lease drops;
//! - a lease handed out as [`Bytes`] ([`Landing::into_shares`]) drops when the last slice of it
//!   does, on whatever thread that is (the worker's Redis writer);
//! - a pool with no free block lends nothing: the caller copies those answers the old way
//!   ([`Place::Copied`]), so nothing ever waits or fails for lack of a block.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;

/// What a pool can lend: owned bytes, writable while leased, movable to the thread that drops
/// the last reference.
pub trait Block: AsRef<[u8]> + AsMut<[u8]> + Send + 'static {}

impl<T: AsRef<[u8]> + AsMut<[u8]> + Send + 'static> Block for T {}

/// How many blocks of how many answer pages an answer pool holds ([`PoolShape::for_keys`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolShape {
    pub blocks: usize,
    /// Answer pages a block holds.
    pub block_pages: usize,
}

impl PoolShape {
    /// Blocks in a pool: enough that a step finishing a few keys takes a small share of the
    /// pool, few enough that each holds a good part of a step's answers.
    pub const BLOCKS: usize = 16;

    /// Host memory one pool may pin, at most (64 MiB: at the 4096 keys and 64 KiB pages the
    /// CUDA scanner allows, two turns' answers would be 512 MiB).
    pub const MAX_BYTES: usize = 64 << 20;

    /// The pool for a rotation holding up to `keys` keys in flight, of `page_size`-byte answer
    /// pages: [`BLOCKS`](Self::BLOCKS) blocks holding twice `keys` pages together, bounded by
    /// [`MAX_BYTES`](Self::MAX_BYTES).
    ///
    /// Why that does not run dry at steady state: every key in flight finishes once a turn,
    /// so at most `keys` answers finish in one turn; each is lent until the worker's Redis
    /// write of its job ends, which takes far less than a turn (a turn is a pass over the
    /// database, tens of milliseconds on a GPU at 64 GiB; the write, one round trip), so the
    /// answers lent at once are about one turn's, `keys` pages. The factor two covers the
    /// blocks that a step fills only in part (each step's answers start a block of their own)
    /// and writes that lag. A step whose answers outgrow what is free (a burst that joined
    /// together and leaves together, while earlier answers are still being written), or a
    /// group larger than a block, falls back to the copy.
    pub fn for_keys(keys: usize, page_size: usize) -> PoolShape {
        let page_size = page_size.max(1);
        let want = (2 * keys.max(1)).div_ceil(Self::BLOCKS);
        let most = (Self::MAX_BYTES / Self::BLOCKS / page_size).max(1);
        PoolShape {
            blocks: Self::BLOCKS,
            block_pages: want.min(most),
        }
    }
}

/// What a pool did, for tests and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    pub blocks: usize,
    /// Blocks in the pool now (not lent).
    pub free: usize,
    /// Leases made since the pool was made; more than `blocks` means blocks were reused.
    pub leases: u64,
    /// Answer bytes placed in a lent block ([`Place::Lent`]).
    pub lent_bytes: u64,
    /// Answer bytes the pool could not take ([`Place::Copied`]).
    pub copied_bytes: u64,
}

/// Blocks of one length, lent one at a time ([`BlockPool::lease`]) and taken back on drop.
pub struct BlockPool<B> {
    free: Arc<Mutex<Vec<B>>>,
    /// Every block's usable length (the shortest block's).
    block_len: usize,
    blocks: usize,
    leases: AtomicU64,
    lent_bytes: AtomicU64,
    copied_bytes: AtomicU64,
}

impl<B: Block> BlockPool<B> {
    /// A pool of `blocks`, each used up to the shortest one's length.
    pub fn new(blocks: Vec<B>) -> BlockPool<B> {
        let block_len = blocks.iter().map(|b| b.as_ref().len()).min().unwrap_or(0);
        BlockPool {
            blocks: blocks.len(),
            free: Arc::new(Mutex::new(blocks)),
            block_len,
            leases: AtomicU64::new(0),
            lent_bytes: AtomicU64::new(0),
            copied_bytes: AtomicU64::new(0),
        }
    }

    /// Bytes each block holds.
    pub fn block_len(&self) -> usize {
        self.block_len
    }

    /// A free block, lent until the lease drops; `None` when every block is lent.
    pub fn lease(&self) -> Option<Lease<B>> {
        let block = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
        self.leases.fetch_add(1, Ordering::Relaxed);
        Some(Lease {
            block: Some(block),
            len: self.block_len,
            home: self.free.clone(),
        })
    }

    /// Where each of `lens` (a step's groups of answers, in bytes, in the order they are
    /// copied) lands: packed back to back into leased blocks (a group goes whole into the last
    /// block leased when it fits there, else into a new one), or [`Place::Copied`] for a group
    /// larger than a block or one that meets a dry pool.
    pub fn land(&self, lens: &[usize]) -> Landing<B> {
        let mut landing = Landing {
            blocks: Vec::new(),
            places: Vec::with_capacity(lens.len()),
            lens: lens.to_vec(),
        };
        // Bytes used in the last block leased.
        let mut used = 0;
        for &len in lens {
            let place = if len > self.block_len {
                Place::Copied
            } else if !landing.blocks.is_empty() && used + len <= self.block_len {
                used += len;
                Place::Lent {
                    block: landing.blocks.len() - 1,
                    offset: used - len,
                }
            } else if let Some(lease) = self.lease() {
                landing.blocks.push(lease);
                used = len;
                Place::Lent {
                    block: landing.blocks.len() - 1,
                    offset: 0,
                }
            } else {
                Place::Copied
            };
            let counter = match place {
                Place::Lent { .. } => &self.lent_bytes,
                Place::Copied => &self.copied_bytes,
            };
            counter.fetch_add(len as u64, Ordering::Relaxed);
            landing.places.push(place);
        }
        landing
    }

    pub fn stats(&self) -> PoolStats {
        PoolStats {
            blocks: self.blocks,
            free: self.free.lock().unwrap_or_else(|e| e.into_inner()).len(),
            leases: self.leases.load(Ordering::Relaxed),
            lent_bytes: self.lent_bytes.load(Ordering::Relaxed),
            copied_bytes: self.copied_bytes.load(Ordering::Relaxed),
        }
    }
}

/// A block on loan from a [`BlockPool`]; back in the pool when dropped (the pool itself may be
/// gone by then: the free list lives as long as a lease does).
pub struct Lease<B: Block> {
    /// Always `Some` until drop.
    block: Option<B>,
    len: usize,
    home: Arc<Mutex<Vec<B>>>,
}

impl<B: Block> AsRef<[u8]> for Lease<B> {
    fn as_ref(&self) -> &[u8] {
        let block = self
            .block
            .as_ref()
            .expect("a lease holds its block until drop");
        &block.as_ref()[..self.len]
    }
}

impl<B: Block> AsMut<[u8]> for Lease<B> {
    fn as_mut(&mut self) -> &mut [u8] {
        let block = self
            .block
            .as_mut()
            .expect("a lease holds its block until drop");
        &mut block.as_mut()[..self.len]
    }
}

impl<B: Block> Drop for Lease<B> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            self.home
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(block);
        }
    }
}

/// Where one group of answers lands ([`BlockPool::land`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At `offset` in the landing's block number `block`.
    Lent { block: usize, offset: usize },
    /// Not in the pool: copied through the caller's own buffer.
    Copied,
}

/// One copy into a landing: the bytes `src` of the source (the device's answer buffer) to
/// `to`; for [`Place::Copied`], to the same range of the caller's staging buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub src: Range<usize>,
    pub to: Place,
}

/// A step's groups of answers placed in leased blocks ([`BlockPool::land`]).
pub struct Landing<B: Block> {
    blocks: Vec<Lease<B>>,
    places: Vec<Place>,
    lens: Vec<usize>,
}

impl<B: Block> Landing<B> {
    /// Each group's place, in the order of the lengths given to [`BlockPool::land`].
    pub fn places(&self) -> &[Place] {
        &self.places
    }

    /// The landing's block number `block`, to copy into.
    pub fn block_mut(&mut self, block: usize) -> &mut [u8] {
        self.blocks[block].as_mut()
    }

    /// The copies that fill the landing, groups that are adjacent both in the source (group
    /// `i` at `starts[i]..starts[i] + len`) and in their destination merged into one: one
    /// device copy for each run instead of one for each group.
    pub fn transfers(&self, starts: &[usize]) -> Vec<Transfer> {
        assert_eq!(starts.len(), self.places.len(), "one start a group");
        let mut out: Vec<Transfer> = Vec::with_capacity(starts.len());
        for ((&start, &len), &to) in starts.iter().zip(&self.lens).zip(&self.places) {
            let src = start..start + len;
            if let Some(last) = out.last_mut() {
                let follows = match (last.to, to) {
                    (Place::Copied, Place::Copied) => true,
                    (
                        Place::Lent {
                            block: a,
                            offset: o,
                        },
                        Place::Lent { block: b, offset },
                    ) => a == b && o + last.src.len() == offset,
                    _ => false,
                };
                if follows && last.src.end == src.start {
                    last.src.end = src.end;
                    continue;
                }
            }
            out.push(Transfer { src, to });
        }
        out
    }

    /// Each group's bytes: a slice of its block for [`Place::Lent`] (the block goes back to the
    /// pool when the last slice of it drops), `None` for [`Place::Copied`].
    pub fn into_shares(self) -> Vec<Option<Bytes>> {
        let blocks: Vec<Bytes> = self.blocks.into_iter().map(Bytes::from_owner).collect();
        self.places
            .iter()
            .zip(&self.lens)
            .map(|(place, &len)| match *place {
                Place::Lent { block, offset } => Some(blocks[block].slice(offset..offset + len)),
                Place::Copied => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(blocks: usize, len: usize) -> BlockPool<Vec<u8>> {
        BlockPool::new((0..blocks).map(|_| vec![0u8; len]).collect())
    }

    #[test]
    fn a_block_is_lent_once_and_comes_back_when_the_lease_drops() {
        let pool = pool(2, 8);
        let a = pool.lease().unwrap();
        let b = pool.lease().unwrap();
        assert!(pool.lease().is_none(), "two blocks, two leases");
        assert_ne!(
            a.as_ref().as_ptr(),
            b.as_ref().as_ptr(),
            "never the same block twice"
        );
        let a_ptr = a.as_ref().as_ptr();
        drop(a);
        assert_eq!(pool.stats().free, 1);
        let again = pool.lease().unwrap();
        assert_eq!(
            again.as_ref().as_ptr(),
            a_ptr,
            "the block given back is lent again"
        );
        assert_eq!(pool.stats().leases, 3);
        drop((b, again));
        assert_eq!(pool.stats().free, 2);
    }

    #[test]
    fn blocks_are_used_up_to_the_shortest_length() {
        let pool = BlockPool::new(vec![vec![0u8; 10], vec![0u8; 6]]);
        assert_eq!(pool.block_len(), 6);
        assert_eq!(pool.lease().unwrap().as_ref().len(), 6);
        let empty: BlockPool<Vec<u8>> = BlockPool::new(Vec::new());
        assert!(empty.lease().is_none());
        assert_eq!(empty.land(&[4]).places(), &[Place::Copied]);
    }

    #[test]
    fn groups_pack_into_blocks_in_order() {
        let pool = pool(3, 10);
        let landing = pool.land(&[4, 4, 4, 10, 2, 11, 1]);
        assert_eq!(
            landing.places(),
            &[
                Place::Lent {
                    block: 0,
                    offset: 0
                },
                Place::Lent {
                    block: 0,
                    offset: 4
                },
                // 4 more would overflow block 0.
                Place::Lent {
                    block: 1,
                    offset: 0
                },
                Place::Lent {
                    block: 2,
                    offset: 0
                },
                // Block 2 is full and the pool dry.
                Place::Copied,
                // Larger than any block.
                Place::Copied,
                // Too large for block 2 (full): no block left.
                Place::Copied,
            ]
        );
        let stats = pool.stats();
        assert_eq!((stats.lent_bytes, stats.copied_bytes), (22, 14));
        assert_eq!(stats.free, 0);
        drop(landing);
        assert_eq!(
            pool.stats().free,
            3,
            "the blocks of a dropped landing come back"
        );
    }

    #[test]
    fn a_dry_pool_still_fills_the_last_block() {
        let pool = pool(1, 10);
        let landing = pool.land(&[6, 6, 4]);
        assert_eq!(
            landing.places(),
            &[
                Place::Lent {
                    block: 0,
                    offset: 0
                },
                Place::Copied,
                Place::Lent {
                    block: 0,
                    offset: 6
                },
            ]
        );
    }

    #[test]
    fn transfers_merge_runs_adjacent_in_source_and_destination() {
        let pool = pool(2, 8);
        // Groups at source 0..4, 4..8 (block 0, back to back), 8..12 (block 1), 20..22 (block
        // 1 after a gap in the source), 22..30 (too large: copied), 30..40 (copied, adjacent).
        let landing = pool.land(&[4, 4, 4, 2, 8 + 1, 10]);
        let t = landing.transfers(&[0, 4, 8, 20, 22, 31]);
        assert_eq!(
            t,
            vec![
                Transfer {
                    src: 0..8,
                    to: Place::Lent {
                        block: 0,
                        offset: 0
                    }
                },
                Transfer {
                    src: 8..12,
                    to: Place::Lent {
                        block: 1,
                        offset: 0
                    }
                },
                Transfer {
                    src: 20..22,
                    to: Place::Lent {
                        block: 1,
                        offset: 4
                    }
                },
                Transfer {
                    src: 22..41,
                    to: Place::Copied
                },
            ]
        );
    }

    /// The whole way: copied into blocks, handed out as `Bytes`, held across later landings
    /// (which must not get the held blocks), dropped on other threads, reused.
    #[test]
    fn shares_hold_their_block_until_the_last_slice_drops() {
        let pool = pool(2, 8);
        let fill = |landing: &mut Landing<Vec<u8>>, groups: &[&[u8]]| {
            let places = landing.places().to_vec();
            for (place, bytes) in places.into_iter().zip(groups) {
                if let Place::Lent { block, offset } = place {
                    landing.block_mut(block)[offset..offset + bytes.len()].copy_from_slice(bytes);
                }
            }
        };
        let mut first = pool.land(&[3, 5]);
        fill(&mut first, &[b"abc", b"defgh"]);
        let shares = first.into_shares();
        let (abc, defgh) = (shares[0].clone().unwrap(), shares[1].clone().unwrap());
        drop(shares);
        assert_eq!(pool.stats().free, 1);
        // Only the other block is free: a later step gets it, never the one `abc` still holds.
        let mut second = pool.land(&[8]);
        fill(&mut second, &[b"ijklmnop"]);
        assert_eq!(
            pool.land(&[1]).places(),
            &[Place::Copied],
            "both blocks are lent"
        );
        let ijkl = second.into_shares().pop().unwrap().unwrap();
        assert_eq!((&abc[..], &defgh[..]), (&b"abc"[..], &b"defgh"[..]));
        // One slice dropped: the block is still lent to the other.
        drop(abc);
        assert_eq!(pool.stats().free, 0);
        std::thread::spawn(move || drop(defgh)).join().unwrap();
        assert_eq!(
            pool.stats().free,
            1,
            "back once its last slice dropped, on another thread"
        );
        let mut third = pool.land(&[8]);
        fill(&mut third, &[b"qrstuvwx"]);
        let qrst = third.into_shares().pop().unwrap().unwrap();
        assert_eq!(&ijkl[..], b"ijklmnop", "a held block is not lent again");
        assert_eq!(&qrst[..], b"qrstuvwx");
        assert_eq!(pool.stats().leases, 3);
    }

    #[test]
    fn leases_outlive_their_pool() {
        let pool = pool(1, 4);
        let mut landing = pool.land(&[4]);
        landing.block_mut(0).copy_from_slice(b"wxyz");
        let share = landing.into_shares().pop().unwrap().unwrap();
        drop(pool);
        assert_eq!(&share[..], b"wxyz");
        drop(share);
    }

    #[test]
    fn the_pool_holds_twice_the_keys_in_flight_in_sixteen_blocks_bounded() {
        // The default 256 keys of 4 KiB pages: 512 pages, 32 a block (2 MiB pinned).
        assert_eq!(
            PoolShape::for_keys(256, 4096),
            PoolShape {
                blocks: 16,
                block_pages: 32
            }
        );
        // Few keys: at least a page a block.
        assert_eq!(PoolShape::for_keys(1, 4096).block_pages, 1);
        assert_eq!(PoolShape::for_keys(0, 4096).block_pages, 1);
        // The largest the CUDA scanner allows, 4096 keys of 64 KiB pages: bounded to 64 MiB.
        let big = PoolShape::for_keys(4096, 65536);
        assert_eq!(big.block_pages, 64);
        assert_eq!(big.blocks * big.block_pages * 65536, PoolShape::MAX_BYTES);
    }
}
