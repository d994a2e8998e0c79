// db_layout.cu: putting the database on the GPU in the scan's layout A (see pirq_common.cuh).
//
// - `db_transpose`: page-major bytes (a chunk of a .pirdb staged through pinned memory) to A.
//   Run once at load.
// - `db_synthetic`: the same transpose, with the page words computed on the fly instead of read.
//   CPU twin: `pirq_shared::db::synthetic::fill_page` (benches never carry 64 GiB of pages).
// - `read_all`: reads A once; its time is the floor of any pass (timed in the same bench run).
// - `db_page_read`, `db_page_xor`: single pages of A, for epoch updates (below).
//
// A warp owns 32 pages (one "word" of a block: pages 32pw .. 32pw+31) and a run of page words;
// for each 32-bit page word it turns 32 lanes x 32 bits into 32 rows x 32 page-bits with 32
// ballots, and lane i keeps row i.
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

#define PIRQ_G 0x9E3779B97F4A7C15ull

__device__ __forceinline__ unsigned long long pirq_mix64(unsigned long long z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Bit-transposes one 32-bit page word `v` held by each lane (lane = page 32pw + lane) at page
// word `w` and stores the 32 rows 32w .. 32w+31 of word pw of block `b`.
__device__ __forceinline__ void pirq_store_rows(unsigned* __restrict__ a, unsigned long long b,
                                                unsigned mtiles, unsigned pw, unsigned w,
                                                unsigned v, unsigned lane) {
    unsigned mine = 0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        unsigned bal = __ballot_sync(0xffffffffu, (v >> i) & 1u);
        if (lane == (unsigned)i) mine = bal;
    }
    // Row m = 32w + lane: tile mt = 2w + lane/16, row r = lane%16 in the tile.
    const unsigned mt = 2u * w + (lane >> 4), r = lane & 15u;
    const unsigned g = r & 7u, half = r >> 3, t = pw & 3u, hi = pw >> 2;
    const unsigned long long idx = ((b * mtiles + mt) * 32ull + 4u * g + t) * 4ull + half + 2u * hi;
    a[idx] = mine;
}

// Grid (blocks in chunk, ceil(words_per_page / 32)), 256 threads (8 warps = 8 page words pw).
// `pages` holds the chunk's pages back to back starting at page 256 * first_block; pages at or
// past `num_pages` read as zero. Each warp handles 32 page words (u32) of its 32 pages.
extern "C" __global__ void __launch_bounds__(256) db_transpose(
    unsigned* __restrict__ a, const uint4* __restrict__ pages, unsigned long long first_block,
    unsigned long long num_pages, unsigned words_per_page) {
    const unsigned lane = threadIdx.x & 31u, pw = threadIdx.x >> 5;
    const unsigned long long b = first_block + blockIdx.x;
    const unsigned long long p = b * PIRQ_BLOCK_PAGES + 32u * pw + lane;
    const unsigned long long local = (unsigned long long)blockIdx.x * PIRQ_BLOCK_PAGES + 32u * pw + lane;
    const unsigned mtiles = words_per_page * 2u;
    const unsigned w0 = blockIdx.y * 32u;
    const bool live = p < num_pages;
    for (unsigned w = w0; w < w0 + 32u && w < words_per_page; w += 4) {
        uint4 v = make_uint4(0, 0, 0, 0);
        if (live) v = pages[(local * words_per_page + w) / 4];
        pirq_store_rows(a, b, mtiles, pw, w + 0, v.x, lane);
        pirq_store_rows(a, b, mtiles, pw, w + 1, v.y, lane);
        pirq_store_rows(a, b, mtiles, pw, w + 2, v.z, lane);
        pirq_store_rows(a, b, mtiles, pw, w + 3, v.w, lane);
    }
}

// Like db_transpose, with page p's u64 word i = mix64(mix64(seed + (p+1)G) + (i+1)G).
extern "C" __global__ void __launch_bounds__(256) db_synthetic(
    unsigned* __restrict__ a, unsigned long long seed, unsigned long long first_block,
    unsigned long long num_pages, unsigned words_per_page) {
    const unsigned lane = threadIdx.x & 31u, pw = threadIdx.x >> 5;
    const unsigned long long b = first_block + blockIdx.x;
    const unsigned long long p = b * PIRQ_BLOCK_PAGES + 32u * pw + lane;
    const unsigned mtiles = words_per_page * 2u;
    const unsigned w0 = blockIdx.y * 32u;
    const bool live = p < num_pages;
    const unsigned long long base = pirq_mix64(seed + (p + 1ull) * PIRQ_G);
    for (unsigned w = w0; w < w0 + 32u && w < words_per_page; w += 2) {
        unsigned long long v = 0;
        if (live) v = pirq_mix64(base + ((unsigned long long)(w / 2) + 1ull) * PIRQ_G);
        pirq_store_rows(a, b, mtiles, pw, w + 0, (unsigned)v, lane);
        pirq_store_rows(a, b, mtiles, pw, w + 1, (unsigned)(v >> 32), lane);
    }
}

