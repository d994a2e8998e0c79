// scan_mma_sb.cu: an experiment kept for the record, not loaded by the backend (see
// docs/bench/gpu-scan.md): the CTA streams A and B through one shared-memory ring.
// Result on the H100: slower than scan_mma.cu's per-warp A ring with B from L1 (e.g. Q=256 at
// 64 GiB: 62 ms at best vs 54 ms), because the per-step barrier and the register-limited
// occupancy (8 warps/SM for MT=4) leave the tensor pipe idle (ncu: 34% tensor, 32% L1).
// Included by harness.cu after ../scan_mma.cu (it uses that file's helpers).

// ---- Variant with a CTA-shared operand ring ("sb") ----
//
// The kernels above prefetch A (per warp) but load B from L1 just in time; when a CTA's warps
// all wait on the same B miss, nothing hides it, which is what limits tiles of more than 16 mma
// per step. Here the whole CTA streams both operands through one shared-memory ring with cp.async,
// STAGES deep, with one barrier per 256-page step: A tiles are fetched once per CTA (WN warps
// share them) and B chunks once per CTA, and every fragment is a conflict-free 16-byte ld.shared.
// A CTA of W warps = WM x WN covers WM * MT m-tiles and WN * NT n-tiles (layout as above).
template <int MT, int NT, int STAGES, int WN, int W>
__device__ __forceinline__ void scan_mma_sb_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                 unsigned* __restrict__ partial, unsigned mtiles,
                                                 unsigned nblocks, unsigned np_total,
                                                 unsigned blocks_per_task) {
    constexpr int WM = W / WN;
    constexpr int A_CHUNKS = WM * MT * 32;        // uint4 per step
    constexpr int B_CHUNKS = WN * (NT / 2) * 32;  // uint4 per step
    constexpr int STEP = A_CHUNKS + B_CHUNKS;
    extern __shared__ uint4 pirq_ring[];
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
    const unsigned wn = warp % WN, wm = warp / WN;
    const unsigned mt_cta = blockIdx.y * (WM * MT);
    const unsigned np_cta = blockIdx.x * (WN * NT / 2);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const uint4* a_cta = a + (unsigned long long)mt_cta * 32u;
    const unsigned long long a_step = (unsigned long long)mtiles * 32u;
    const uint4* b_cta = b + (unsigned long long)np_cta * 32u;
    const unsigned long long b_step = (unsigned long long)np_total * 32u;

    auto issue = [&](unsigned kb, unsigned slot) {
        uint4* dst = pirq_ring + slot * STEP;
        for (int i = threadIdx.x; i < STEP; i += W * 32) {
            const uint4* src = i < A_CHUNKS ? a_cta + kb * a_step + i : b_cta + kb * b_step + (i - A_CHUNKS);
            pirq_cp_async16<false>(dst + i, src);
        }
    };

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[i][j][r] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (kb0 + s < kb1) issue(kb0 + s, s);
        pirq_cp_commit();
    }
    unsigned slot = 0, fill = STAGES - 1;
    for (unsigned kb = kb0; kb < kb1; ++kb) {
        pirq_cp_wait<STAGES - 2>();
        __syncthreads();  // every thread's copies of this step landed; the refilled slot is free
        if (kb + STAGES - 1 < kb1) issue(kb + STAGES - 1, fill);
        pirq_cp_commit();
        const uint4* sa = pirq_ring + slot * STEP + (wm * MT) * 32 + lane;
        const uint4* sb = pirq_ring + slot * STEP + A_CHUNKS + (wn * (NT / 2)) * 32 + lane;
        uint4 af[MT];
#pragma unroll
        for (int i = 0; i < MT; ++i) af[i] = sa[i * 32];
#pragma unroll
        for (int j = 0; j < NT / 2; ++j) {
            const uint4 bf = sb[j * 32];
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                pirq_mma_b1(acc[i][2 * j], af[i], bf.x, bf.y);
                pirq_mma_b1(acc[i][2 * j + 1], af[i], bf.z, bf.w);
            }
        }
        slot = slot + 1 == STAGES ? 0 : slot + 1;
        fill = fill + 1 == STAGES ? 0 : fill + 1;
    }
    const unsigned ntiles = np_total * 2u;
    const unsigned mt0 = mt_cta + wm * MT, nt0 = (np_cta + wn * (NT / 2)) * 2u;
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                unsigned bits = __ballot_sync(0xffffffffu, acc[i][j][r] & 1);
                const int w = (i * NT + j) * 4 + r;
                if (lane == (unsigned)(w & 31) && bits != 0u)
                    atomicXor(partial + ((unsigned long long)(mt0 + i) * ntiles + nt0 + j) * 4u + r, bits);
            }
}

// scan_mma_sb_m<MT>_n<NT>_s<STAGES>_w<WN>_t<W>: W warps per CTA; shared memory per CTA:
// STAGES * (W / WN * MT + WN * NT / 2) * 512 bytes (dynamic).
#define PIRQ_SCAN_MMA_SB(MT, NT, ST, WN, W)                                                          \
    extern "C" __global__ void __launch_bounds__(W * 32) scan_mma_sb_m##MT##_n##NT##_s##ST##_w##WN##_t##W( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,   \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {           \
        scan_mma_sb_body<MT, NT, ST, WN, W>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task); \
    }

PIRQ_SCAN_MMA_SB(4, 8, 4, 2, 8)
PIRQ_SCAN_MMA_SB(4, 8, 4, 1, 4)
PIRQ_SCAN_MMA_SB(2, 8, 4, 2, 8)
PIRQ_SCAN_MMA_SB(2, 16, 4, 1, 8)
PIRQ_SCAN_MMA_SB(4, 8, 6, 2, 8)
PIRQ_SCAN_MMA_SB(2, 8, 4, 4, 8)
