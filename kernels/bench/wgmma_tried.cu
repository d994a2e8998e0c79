// Variants of scan_wgmma.cu that lost on the H100 (2026-11-25, docs/bench/gpu-scan.md, "Tried on
// 2026-11-25"), kept for the record and for the next attempt; only the bench harness
// (wgmma.cu) instantiates them. Each body takes the arguments of scan_wgmma_n*_s8_f0 and writes
// `partial` the same way, so the harness checks them against the host like the kernel in use.
//
// - scan_wgmma_wide_body: three consumer warpgroups (192 rows a CTA, so B is read once for 1.5x
//   the rows) and K_BATCH blocks per commit group: 37 ms at Q = 256 against 30-34 ms; the
//   producer folded into thread 0 and a 168-register cap (12 warps = 3 per sub-partition).
// - scan_wgmma_ag_body: A straight from global memory into registers (D steps ahead), only B in
//   shared memory: 43-53 ms (the loads' latency is not hidden even 16 steps ahead).
// Included by wgmma.cu after ../scan_wgmma.cu (its helpers: pirq_wgmma_b1, mbarriers, copies).

// The wide body: WGS consumer warpgroups (64 bit rows each, so 64 * WGS rows per CTA) and K_BATCH
// 256-page blocks per commit group.
//
// Why wider: a CTA streams, per 256-page block, its rows of A (64 * WGS rows x 32 bytes) and the
// N keys' bits of B (N x 32 bytes) from L2 through shared memory. With two warpgroups (128 rows) and
// N = 256 that is 12 KiB per 2 x 4.2 M binary MACs; at the tensor cores' peak the 132 SMs would ask
// L2 for ~11 TB/s, and ncu showed L2 at 73 % with no unit saturated (docs/bench/gpu-scan.md).
// Three warpgroups (192 rows) read B once for 1.5x the rows: 1.28x fewer bytes per MAC.
// Their accumulators (128 registers a thread at N = 256; ptxas needs 158 for the wgmma) leave no
// room for a producer warp (416 threads get 152 registers each), so with three warpgroups the
// producer's job is folded into thread 0: it fills the ring first and refills the stages of each
// batch one batch later, once every warp has released them (by then the others are done with
// them, so thread 0 seldom waits).
// Why batches: each consumer warpgroup waited for every wgmma before it released the stage, so
// the latency of one wgmma (issue to retire) was paid per block; K_BATCH blocks issued back to back
// into the same accumulators (the hardware chains them) pay it once per K_BATCH.
//
// Rows past `mtiles` (the last CTA row when mtiles is not a multiple of 4 * WGS) are not copied:
// those warps compute on stale shared memory and their results are not written.
template <int V> struct pirq_int { static constexpr int value = V; };
#define PIRQ_WGMMA_WIDE_THREADS(WGS) ((WGS) * 128u + ((WGS) >= 3 ? 0u : 32u))
template <int N, int STAGES, int WGS, int K_BATCH>
__device__ __forceinline__ void scan_wgmma_wide_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                     unsigned* __restrict__ partial, unsigned mtiles,
                                                     unsigned nblocks, unsigned np_total,
                                                     unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr bool PRODUCER_WARP = WGS < 3;
    constexpr unsigned CTA_MTILES = 4u * WGS;
    constexpr unsigned A_BYTES = CTA_MTILES * 512u;
    constexpr unsigned B_BYTES = N * 32u;
    constexpr unsigned STAGE_BYTES = A_BYTES + B_BYTES;
    static_assert(PRODUCER_WARP || STAGES >= 3 * K_BATCH, "a batch, its predecessor and a prefetch");
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * CTA_MTILES;
    const unsigned a_bytes = min(CTA_MTILES, mtiles - mt0) * 512u;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES;
    // Copies step i's A rows and B keys into its stage, completing on the stage's `full` barrier.
    auto fill = [&](unsigned i) {
        const unsigned s = i % STAGES;
        const unsigned long long kb = kb0 + i;
        const unsigned full = full0 + 8u * s, dst = ring + s * STAGE_BYTES;
        pirq_mbar_expect_tx(full, a_bytes + B_BYTES);
        pirq_bulk_copy(dst, a + (kb * mtiles + mt0) * 32u, a_bytes, full);
        pirq_bulk_copy(dst + A_BYTES, b + (kb * np_total + np0) * 32u, B_BYTES, full);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, CTA_MTILES);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (PRODUCER_WARP && warp >= CTA_MTILES) {
        if (lane == 0) {
            for (unsigned i = 0; i < steps; ++i) {
                if (i >= (unsigned)STAGES) pirq_mbar_wait(empty0 + 8u * (i % STAGES), ((i / STAGES) - 1u) & 1u);
                fill(i);
            }
        }
    } else {
        const bool refiller = !PRODUCER_WARP && threadIdx.x == 0;
        if (refiller)
            for (unsigned i = 0; i < min(steps, (unsigned)STAGES); ++i) fill(i);
        int acc[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[i] = 0;
        // One commit group of KB blocks from step i: wait for their stages, issue the wgmmas back
        // to back, wait for them, release the stages, and (thread 0) refill the previous group's.
        // KB is a compile-time count so that every wgmma is issued on a uniform path (a wgmma
        // under a run-time condition makes ptxas serialize them all).
        unsigned released = 0;  // thread 0: the steps whose stages were refilled
        auto batch = [&](unsigned i, auto kb_count) {
            constexpr int KB = decltype(kb_count)::value;
            uint4 af[KB];
#pragma unroll
            for (int j = 0; j < KB; ++j) {
                const unsigned s = (i + j) % STAGES;
                pirq_mbar_wait(full0 + 8u * s, ((i + j) / STAGES) & 1u);
                af[j] = pirq_wgmma_a_fragment(ring + s * STAGE_BYTES + (warp * 32u + lane) * 16u);
            }
            pirq_wgmma_fence();
#pragma unroll
            for (int j = 0; j < KB; ++j)
                pirq_wgmma_b1<N>(acc, af[j], pirq_wgmma_desc(ring + ((i + j) % STAGES) * STAGE_BYTES + A_BYTES));
            pirq_wgmma_commit();
            pirq_wgmma_wait<0>();
#pragma unroll
            for (int j = 0; j < KB; ++j) pirq_keep(af[j]);
            __syncwarp();
            if (lane == 0)
#pragma unroll
                for (int j = 0; j < KB; ++j) pirq_mbar_arrive(empty0 + 8u * ((i + j) % STAGES));
            // The steps before this group are released by every warp by now (or soon): their
            // stages take the steps STAGES later.
            if (refiller) {
                for (; released < i && released + STAGES < steps; ++released) {
                    pirq_mbar_wait(empty0 + 8u * (released % STAGES), (released / STAGES) & 1u);
                    fill(released + STAGES);
                }
            }
        };
        unsigned i = 0;
        for (; i + K_BATCH <= steps; i += K_BATCH) batch(i, pirq_int<K_BATCH>{});
        for (; i < steps; ++i) batch(i, pirq_int<1>{});
        // The last batch's stages need no refill, but their copies for later steps were never
        // issued either: nothing is in flight when the CTA leaves.
        pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
    }
#endif
}

