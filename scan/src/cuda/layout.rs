//! Shapes and layouts shared with the kernels (`kernels/pirq_common.cuh` is the other half).
//!
//! Everything here is plain arithmetic, so it is unit-tested without a GPU: how many 256-page
//! blocks and 16-row tiles a database has, how keys are packed for the device, how a batch of Q
//! keys is padded, and which scan kernel variant a batch uses.

use pirq_shared::dpf::{tree_depth, DpfKey};

/// Pages per block of the transposed database (one `k256` step of the tensor-core product).
pub const BLOCK_PAGES: u64 = 256;
/// u32 words per key record on the device (`PIRQ_KEY_WORDS`).
pub const KEY_WORDS: usize = 256;
/// Deepest tree a key record holds (`PIRQ_KEY_MAX_LEVELS`): n <= 36.
pub const KEY_MAX_LEVELS: u32 = 29;
/// Levels the leaf kernel expands itself (`PIRQ_LEAF_LEVELS`).
pub const LEAF_LEVELS: u32 = 7;
/// Levels one `dpf_expand_nodes` launch expands at most.
pub const NODE_LEVELS_PER_LAUNCH: u32 = 10;

/// The database as the kernels see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub page_size: usize,
    /// Pages on this GPU: the whole database, or one shard's range.
    pub num_pages: u64,
    /// Domain bits `n` of the keys (SPEC §2), those of the whole database.
    pub domain_bits: u8,
    /// A shard's first page, in 256-page blocks (0 unsharded): page `BLOCK_PAGES * first_block`
    /// of the database is page 0 on the GPU.
    pub first_block: u64,
    /// Pages of the whole database (= `num_pages` unsharded).
    pub total_pages: u64,
}

impl Shape {
    pub fn new(page_size: usize, num_pages: u64) -> Shape {
        Shape {
            page_size,
            num_pages,
            domain_bits: pirq_shared::dpf::domain_bits(num_pages),
            first_block: 0,
            total_pages: num_pages,
        }
    }

    /// Pages `range` of a `total_pages`-page database (a shard; `range.start` a multiple of
    /// [`BLOCK_PAGES`], as shard boundaries are).
    pub fn shard(page_size: usize, total_pages: u64, range: std::ops::Range<u64>) -> Shape {
        assert_eq!(range.start % BLOCK_PAGES, 0, "shards start on a block");
        Shape {
            page_size,
            num_pages: range.end - range.start,
            domain_bits: pirq_shared::dpf::domain_bits(total_pages),
            first_block: range.start / BLOCK_PAGES,
            total_pages,
        }
    }

    /// The database pages this GPU holds.
    pub fn page_range(&self) -> std::ops::Range<u64> {
        let first = self.first_block * BLOCK_PAGES;
        first..first + self.num_pages
    }

    /// The leaf kernel's nodes (at level `top_levels()`) whose subtrees cover this GPU's pages:
    /// the expansion runs only those, so a shard expands about its share of the domain.
    pub fn leaf_nodes(&self) -> std::ops::Range<u64> {
        let per = self.blocks_per_leaf_node();
        let first = self.first_block / per;
        first..(self.first_block + self.scan_blocks()).div_ceil(per)
    }

    /// Selection blocks one leaf-kernel node writes.
    pub fn blocks_per_leaf_node(&self) -> u64 {
        self.sel_blocks() >> self.top_levels()
    }

    /// Where this GPU's first block lies in the selection buffer, whose block 0 is the first
    /// block of [`leaf_nodes`](Self::leaf_nodes).
    pub fn sel_first_block(&self) -> u64 {
        self.first_block - self.leaf_nodes().start * self.blocks_per_leaf_node()
    }

    /// u32 words per page.
    pub fn words_per_page(&self) -> usize {
        self.page_size / 4
    }

    /// 16-row tiles of bit positions: `8 * page_size / 16`.
    pub fn mtiles(&self) -> usize {
        self.page_size / 2
    }

    /// 256-page blocks the scan reads (the last one padded with zero pages).
    pub fn scan_blocks(&self) -> u64 {
        self.num_pages.div_ceil(BLOCK_PAGES)
    }

    /// Bytes of the transposed database on the device.
    pub fn db_bytes(&self) -> u64 {
        self.scan_blocks() * BLOCK_PAGES * self.page_size as u64
    }

    /// GGM tree depth `m` of the keys.
    pub fn tree_depth(&self) -> u32 {
        tree_depth(self.domain_bits)
    }

    /// Levels the leaf kernel expands: `S = min(m, 7)`.
    pub fn leaf_levels(&self) -> u32 {
        self.tree_depth().min(LEAF_LEVELS)
    }

