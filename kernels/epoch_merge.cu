// epoch_merge.cu: the epoch window's merge on the device. CPU twin: `DeltaWindow::merge`
// (scan/src/epoch_window.rs).
//
// The scan reads the base pages (the oldest epoch of the window). A key pinned to a later epoch e
// needs, on top of that, every page change between the base and e (SPEC §3):
//
//   answer(e) = scan(base) XOR  XOR_{epochs e' in (base, e]}  XOR_{pages p written at e'}  bit(p) * step_e'(p)
//
// where step_e'(p) = page_p(e') XOR page_p(e' - 1). The window keeps these steps resident in
// device memory (uploaded once per update, dropped when the base absorbs them), listed as one
// table of entries sorted by epoch: entry i is page pages[i] with its step at device address
// diffs[i] (words_per_page u32 words). A key pinned to epoch e merges a prefix of the table:
// limits[q] = the number of entries of epochs <= e (0 at the base).
//
// One launch merges all keys of a pass into the scan's answers (q-major u32 words, as
// `scan_unpack` wrote them), reading the selection bits straight from the buffer the expansion
// wrote (layout B, or "B for wgmma" when `wg_layout` is set). Grid: (ceil(words_per_page / blockDim.x), ceil(q_count / 32), entry slices);
// a block owns 32 keys and blockDim.x words of their answers, and walks one slice of the table in
// chunks of blockDim.x entries: its threads first look up the 32 keys' bits of a chunk's pages
// (into shared memory), then every thread XORs the selected steps' words into 32 accumulators,
// so a step word read from memory serves 32 keys. Slices of a long table run in parallel and
// combine with atomicXor.
//
// Only table entries of pages in [page_lo, page_hi) are merged: a pass merges all of them; the
// rotating scan merges, after each segment, that segment's pages, with the table of the base
// the segment was just read from (scan/src/rotation.rs says why that keeps epochs exact).
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

#define PIRQ_MERGE_KEYS 32u
#define PIRQ_MERGE_UNROLL 8u

extern "C" __global__ void __launch_bounds__(256) epoch_merge(
    const unsigned* __restrict__ sel, unsigned np_total, const unsigned long long* __restrict__ pages,
    const unsigned long long* __restrict__ diffs, unsigned entries_per_slice,
    const unsigned* __restrict__ limits, unsigned q_count, unsigned* __restrict__ answers,
    unsigned words_per_page, unsigned wg_layout, unsigned long long page_lo, unsigned long long page_hi) {
    __shared__ unsigned mask[256];
    __shared__ const unsigned* step[256];
    const unsigned q0 = blockIdx.y * PIRQ_MERGE_KEYS;
    const unsigned wd = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned lim[PIRQ_MERGE_KEYS];
    unsigned end = 0;
#pragma unroll
    for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k) {
        lim[k] = q0 + k < q_count ? limits[q0 + k] : 0u;
        end = max(end, lim[k]);
    }
    const unsigned first = blockIdx.z * entries_per_slice;
    end = min(end, first + entries_per_slice);
    unsigned acc[PIRQ_MERGE_KEYS];
#pragma unroll
    for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k) acc[k] = 0;
    for (unsigned chunk = first; chunk < end; chunk += blockDim.x) {
        __syncthreads();  // the previous chunk's mask and step are read
        const unsigned i = chunk + threadIdx.x;
        unsigned m = 0;
        const unsigned long long p = i < end ? pages[i] : 0ull;
        if (i < end && p >= page_lo && p < page_hi) {
            const unsigned long long b = p / PIRQ_BLOCK_PAGES;
            const unsigned j = (unsigned)(p % PIRQ_BLOCK_PAGES);
#pragma unroll
            for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k)
                if (i < lim[k]) {
                    const unsigned long long w = wg_layout ? pirq_sel_word_index_wg(b, np_total, q0 + k, j >> 5)
                                                           : pirq_sel_word_index(b, np_total, q0 + k, j >> 5);
                    m |= ((sel[w] >> (j & 31u)) & 1u) << k;
                }
            step[threadIdx.x] = (const unsigned*)diffs[i];
        }
        mask[threadIdx.x] = m;
        __syncthreads();
        const unsigned n = min(blockDim.x, end - chunk);
        if (wd < words_per_page) {
            // 8 entries at a time, their loads issued together: one load in flight per thread
            // left the merge latency-bound (6.6 ms for 150k entries, Q = 256, on an H100).
            unsigned t = 0;
            for (; t + PIRQ_MERGE_UNROLL <= n; t += PIRQ_MERGE_UNROLL) {
                unsigned mt[PIRQ_MERGE_UNROLL], v[PIRQ_MERGE_UNROLL];
#pragma unroll
                for (unsigned u = 0; u < PIRQ_MERGE_UNROLL; ++u) {
                    mt[u] = mask[t + u];
                    v[u] = mt[u] ? __ldg(step[t + u] + wd) : 0u;
                }
#pragma unroll
                for (unsigned u = 0; u < PIRQ_MERGE_UNROLL; ++u)
#pragma unroll
                    for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k) acc[k] ^= ((mt[u] >> k) & 1u) ? v[u] : 0u;
            }
            for (; t < n; ++t) {
                const unsigned mt = mask[t];
                if (mt == 0) continue;
                const unsigned v = __ldg(step[t] + wd);
#pragma unroll
                for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k) acc[k] ^= ((mt >> k) & 1u) ? v : 0u;
            }
        }
    }
    if (wd >= words_per_page) return;
#pragma unroll
    for (unsigned k = 0; k < PIRQ_MERGE_KEYS; ++k)
        if (q0 + k < q_count && acc[k] != 0)
            atomicXor(answers + (unsigned long long)(q0 + k) * words_per_page + wd, acc[k]);
}