// scan_wgmma_n<N>_s<STAGES>_w<consumer warpgroups>_k<blocks per commit group>; threads:
// PIRQ_WGMMA_WIDE_THREADS(WGS).
#define PIRQ_SCAN_WGMMA_WIDE(N, ST, WGS, KB)                                                         \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_WIDE_THREADS(WGS), 1)                      \
        scan_wgmma_n##N##_s##ST##_w##WGS##_k##KB(const uint4* __restrict__ a, const uint4* __restrict__ b, \
                                                 unsigned* __restrict__ partial, unsigned mtiles,       \
                                                 unsigned nblocks, unsigned np_total,                  \
                                                 unsigned blocks_per_task) {                           \
        scan_wgmma_wide_body<N, ST, WGS, KB>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task); \
    }
PIRQ_SCAN_WGMMA_WIDE(256, 8, 2, 2)
PIRQ_SCAN_WGMMA_WIDE(256, 6, 3, 1)
PIRQ_SCAN_WGMMA_WIDE(256, 8, 3, 1)
PIRQ_SCAN_WGMMA_WIDE(256, 8, 3, 2)
PIRQ_SCAN_WGMMA_WIDE(256, 12, 3, 2)
PIRQ_SCAN_WGMMA_WIDE(192, 8, 3, 2)
PIRQ_SCAN_WGMMA_WIDE(128, 8, 3, 2)