    /// Level whose nodes the leaf kernel starts from: `T = m - S`.
    pub fn top_levels(&self) -> u32 {
        self.tree_depth() - self.leaf_levels()
    }

    /// 256-page blocks the expansion writes: the whole key domain (at least one).
    pub fn sel_blocks(&self) -> u64 {
        match self.tree_depth() {
            0 => 1,
            m => 1u64 << (m - 1),
        }
    }

    /// u32 words of the selection buffer for `padded_keys` keys.
    pub fn sel_words(&self, padded_keys: usize) -> usize {
        self.sel_blocks() as usize * padded_keys * 8
    }
}

/// Writes `key` as a device record of [`KEY_WORDS`] u32 (layout in `pirq_common.cuh`).
pub fn pack_key(key: &DpfKey, out: &mut [u32]) {
    assert_eq!(out.len(), KEY_WORDS);
    out.fill(0);
    out[..4].copy_from_slice(key.root());
    out[4] = key.party() as u32;
    out[8..12].copy_from_slice(key.cw_out());
    for (i, cw) in key.correction_words().iter().enumerate() {
        let at = 16 + 8 * i;
        out[at..at + 4].copy_from_slice(&cw.seed);
        out[at + 4] = cw.t_left as u32 | (cw.t_right as u32) << 1;
    }
}

/// Which scan kernel runs a pass and how its grid is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanPlan {
    /// `scan_mma_m{mt}_n{nt}_s{stages}_w{wn}` on the binary tensor cores (sm_80+).
    Mma {
        mt: u32,
        nt: u32,
        stages: u32,
        wn: u32,
        warps: u32,
        blocks_per_task: u32,
    },
    /// `scan_wgmma_n{n}_s{stages}` on Hopper's warpgroup tensor cores (sm_90a): N keys per
    /// CTA column, [`WGMMA_CTA_MTILES`] m-tiles per CTA row, selection bits in layout "B for
    /// wgmma".
    Wgmma {
        n: u32,
        stages: u32,
        blocks_per_task: u32,
    },
    /// `scan_xor_m2_k8` on CUDA cores: the reference and the fallback before sm_80.
    Xor { blocks_per_task: u32 },
}

/// The wgmma variants compiled into the module (sm_90a only): (n, stages).
pub const WGMMA_VARIANTS: &[(u32, u32)] = &[(128, 8), (192, 8), (256, 12)];

/// M-tiles (16 bit rows each) one `wgmma` CTA covers: three consumer warpgroups of four warps
/// (`kernels/scan_wgmma.cu`). A page's `mtiles` need not be a multiple: the last CTA row
/// copies and writes only the m-tiles that exist.
pub const WGMMA_CTA_MTILES: u32 = 12;

/// Threads of a `wgmma` CTA: three consumer warpgroups and the producer warpgroup.
pub const WGMMA_THREADS: u32 = 512;

/// How the expansion arranges the selection bits inside each 512-byte chunk
/// (`kernels/pirq_common.cuh`): B for `mma.sync` and the CUDA-core kernel, "B for wgmma" for
/// `wgmma`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelLayout {
    Mma,
    Wgmma,
}

/// The tensor-core variants compiled into the module: (mt, nt, stages, wn).
pub const MMA_VARIANTS: &[(u32, u32, u32, u32)] = &[
    (2, 2, 8, 1),
    (2, 4, 6, 1),
    (4, 4, 4, 1),
    (2, 8, 4, 1),
    (2, 8, 4, 2),
    (2, 8, 6, 2),
    (1, 16, 4, 2),
];

/// Blocks per task of the `wgmma` plans (`wg…/2048` when a plan is written without it).
const WGMMA_BLOCKS_PER_TASK: u32 = 2048;

/// Blocks per task of the CUDA-core plan (`xor/512` when written without it), the fallback on
/// GPUs without binary tensor cores.
pub const XOR_BLOCKS_PER_TASK: u32 = 512;

impl ScanPlan {
    /// A `mma.sync` plan, its fields in the order of the variant's name and `parse`'s text.
    const fn mma(
        mt: u32,
        nt: u32,
        stages: u32,
        wn: u32,
        warps: u32,
        blocks_per_task: u32,
    ) -> ScanPlan {
        ScanPlan::Mma {
            mt,
            nt,
            stages,
            wn,
            warps,
            blocks_per_task,
        }
    }