// Reads n16 uint4 of A once; writes to `sink` only on an impossible value, so nothing is elided.
extern "C" __global__ void __launch_bounds__(256) read_all(const uint4* __restrict__ a,
                                                          unsigned long long n16,
                                                          unsigned* __restrict__ sink) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    uint4 acc = make_uint4(0, 0, 0, 0);
    for (; i + 3 * stride < n16; i += 4 * stride) {
        uint4 v0 = __ldcs(a + i), v1 = __ldcs(a + i + stride), v2 = __ldcs(a + i + 2 * stride),
              v3 = __ldcs(a + i + 3 * stride);
        acc.x ^= v0.x ^ v1.x ^ v2.x ^ v3.x; acc.y ^= v0.y ^ v1.y ^ v2.y ^ v3.y;
        acc.z ^= v0.z ^ v1.z ^ v2.z ^ v3.z; acc.w ^= v0.w ^ v1.w ^ v2.w ^ v3.w;
    }
    for (; i < n16; i += stride) {
        uint4 v = __ldcs(a + i);
        acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u && acc.x == 0x7f4a7c15u) sink[0] = 1;
}

// ---- Single pages in layout A: epoch updates touch only their pages' bits ----
//
// Page p lives at bit p % 32 of word (p % 256) / 32 of every row of block p / 256. These two
// kernels read pages back out of A (the base contents an update is diffed against) and XOR page
// diffs into A (moving the base forward when the epoch window folds), without a host copy of the
// database and without re-transposing whole blocks. Thread (i, word) covers rows 32 word ..
// 32 word + 31 of page pages[i]. CPU twin: `pirq_shared::bits::xor_into` on the page bytes.
__device__ __forceinline__ unsigned long long pirq_row_word_index(unsigned long long b, unsigned mtiles,
                                                                  unsigned m, unsigned w) {
    const unsigned mt = m >> 4, r = m & 15u, g = r & 7u, half = r >> 3;
    return ((b * mtiles + mt) * 32ull + 4u * g + (w & 3u)) * 4ull + half + 2u * (w >> 2);
}

// Grid (count, ceil(words_per_page / 256)), 256 threads: out[i] = page pages[i] (u32 words).
extern "C" __global__ void db_page_read(const unsigned* __restrict__ a, const unsigned long long* __restrict__ pages,
                                        unsigned count, unsigned* __restrict__ out, unsigned words_per_page) {
    const unsigned i = blockIdx.x, wd = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= count || wd >= words_per_page) return;
    const unsigned long long p = pages[i], b = p / PIRQ_BLOCK_PAGES;
    const unsigned j = (unsigned)(p % PIRQ_BLOCK_PAGES), w = j >> 5, bit = j & 31u;
    const unsigned mtiles = words_per_page * 2u;
    unsigned v = 0;
    for (unsigned r = 0; r < 32; ++r)
        v |= ((a[pirq_row_word_index(b, mtiles, 32u * wd + r, w)] >> bit) & 1u) << r;
    out[(unsigned long long)i * words_per_page + wd] = v;
}

// Same grid: XORs diffs[i] (u32 words) into page pages[i] of A. Pages of one block share words,
// hence the atomics; a page must not appear twice in one launch.
extern "C" __global__ void db_page_xor(unsigned* __restrict__ a, const unsigned long long* __restrict__ pages,
                                       unsigned count, const unsigned* __restrict__ diffs, unsigned words_per_page) {
    const unsigned i = blockIdx.x, wd = blockIdx.y * blockDim.x + threadIdx.x;
    if (i >= count || wd >= words_per_page) return;
    const unsigned long long p = pages[i], b = p / PIRQ_BLOCK_PAGES;
    const unsigned j = (unsigned)(p % PIRQ_BLOCK_PAGES), w = j >> 5, bit = j & 31u;
    const unsigned mtiles = words_per_page * 2u;
    const unsigned d = diffs[(unsigned long long)i * words_per_page + wd];
    for (unsigned r = 0; r < 32; ++r)
        if ((d >> r) & 1u) atomicXor(a + pirq_row_word_index(b, mtiles, 32u * wd + r, w), 1u << bit);
}