// The A-from-global body: the database rows go from global memory straight into each lane's
// registers (16 bytes a lane, 512 contiguous bytes a warp, D steps ahead in a register ring);
// only the keys' bits (B) pass through shared memory, and thread 0 drives their copies.
//
// Why A from global: per 256-page block a CTA of two warpgroups moves 32 KiB through shared
// memory — the copy engine writes A (4 KiB) and B (8 KiB), the lanes read A (4 KiB) and each
// warpgroup's wgmma reads B (2 x 8 KiB) — 256 cycles of its 128 bytes a cycle, more than the
// 2 x 4.2 M binary MACs take at the tensor cores' peak (~240 cycles). Measured: three warpgroups
// (more rows per B read) and batched commits did not help, as a shared-memory limit predicts.
// Loading A into registers directly takes 8 of the 32 KiB off shared memory.
// Why no producer warp: registers are split per SM sub-partition (16,384 each); a ninth warp puts
// three warps on one of them, capping every thread at 168 registers, and the accumulators (128)
// plus a ring of D x 4 registers do not fit. With eight warps each gets up to 255. Thread 0
// fills the ring first and refills each stage once every warp has released it, one step late
// (by then the others are done with it, so thread 0 seldom waits).
template <int N, int STAGES, int D>
__device__ __forceinline__ void scan_wgmma_ag_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                   unsigned* __restrict__ partial, unsigned mtiles,
                                                   unsigned nblocks, unsigned np_total,
                                                   unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr unsigned STAGE_BYTES = N * 32u;
    static_assert(STAGES >= 3, "a step, its predecessor awaiting refill and a prefetch");
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * PIRQ_WGMMA_OLD_MTILES;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES;
    const bool refiller = threadIdx.x == 0;
    auto fill = [&](unsigned t) {
        const unsigned s = t % STAGES, full = full0 + 8u * s;
        pirq_mbar_expect_tx(full, STAGE_BYTES);
        pirq_bulk_copy(ring + s * STAGE_BYTES, b + ((unsigned long long)(kb0 + t) * np_total + np0) * 32u,
                       STAGE_BYTES, full);
    };
    if (refiller) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (refiller)
        for (unsigned t = 0; t < min(steps, (unsigned)STAGES); ++t) fill(t);
    int acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = 0;
    // This lane's 16 bytes of its m-tile in block kb0 + t: ap + t * astride (mtiles is a
    // multiple of 8 for pages of at least 256 bytes, so every warp's tile exists).
    const uint4* ap = a + ((unsigned long long)kb0 * mtiles + mt0 + warp) * 32u + lane;
    const unsigned long long astride = (unsigned long long)mtiles * 32u;
    // One step: wait for B, multiply, release B's stage, refill the previous step's stage.
    auto step = [&](unsigned t, uint4& af) {
        const unsigned s = t % STAGES;
        pirq_mbar_wait(full0 + 8u * s, (t / STAGES) & 1u);
        pirq_wgmma_fence();
        pirq_wgmma_b1<N>(acc, af, pirq_wgmma_desc(ring + s * STAGE_BYTES));
        pirq_wgmma_commit();
        pirq_wgmma_wait<0>();
        pirq_keep(af);
        __syncwarp();
        if (lane == 0) pirq_mbar_arrive(empty0 + 8u * s);
        if (refiller && t >= 1u && t - 1u + STAGES < steps) {
            const unsigned r = t - 1u;
            pirq_mbar_wait(empty0 + 8u * (r % STAGES), (r / STAGES) & 1u);
            fill(r + STAGES);
        }
    };
    const unsigned ring_steps = steps - steps % D;
    uint4 ar[D];
#pragma unroll
    for (int j = 0; j < D; ++j)
        ar[j] = (unsigned)j < ring_steps ? __ldg(ap + j * astride) : make_uint4(0, 0, 0, 0);
    unsigned i = 0;
    for (; i < ring_steps; i += D) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            step(i + j, ar[j]);
            if (i + j + D < ring_steps) ar[j] = __ldg(ap + (i + j + D) * astride);
        }
    }
    for (; i < steps; ++i) {
        uint4 af = __ldg(ap + i * astride);
        step(i, af);
    }
    // The last step's stage needs no refill (t - 1 + STAGES >= steps for the final steps).
    pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