    /// The plan measured best on an H100 for `q` keys (docs/bench/gpu-scan.md): up to 32 keys
    /// one 32-key group of eight warps with four m-tiles each, whose pass reads HBM at its floor
    /// (a lone key: 22.10 ms a pass and 23.05 a rotating turn on the H100, against 22.85 and
    /// 24.97 with the 16-key plan of two m-tiles a warp that served up to 16 keys before; on the
    /// H200 16.1 against 17.3 and 18.7); for large batches 64 keys per warp and two warps
    /// sharing each A tile through L1.
    pub fn for_keys(q: usize) -> ScanPlan {
        let mma = ScanPlan::mma;
        match q {
            0..=32 => mma(4, 4, 4, 1, 8, 1024),
            33..=64 => mma(2, 8, 4, 1, 4, 1024),
            // 64-key groups beat 128-key groups when 128-padding would waste a whole group.
            _ if q.next_multiple_of(128) > q.next_multiple_of(64) => mma(2, 8, 4, 1, 4, 1024),
            _ => mma(2, 8, 4, 2, 8, 256),
        }
    }

    /// The plan for `q` keys on a GPU with `wgmma` (Hopper, sm_90a). Up to 64 keys a pass
    /// reads HBM at its floor with the `mma.sync` kernels, so those stay; above, `wgmma` with the
    /// widest key group that pads least (measured on an H100 at 64 GiB, docs/bench/gpu-scan.md:
    /// 256 keys in 27.0 ms against 55 ms with `mma.sync`).
    pub fn for_keys_wgmma(q: usize) -> ScanPlan {
        if q <= 64 {
            return ScanPlan::for_keys(q);
        }
        ScanPlan::wgmma_for(q)
    }

    /// The `wgmma` plan for `q` keys whatever their number: the widest key group that pads
    /// least. The rotating scan takes it while its keys in flight are in the `wgmma` layout
    /// (more than 64 columns in use, `scan/src/cuda/rotation.rs`), whatever their number.
    pub fn wgmma_for(q: usize) -> ScanPlan {
        let (n, stages) = *WGMMA_VARIANTS
            .iter()
            .rev()
            .min_by_key(|&&(n, _)| q.next_multiple_of(n as usize))
            .expect("wgmma variants");
        ScanPlan::Wgmma {
            n,
            stages,
            blocks_per_task: WGMMA_BLOCKS_PER_TASK,
        }
    }

    /// Dynamic shared memory one CTA of this plan asks for, in bytes.
    pub fn dynamic_smem(&self) -> u32 {
        match *self {
            ScanPlan::Mma {
                mt, stages, warps, ..
            } => warps * stages * mt * 512,
            // A ring of stages (A: the CTA's m-tiles of 512 bytes, B: n keys x 32 bytes) and the
            // slack to align it to 128 bytes.
            ScanPlan::Wgmma { n, stages, .. } => stages * (WGMMA_CTA_MTILES * 512 + n * 32) + 128,
            ScanPlan::Xor { .. } => 0,
        }
    }

    /// Where the expansion must put the selection bits for this plan's kernel.
    pub fn sel_layout(&self) -> SelLayout {
        match self {
            ScanPlan::Wgmma { .. } => SelLayout::Wgmma,
            _ => SelLayout::Mma,
        }
    }

    /// Keys one grid column covers; a batch is padded to a multiple of it (and of 16).
    pub fn keys_per_group(&self) -> usize {
        match *self {
            ScanPlan::Mma { nt, wn, .. } => (nt * 8 * wn).max(16) as usize,
            ScanPlan::Wgmma { n, .. } => n as usize,
            ScanPlan::Xor { .. } => 16,
        }
    }

    /// Q padded for this plan: the selection buffer holds this many key columns.
    pub fn padded_keys(&self, q: usize) -> usize {
        q.max(1).next_multiple_of(self.keys_per_group())
    }

    /// Kernel function name in the NVRTC module.
    pub fn kernel_name(&self) -> String {
        match *self {
            ScanPlan::Mma {
                mt, nt, stages, wn, ..
            } => format!("scan_mma_m{mt}_n{nt}_s{stages}_w{wn}"),
            ScanPlan::Wgmma { n, stages, .. } => format!("scan_wgmma_n{n}_s{stages}"),
            ScanPlan::Xor { .. } => pirq_kernels::entry::SCAN_XOR.to_string(),
        }
    }

