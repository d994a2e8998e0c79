// The wgmma kernel in use until 2026-11-26 (docs/bench/gpu-scan.md): two consumer warpgroups
// (128 rows a CTA) and one producer warp, 288 threads, each warpgroup one m64nNk256 per block.
// Replaced by scan_wgmma.cu's three consumer warpgroups and a producer warpgroup that lends
// them its registers (1.3x at 64 GiB on the H100). Kept as the harness's reference ("...old")
// and for the cluster variants (CLUSTER = 2: B multicast into both CTAs of a cluster, ~3x
// slower), which still build on this body. Included by wgmma.cu after ../scan_wgmma.cu.
#ifdef PIRQ_WGMMA
// The same wait with cluster scope: the arrivals may come from the other CTAs of the cluster.
__device__ __forceinline__ void pirq_mbar_wait_cluster(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nPIRQ_WAITC:\n"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra PIRQ_WAITC;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
// Arrives on the barrier at the same offset in CTA `rank` of the cluster.
__device__ __forceinline__ void pirq_mbar_arrive_remote(unsigned bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(bar), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
}
__device__ __forceinline__ unsigned pirq_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ void pirq_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// A contiguous global -> shared copy into the same offset of every CTA in `mask` of the cluster,
// completing on the barrier at `bar`'s offset in each.
__device__ __forceinline__ void pirq_bulk_copy_multicast(unsigned dst, const void* src, unsigned bytes,
                                                         unsigned bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
        "[%0], [%1], %2, [%3], %4;" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar), "h"(mask) : "memory");
}
#endif  // PIRQ_WGMMA

#define PIRQ_WGMMA_OLD_THREADS 288u
#define PIRQ_WGMMA_OLD_MTILES 8u

// Dynamic shared memory of a variant: STAGES x (A 4 KiB + B N x 32 B), plus alignment slack.
// CLUSTER = 2: the two CTAs of a cluster (adjacent m-groups, same keys and blocks) each fetch
// half of the B tile and multicast it into both, halving the L2 traffic of B. Correct, but it
// measured 3.5x slower than CLUSTER = 1 on the H100 (cause not found yet); only the bench
// harness (kernels/bench/wgmma.cu) instantiates it.
template <int N, int STAGES, int INFLIGHT, int CLUSTER>
__device__ __forceinline__ void scan_wgmma_old_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                unsigned* __restrict__ partial, unsigned mtiles,
                                                unsigned nblocks, unsigned np_total,
                                                unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
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
    const unsigned rank = CLUSTER > 1 ? pirq_cluster_rank() : 0u;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, 8 * CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    if (CLUSTER > 1)
        pirq_cluster_sync();
    else
        __syncthreads();
    if (warp == 8) {
        // Producer: one lane drives the copy engine.
        if (lane == 0) {
            for (unsigned i = 0; i < steps; ++i) {
                const unsigned s = i % STAGES;
                if (i >= (unsigned)STAGES) {
                    if (CLUSTER > 1)
                        pirq_mbar_wait_cluster(empty0 + 8u * s, ((i / STAGES) - 1u) & 1u);
                    else
                        pirq_mbar_wait(empty0 + 8u * s, ((i / STAGES) - 1u) & 1u);
                }
                const unsigned long long kb = kb0 + i;
                const unsigned full = full0 + 8u * s, dst = ring + s * STAGE_BYTES;
                pirq_mbar_expect_tx(full, STAGE_BYTES);
                pirq_bulk_copy(dst, a + (kb * mtiles + mt0) * 32u, A_BYTES, full);
                const uint4* bsrc = b + (kb * np_total + np0) * 32u;
                if (CLUSTER > 1) {
                    constexpr unsigned PART = B_BYTES / CLUSTER;
                    pirq_bulk_copy_multicast(dst + A_BYTES + rank * PART, bsrc + rank * (PART / 16u), PART,
                                             full, (unsigned short)((1u << CLUSTER) - 1u));
                } else {
                    pirq_bulk_copy(dst + A_BYTES, bsrc, B_BYTES, full);
                }
            }
        }
    } else {
        int acc[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[i] = 0;
        uint4 a_prev = make_uint4(0, 0, 0, 0);
        unsigned s_prev = 0;
        for (unsigned i = 0; i < steps; ++i) {
            const unsigned s = i % STAGES;
            pirq_mbar_wait(full0 + 8u * s, (i / STAGES) & 1u);
            const unsigned stage = ring + s * STAGE_BYTES;
            uint4 af = pirq_wgmma_a_fragment(stage + (warp * 32u + lane) * 16u);
            pirq_wgmma_fence();
            pirq_wgmma_b1<N>(acc, af, pirq_wgmma_desc(stage + A_BYTES));
            pirq_wgmma_commit();
            if (INFLIGHT == 0) {
                pirq_wgmma_wait<0>();
                __syncwarp();
                if (lane == 0) {
                    pirq_mbar_arrive(empty0 + 8u * s);
                    for (unsigned r = 0; r < (unsigned)CLUSTER; ++r)
                        if (r != rank) pirq_mbar_arrive_remote(empty0 + 8u * s, r);
                }
            } else {
                // The previous wgmma (and its stage) is done once at most this one is in flight.
                pirq_wgmma_wait<1>();
                pirq_keep(a_prev);
                __syncwarp();
                if (i > 0 && lane == 0) {
                    pirq_mbar_arrive(empty0 + 8u * s_prev);
                    for (unsigned r = 0; r < (unsigned)CLUSTER; ++r)
                        if (r != rank) pirq_mbar_arrive_remote(empty0 + 8u * s_prev, r);
                }
                a_prev = af;
                s_prev = s;
            }
        }
        pirq_wgmma_wait<0>();
        pirq_keep(a_prev);
        pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
    }
    // No CTA of a cluster leaves while another may still copy into it or arrive on its barriers.
    if (CLUSTER > 1) pirq_cluster_sync();
#endif
}

#define PIRQ_SCAN_WGMMA_OLD(N, ST, IF)                                                                  \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_OLD_THREADS, 1) scan_wgmma_n##N##_s##ST##_f##IF( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_old_body<N, ST, IF, 1>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);    \
    }
// The variants the backend picks from: scan_wgmma_n<N>_s<STAGES>_f<wgmmas left in flight after
// each issue>. f0 (wait for each wgmma) measured 2-8 % faster than f1 on the H100; 8 stages beat
// 4, 12 and 16 (kernels/bench/wgmma.cu, docs/bench/gpu-scan.md).
PIRQ_SCAN_WGMMA_OLD(128, 8, 0)
PIRQ_SCAN_WGMMA_OLD(192, 8, 0)
PIRQ_SCAN_WGMMA_OLD(256, 8, 0)