#endif
}
#define PIRQ_WGMMA_AG_THREADS 256u
#define PIRQ_SCAN_WGMMA_AG(N, ST, D)                                                                 \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_AG_THREADS, 1) scan_wgmma_n##N##_s##ST##_ag##D( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_ag_body<N, ST, D>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);     \
    }
PIRQ_SCAN_WGMMA_AG(256, 8, 4)
PIRQ_SCAN_WGMMA_AG(256, 8, 8)
PIRQ_SCAN_WGMMA_AG(256, 12, 8)
PIRQ_SCAN_WGMMA_AG(256, 16, 8)
PIRQ_SCAN_WGMMA_AG(256, 16, 12)
PIRQ_SCAN_WGMMA_AG(256, 16, 16)
PIRQ_SCAN_WGMMA_AG(128, 8, 8)
PIRQ_SCAN_WGMMA_AG(192, 8, 8)


// The fold body: the kernel in use (A and B through the stage ring, A from shared memory into
// registers) without the producer warp, so that eight warps get up to 255 registers instead of
// 168 (a ninth warp puts three warps on one SM sub-partition's 16,384 registers), and with
// INFLIGHT wgmmas left in flight (A in a ring of INFLIGHT + 1 register sets). Thread 0 refills a
// stage one step after its own warp released it, once every warp has.
template <int N, int STAGES, int INFLIGHT>
__device__ __forceinline__ void scan_wgmma_fold_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                     unsigned* __restrict__ partial, unsigned mtiles,
                                                     unsigned nblocks, unsigned np_total,
                                                     unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr int R = INFLIGHT + 1;
    static_assert(STAGES >= INFLIGHT + 2, "thread 0 refills one step behind the released ones");
    constexpr unsigned A_BYTES = PIRQ_WGMMA_OLD_MTILES * 512u;
    constexpr unsigned B_BYTES = N * 32u;
    constexpr unsigned STAGE_BYTES = A_BYTES + B_BYTES;
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * PIRQ_WGMMA_OLD_MTILES;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES;
    const bool refiller = threadIdx.x == 0;
    auto fill = [&](unsigned t) {
        const unsigned s = t % STAGES, full = full0 + 8u * s;
        const unsigned long long kb = kb0 + t;
        pirq_mbar_expect_tx(full, STAGE_BYTES);
        pirq_bulk_copy(ring + s * STAGE_BYTES, a + (kb * mtiles + mt0) * 32u, A_BYTES, full);
        pirq_bulk_copy(ring + s * STAGE_BYTES + A_BYTES, b + (kb * np_total + np0) * 32u, B_BYTES, full);
    };
    if (refiller) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (refiller)
        for (unsigned t = 0; t < min(steps, (unsigned)STAGES); ++t) fill(t);
    int acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = 0;
    unsigned released = 0, refilled = 0;
    // Steps below `upto` are complete for this warp: release their stages; thread 0 then refills
    // the stages released one step earlier.
    auto release_upto = [&](unsigned upto) {
        __syncwarp();
        for (; released < upto; ++released)
            if (lane == 0) pirq_mbar_arrive(empty0 + 8u * (released % STAGES));
        if (refiller) {
            for (; refilled + 1u < released && refilled + STAGES < steps; ++refilled) {
                pirq_mbar_wait(empty0 + 8u * (refilled % STAGES), (refilled / STAGES) & 1u);
                fill(refilled + STAGES);
            }
        }
    };
    auto load_a = [&](unsigned t, uint4& af) {
        const unsigned s = t % STAGES;
        pirq_mbar_wait(full0 + 8u * s, (t / STAGES) & 1u);
        af = pirq_wgmma_a_fragment(ring + s * STAGE_BYTES + (warp * 32u + lane) * 16u);
    };
    uint4 ar[R];
    unsigned t = 0;
    for (; t + R <= steps; t += R) {
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const unsigned u = t + j;
            load_a(u, ar[j]);
            pirq_wgmma_fence();
            pirq_wgmma_b1<N>(acc, ar[j], pirq_wgmma_desc(ring + (u % STAGES) * STAGE_BYTES + A_BYTES));
            pirq_wgmma_commit();
            pirq_wgmma_wait<INFLIGHT>();
#pragma unroll
            for (int k = 0; k < R; ++k) pirq_keep(ar[k]);
            if (u + 1u > (unsigned)INFLIGHT) release_upto(u + 1u - INFLIGHT);
        }
    }
    pirq_wgmma_wait<0>();