    /// Parses a plan written as `m2n8s4w2/8/256` (variant / warps / blocks per task),
    /// `wg256s12/2048` (wgmma variant / blocks per task) or `xor/512`.
    pub fn parse(text: &str) -> Option<ScanPlan> {
        let parts: Vec<&str> = text.split('/').collect();
        if parts[0] == "xor" {
            let blocks_per_task = parts
                .get(1)
                .map_or(Some(XOR_BLOCKS_PER_TASK), |s| s.parse().ok())?;
            return Some(ScanPlan::Xor { blocks_per_task });
        }
        if let Some(v) = parts[0].strip_prefix("wg") {
            let (n, stages) = v.split_once('s')?;
            let (n, stages) = (n.parse().ok()?, stages.parse().ok()?);
            let blocks_per_task = parts
                .get(1)
                .map_or(Some(WGMMA_BLOCKS_PER_TASK), |s| s.parse().ok())?;
            return (WGMMA_VARIANTS.contains(&(n, stages)) && blocks_per_task > 0).then_some(
                ScanPlan::Wgmma {
                    n,
                    stages,
                    blocks_per_task,
                },
            );
        }
        let v = parts[0].strip_prefix('m')?;
        let (mt, v) = v.split_once('n')?;
        let (nt, v) = v.split_once('s')?;
        let (stages, wn) = v.split_once('w').unwrap_or((v, "1"));
        let (mt, nt, stages, wn) = (
            mt.parse().ok()?,
            nt.parse().ok()?,
            stages.parse().ok()?,
            wn.parse().ok()?,
        );
        if !MMA_VARIANTS.contains(&(mt, nt, stages, wn)) {
            return None;
        }
        let warps = parts.get(1).map_or(Some(8), |s| s.parse().ok())?;
        let blocks_per_task = parts.get(2).map_or(Some(512), |s| s.parse().ok())?;
        let plan = ScanPlan::mma(mt, nt, stages, wn, warps, blocks_per_task);
        (warps.is_multiple_of(wn) && (1..=8).contains(&warps) && blocks_per_task > 0)
            .then_some(plan)
    }
}

impl std::fmt::Display for ScanPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            ScanPlan::Mma {
                mt,
                nt,
                stages,
                wn,
                warps,
                blocks_per_task,
            } => {
                write!(f, "m{mt}n{nt}s{stages}w{wn}/{warps}/{blocks_per_task}")
            }
            ScanPlan::Wgmma {
                n,
                stages,
                blocks_per_task,
            } => write!(f, "wg{n}s{stages}/{blocks_per_task}"),
            ScanPlan::Xor { blocks_per_task } => write!(f, "xor/{blocks_per_task}"),
        }
    }
}

/// Index of u32 word `w` (pages 32w .. 32w+31 of block `b`) of key `q` in the selection buffer
/// (`pirq_sel_word_index` / `pirq_sel_word_index_wg` in `kernels/pirq_common.cuh`).
pub fn sel_word_index(layout: SelLayout, np_total: usize, b: usize, q: usize, w: usize) -> usize {
    match layout {
        SelLayout::Mma => {
            ((b * np_total + q / 16) * 32 + 4 * (q % 8) + w % 4) * 4 + 2 * ((q / 8) % 2) + w / 4
        }
        SelLayout::Wgmma => {
            (b * np_total + q / 16) * 128 + 64 * ((q / 8) % 2) + 32 * (w / 4) + 4 * (q % 8) + w % 4
        }
    }
}

