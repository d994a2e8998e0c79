// scan_mma.cu: one pass over the database for Q keys as a GF(2) matrix product on the binary
// tensor cores: mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc (sm_80+).
//
// CPU twin: `pirq_worker::scan::cpu::CpuScanner::scan` (XOR of the pages each key selects); the
// low bit of the s32 accumulator is the parity, i.e. the answer bit. Layouts A and B are in
// pirq_common.cuh.
//
// Work split. Grid (n-groups, m-groups, k-splits): a warp owns MT m-tiles (16 bit positions each)
// and NT n-tiles (8 keys each) for a run of `blocks_per_task` 256-page blocks (split-K); the CTA's
// warps take consecutive m-tiles of the same blocks, so they read the same B chunks (L1 hits).
// Launch order (x fastest) keeps the CTAs that share a k-split, and thus a B slice, resident
// together (L2 hits), and n-groups that share A tiles adjacent.
//
// A streams from HBM once through a per-warp ring of STAGES shared-memory slots filled with
// cp.async (each lane copies and later reads only its own 16 bytes, so no barrier is needed);
// B comes through L1 with 16-byte loads, one per n-tile pair, reused by all MT m-tiles.
// At the end each accumulator's parity is packed with a ballot and XORed into `partial`
// (layout: word ((mt * ntiles + nt) * 4 + r), bit 4g + t = C register r of lane 4g+t);
// `scan_unpack` turns that into answer pages.
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

__device__ __forceinline__ void pirq_mma_b1(int (&c)[4], const uint4& a, unsigned b0, unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
#endif
}

// cp.async of 16 bytes: .cg (L2 only) when one warp reads the tile, .ca (through L1) when WN warps
// of the CTA read the same tile.
template <bool L1>
__device__ __forceinline__ void pirq_cp_async16(void* smem, const void* gmem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    if (L1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void pirq_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void pirq_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// B loads through L1; B_LAST asks L1 to keep B lines over streamed A lines (evict_last).
template <bool B_LAST>
__device__ __forceinline__ uint4 pirq_ld_b(const uint4* p) {
    if (!B_LAST) return __ldg(p);
    uint4 v;
    asm("ld.global.nc.L1::evict_last.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

template <int MT, int NT, int STAGES, int WN, bool A_L1 = (WN > 1), bool B_LAST = false>
__device__ __forceinline__ void scan_mma_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                              unsigned* __restrict__ partial, unsigned mtiles,
                                              unsigned nblocks, unsigned np_total,
                                              unsigned blocks_per_task) {
    extern __shared__ uint4 pirq_ring[];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned warps = blockDim.x >> 5;
    // WN warps of a CTA share m-tiles (and so A, through L1) and take different n-groups.
    const unsigned wn = warp % WN, wm = warp / WN;
    const unsigned mt0 = (blockIdx.y * (warps / WN) + wm) * MT;
    const unsigned np0 = (blockIdx.x * WN + wn) * (NT / 2);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    if (mt0 >= mtiles) return;
    uint4* ring = pirq_ring + warp * (STAGES * MT * 32) + lane;
    const uint4* a_lane = a + (unsigned long long)mt0 * 32u + lane;
    const unsigned long long a_step = (unsigned long long)mtiles * 32u;
    const uint4* b_lane = b + (unsigned long long)np0 * 32u + lane;
    const unsigned long long b_step = (unsigned long long)np_total * 32u;

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        unsigned kb = kb0 + s;
        if (kb < kb1) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
                pirq_cp_async16<A_L1>(ring + (s * MT + i) * 32, a_lane + kb * a_step + i * 32);
        }
        pirq_cp_commit();
    }
    unsigned slot = 0, fill = STAGES - 1;
    for (unsigned kb = kb0; kb < kb1; ++kb) {
        pirq_cp_wait<STAGES - 2>();
        uint4 af[MT];
#pragma unroll
        for (int i = 0; i < MT; ++i) af[i] = ring[(slot * MT + i) * 32];
        uint4 bf[NT / 2];
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) bf[j] = pirq_ld_b<B_LAST>(b_lane + kb * b_step + j * 32);
        const unsigned next = kb + STAGES - 1;
        if (next < kb1) {
#pragma unroll
            for (int i = 0; i < MT; ++i)
                pirq_cp_async16<A_L1>(ring + (fill * MT + i) * 32, a_lane + next * a_step + i * 32);
        }
        pirq_cp_commit();
        slot = slot + 1 == STAGES ? 0 : slot + 1;
        fill = fill + 1 == STAGES ? 0 : fill + 1;
#pragma unroll
        for (int j = 0; j < NT / 2; ++j)
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                pirq_mma_b1(acc[i][2 * j], af[i], bf[j].x, bf[j].y);
                pirq_mma_b1(acc[i][2 * j + 1], af[i], bf[j].z, bf[j].w);
            }
    }
    // Parities: ballot packs the 32 lanes' bits of one C register; lane (w % 32) does the XOR.
    const unsigned ntiles = np_total * 2u;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                unsigned bits = __ballot_sync(0xffffffffu, acc[i][j][r] & 1);
                const int w = (i * NT + j) * 4 + r;
                if (lane == (unsigned)(w & 31) && bits != 0u)
                    atomicXor(partial + ((unsigned long long)(mt0 + i) * ntiles + np0 * 2u + j) * 4u + r, bits);
            }
}