#pragma unroll
    for (int k = 0; k < R; ++k) pirq_keep(ar[k]);
    release_upto(t);
    for (; t < steps; ++t) {
        uint4 af;
        load_a(t, af);
        pirq_wgmma_fence();
        pirq_wgmma_b1<N>(acc, af, pirq_wgmma_desc(ring + (t % STAGES) * STAGE_BYTES + A_BYTES));
        pirq_wgmma_commit();
        pirq_wgmma_wait<0>();
        pirq_keep(af);
        release_upto(t + 1u);
    }
    pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
#endif
}
#define PIRQ_SCAN_WGMMA_FOLD(N, ST, IF)                                                              \
    extern "C" __global__ void __launch_bounds__(256u, 1) scan_wgmma_n##N##_s##ST##_fold##IF(          \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_fold_body<N, ST, IF>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);  \
    }
PIRQ_SCAN_WGMMA_FOLD(256, 8, 0)
PIRQ_SCAN_WGMMA_FOLD(256, 8, 1)
// (INFLIGHT >= 2 does not pipeline: ptxas serializes every wgmma, C7513 "non wgmma instructions
// defining input registers of a wgmma between start and end of the pipeline": A from registers
// allows one wgmma in flight at most.)
PIRQ_SCAN_WGMMA_FOLD(128, 8, 1)

// The A-from-global body with a producer warp (B only) instead of thread 0: 288 threads, so 168
// registers at most, which leaves room for a ring of D <= 3 A fragments.
template <int N, int STAGES, int D>
__device__ __forceinline__ void scan_wgmma_agp_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                    unsigned* __restrict__ partial, unsigned mtiles,
                                                    unsigned nblocks, unsigned np_total,
                                                    unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr unsigned STAGE_BYTES = N * 32u;
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * PIRQ_WGMMA_OLD_MTILES;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp == 8) {
        if (lane == 0) {
            for (unsigned i = 0; i < steps; ++i) {
                const unsigned s = i % STAGES;
                if (i >= (unsigned)STAGES) pirq_mbar_wait(empty0 + 8u * s, ((i / STAGES) - 1u) & 1u);
                const unsigned full = full0 + 8u * s;
                pirq_mbar_expect_tx(full, STAGE_BYTES);
                pirq_bulk_copy(ring + s * STAGE_BYTES, b + ((unsigned long long)(kb0 + i) * np_total + np0) * 32u,
                               STAGE_BYTES, full);
            }
        }
        return;
    }
    int acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = 0;
    const uint4* ap = a + ((unsigned long long)kb0 * mtiles + mt0 + warp) * 32u + lane;
    const unsigned long long astride = (unsigned long long)mtiles * 32u;
    auto step = [&](unsigned t, uint4& af) {
        const unsigned s = t % STAGES;
        pirq_mbar_wait(full0 + 8u * s, (t / STAGES) & 1u);
        pirq_wgmma_fence();
        pirq_wgmma_b1<N>(acc, af, pirq_wgmma_desc(ring + s * STAGE_BYTES));
        pirq_wgmma_commit();
        pirq_wgmma_wait<0>();
        pirq_keep(af);
        __syncwarp();
        if (lane == 0) pirq_mbar_arrive(empty0 + 8u * s);
    };
    const unsigned ring_steps = steps - steps % D;
    uint4 ar[D];
#pragma unroll
    for (int j = 0; j < D; ++j)
        ar[j] = (unsigned)j < ring_steps ? __ldg(ap + j * astride) : make_uint4(0, 0, 0, 0);
    unsigned i = 0;
    for (; i < ring_steps; i += D) {
#pragma unroll
        for (int j = 0; j < D; ++j) {
            step(i + j, ar[j]);
            if (i + j + D < ring_steps) ar[j] = __ldg(ap + (i + j + D) * astride);
        }
    }
    for (; i < steps; ++i) {
        uint4 af = __ldg(ap + i * astride);
        step(i, af);
    }
    pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
#endif
}
#define PIRQ_SCAN_WGMMA_AGP(N, ST, D)                                                                \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_OLD_THREADS, 1) scan_wgmma_n##N##_s##ST##_agp##D( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_agp_body<N, ST, D>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);    \
    }