/// Reads key `q`'s selection bits back out of `layout` into the `eval_full` bitmap layout
/// (index p = bit p % 64 of word p / 64), for `2^n` indices. Used by the parity tests.
pub fn sel_to_bitmap(
    sel: &[u32],
    layout: SelLayout,
    padded_keys: usize,
    q: usize,
    domain_bits: u8,
) -> Vec<u64> {
    let np_total = padded_keys / 16;
    let bits = 1u64 << domain_bits;
    let mut out = vec![0u64; bits.div_ceil(64) as usize];
    for p in 0..bits {
        let (b, j) = (p / BLOCK_PAGES, (p % BLOCK_PAGES) as usize);
        let idx = sel_word_index(layout, np_total, b as usize, q, j / 32);
        if sel[idx] >> (j % 32) & 1 == 1 {
            out[(p / 64) as usize] |= 1 << (p % 64);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes() {
        let s = Shape::new(4096, 1 << 24);
        assert_eq!(
            (
                s.domain_bits,
                s.tree_depth(),
                s.leaf_levels(),
                s.top_levels()
            ),
            (24, 17, 7, 10)
        );
        assert_eq!(s.sel_blocks(), 1 << 16);
        assert_eq!(s.scan_blocks(), 1 << 16);
        assert_eq!(s.db_bytes(), 64 << 30);
        let shard = Shape::shard(4096, 1 << 24, (5 << 14) + 256..(9 << 14) + 512);
        assert_eq!(shard.blocks_per_leaf_node(), 64);
        assert_eq!(shard.leaf_nodes(), 5..10);
        assert_eq!(shard.sel_first_block(), 1);
        assert_eq!(shard.page_range(), (5 << 14) + 256..(9 << 14) + 512);
        let tiny = Shape::shard(256, 1000, 512..1000);
        assert_eq!((tiny.leaf_nodes(), tiny.sel_first_block()), (0..1, 2));
        let small = Shape::new(256, 3);
        assert_eq!(
            (
                small.domain_bits,
                small.tree_depth(),
                small.sel_blocks(),
                small.scan_blocks()
            ),
            (2, 0, 1, 1)
        );
        let odd = Shape::new(512, 1000);
        assert_eq!(
            (
                odd.domain_bits,
                odd.tree_depth(),
                odd.sel_blocks(),
                odd.scan_blocks()
            ),
            (10, 3, 4, 4)
        );
    }

    #[test]
    fn plans_pad_and_name() {
        for q in 1..=600 {
            let plan = ScanPlan::for_keys(q);
            let padded = plan.padded_keys(q);
            assert!(
                padded >= q
                    && padded.is_multiple_of(16)
                    && padded.is_multiple_of(plan.keys_per_group())
            );
            assert_eq!(ScanPlan::parse(&plan.to_string()), Some(plan), "{plan}");
        }
        assert_eq!(
            ScanPlan::for_keys(128).kernel_name(),
            "scan_mma_m2_n8_s4_w2"
        );
        assert_eq!(ScanPlan::for_keys(192).padded_keys(192), 192);
        assert_eq!(
            ScanPlan::parse("xor/64"),
            Some(ScanPlan::Xor {
                blocks_per_task: 64
            })
        );
        assert_eq!(ScanPlan::parse("m3n3s3w1"), None);
    }

    #[test]
    fn wgmma_plans_pad_least_and_parse() {
        for q in 1..=1024 {
            let plan = ScanPlan::for_keys_wgmma(q);
            let padded = plan.padded_keys(q);
            assert!(padded >= q && padded.is_multiple_of(16), "{plan} q={q}");
            assert_eq!(ScanPlan::parse(&plan.to_string()), Some(plan), "{plan}");
            if q > 64 {
                assert_eq!(plan.sel_layout(), SelLayout::Wgmma);
                // No wgmma key group pads less.
                for &(n, _) in WGMMA_VARIANTS {
                    assert!(padded <= q.next_multiple_of(n as usize), "q={q} {plan}");
                }
            } else {
                assert_eq!(plan, ScanPlan::for_keys(q));
            }
        }
        let n = |q| match ScanPlan::for_keys_wgmma(q) {
            ScanPlan::Wgmma { n, .. } => n,
            other => panic!("{other}"),
        };
        assert_eq!(
            (n(128), n(192), n(256), n(384), n(512)),
            (128, 192, 256, 192, 256)
        );
        assert_eq!(ScanPlan::parse("wg256s4"), None, "not compiled");
        assert_eq!(
            ScanPlan::parse("wg128s8/77"),
            Some(ScanPlan::Wgmma {
                n: 128,
                stages: 8,
                blocks_per_task: 77
            })
        );
    }

    #[test]
    fn both_selection_layouts_place_every_word_once_in_its_chunk() {
        let np_total = 3;
        for layout in [SelLayout::Mma, SelLayout::Wgmma] {
            let mut seen = vec![false; 2 * np_total * 128];
            for b in 0..2 {
                for q in 0..np_total * 16 {
                    for w in 0..8 {
                        let i = sel_word_index(layout, np_total, b, q, w);
                        // The 512-byte chunk (b, q / 16) is the same in both layouts.
                        assert_eq!(i / 128, b * np_total + q / 16, "{layout:?}");
                        assert!(!seen[i], "{layout:?} b={b} q={q} w={w}");
                        seen[i] = true;
                    }
                }
            }
            assert!(seen.iter().all(|&s| s));
        }
    }

    #[test]
    fn key_record_layout() {
        let mut rng = rand::rng();
        let (k0, _) = pirq_shared::dpf::generate(20, 12345, &mut rng).unwrap();
        let mut rec = vec![0u32; KEY_WORDS];
        pack_key(&k0, &mut rec);
        assert_eq!(&rec[..4], k0.root());
        assert_eq!(rec[4], 0);
        assert_eq!(&rec[8..12], k0.cw_out());
        let cw = &k0.correction_words()[12];
        assert_eq!(&rec[16 + 8 * 12..16 + 8 * 12 + 4], &cw.seed);
        assert_eq!(
            rec[16 + 8 * 12 + 4],
            cw.t_left as u32 | (cw.t_right as u32) << 1
        );
    }
}