#define PIRQ_SCAN_MMA(MT, NT, ST, WN)                                                               \
    extern "C" __global__ void __launch_bounds__(256) scan_mma_m##MT##_n##NT##_s##ST##_w##WN(       \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,  \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {          \
        scan_mma_body<MT, NT, ST, WN>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);      \
    }

// The variants the backend picks from (by Q) and the bench sweeps: scan_mma_m<MT>_n<NT>_s<STAGES>_w<WN>.
// A CTA of W warps covers (W / WN) * MT m-tiles and WN * NT n-tiles; shared memory per CTA:
// W * STAGES * MT * 512 bytes (dynamic).
PIRQ_SCAN_MMA(2, 2, 8, 1)
PIRQ_SCAN_MMA(2, 4, 6, 1)
PIRQ_SCAN_MMA(4, 4, 4, 1)
PIRQ_SCAN_MMA(2, 8, 4, 1)
PIRQ_SCAN_MMA(2, 8, 4, 2)
PIRQ_SCAN_MMA(2, 8, 6, 2)
PIRQ_SCAN_MMA(1, 16, 4, 2)

// partial (mma layout above) -> answers: page q, u32 word w = bits 32w .. 32w+31 = m-tiles 2w, 2w+1.
// One thread per answer word; grid covers q_count * words_per_page. With `accumulate` the
// parities are XORed into the answers instead of written: the rotating scan keeps each key's
// answer across the segments of its turn there (and `partial` is cleared for every segment).
extern "C" __global__ void scan_unpack(const unsigned* __restrict__ partial, unsigned* __restrict__ answers,
                                       unsigned q_count, unsigned words_per_page, unsigned np_total,
                                       unsigned accumulate) {
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned long long)q_count * words_per_page) return;
    const unsigned q = (unsigned)(i / words_per_page), w = (unsigned)(i % words_per_page);
    const unsigned ntiles = np_total * 2u, nt = q >> 3, col = q & 7u, t = col >> 1, odd = col & 1u;
    unsigned out = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const unsigned* p = partial + ((unsigned long long)(2u * w + h) * ntiles + nt) * 4u;
        const unsigned top = p[odd], bottom = p[2u + odd];  // rows g and g + 8
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            out |= ((top >> (4 * g + t)) & 1u) << (16 * h + g);
            out |= ((bottom >> (4 * g + t)) & 1u) << (16 * h + 8 + g);
        }
    }
    answers[i] = accumulate ? answers[i] ^ out : out;
}