PIRQ_SCAN_WGMMA_AGP(256, 8, 2)
PIRQ_SCAN_WGMMA_AGP(256, 8, 3)
PIRQ_SCAN_WGMMA_AGP(256, 16, 3)
PIRQ_SCAN_WGMMA_AGP(128, 8, 8)

// The multicast body: clusters of two CTAs (adjacent m-groups: same keys, same blocks, different
// rows), each copying half of the keys' bits B and multicasting it into both, so B's L2 traffic
// (2/3 of this tiling's) halves. The c2 variants of scan_wgmma_body do the same but have every
// consumer warp arrive on the peer's barrier (16 remote arrivals a stage) and measured 3.5x
// slower; here consumers release their own CTA's stage only, and the producers exchange one
// remote arrival a stage: "my stage s is free" (`peer` barriers, count 1).
template <int N, int STAGES>
__device__ __forceinline__ void scan_wgmma_mc_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                   unsigned* __restrict__ partial, unsigned mtiles,
                                                   unsigned nblocks, unsigned np_total,
                                                   unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr unsigned A_BYTES = PIRQ_WGMMA_OLD_MTILES * 512u;
    constexpr unsigned B_BYTES = N * 32u;
    constexpr unsigned HALF = B_BYTES / 2u;
    constexpr unsigned STAGE_BYTES = A_BYTES + B_BYTES;
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[3 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * PIRQ_WGMMA_OLD_MTILES;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES,
                   peer0 = empty0 + 8u * STAGES;
    const unsigned rank = pirq_cluster_rank(), other = rank ^ 1u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, 8);
            pirq_mbar_init(peer0 + 8u * s, 1);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    pirq_cluster_sync();
    if (warp == 8) {
        if (lane == 0) {
            for (unsigned i = 0; i < steps; ++i) {
                const unsigned s = i % STAGES;
                if (i >= (unsigned)STAGES) {
                    const unsigned parity = ((i / STAGES) - 1u) & 1u;
                    pirq_mbar_wait(empty0 + 8u * s, parity);
                    pirq_mbar_arrive_remote(peer0 + 8u * s, other);
                    pirq_mbar_wait_cluster(peer0 + 8u * s, parity);
                }
                const unsigned long long kb = kb0 + i;
                const unsigned full = full0 + 8u * s, dst = ring + s * STAGE_BYTES;
                pirq_mbar_expect_tx(full, STAGE_BYTES);
                pirq_bulk_copy(dst, a + (kb * mtiles + mt0) * 32u, A_BYTES, full);
                pirq_bulk_copy_multicast(dst + A_BYTES + rank * HALF, b + (kb * np_total + np0) * 32u + rank * (HALF / 16u),
                                         HALF, full, (unsigned short)3u);
            }
        }
    } else {
        int acc[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[i] = 0;
        for (unsigned i = 0; i < steps; ++i) {
            const unsigned s = i % STAGES;
            pirq_mbar_wait(full0 + 8u * s, (i / STAGES) & 1u);
            const unsigned stage = ring + s * STAGE_BYTES;
            uint4 af = pirq_wgmma_a_fragment(stage + (warp * 32u + lane) * 16u);
            pirq_wgmma_fence();
            pirq_wgmma_b1<N>(acc, af, pirq_wgmma_desc(stage + A_BYTES));
            pirq_wgmma_commit();
            pirq_wgmma_wait<0>();
            pirq_keep(af);
            __syncwarp();
            if (lane == 0) pirq_mbar_arrive(empty0 + 8u * s);
        }
        pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
    }
    // No CTA leaves while its peer may still multicast into it or arrive on its barriers.
    pirq_cluster_sync();
#endif
}
#define PIRQ_SCAN_WGMMA_MC(N, ST)                                                                    \
    extern "C" __global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(PIRQ_WGMMA_OLD_THREADS, 1)     \
        scan_wgmma_n##N##_s##ST##_mc(const uint4* __restrict__ a, const uint4* __restrict__ b,         \
                                     unsigned* __restrict__ partial, unsigned mtiles, unsigned nblocks, \
                                     unsigned np_total, unsigned blocks_per_task) {                  \
        scan_wgmma_mc_body<N, ST>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);        \
    }
PIRQ_SCAN_WGMMA_MC(256, 8)
PIRQ_SCAN_WGMMA_MC(256, 12)
PIRQ_SCAN_WGMMA_MC(128, 8)
