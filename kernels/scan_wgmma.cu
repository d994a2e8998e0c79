// scan_wgmma.cu: the scan on Hopper's warpgroup tensor cores (sm_90a only):
// wgmma.mma_async.sync.aligned.m64nNk256.s32.b1.b1.and.popc, N in {128, 192, 256}.
//
// CPU twin: `pirq_worker::scan::cpu::CpuScanner::scan`, like scan_mma.cu; the answers come out
// through the same `partial` layout and `scan_unpack`.
//
// Why a second tensor-core kernel: `mma.sync` (scan_mma.cu) reaches about half its peak because
// every fragment of both operands passes through L1 and the register file (docs/bench/gpu-scan.md).
// `wgmma` reads the B operand (the keys' selection bits) straight from shared memory, where the
// copy engine (`cp.async.bulk`) put it, and one instruction does 64 x N x 256 of the product.
//
// Work split. Grid (n-groups of N keys, m-groups of 12 m-tiles = 192 bit rows, k-splits of
// `blocks_per_task` 256-page blocks); 512 threads = four warpgroups. Warpgroups 0..2 consume
// (warp w owns m-tile 12 * blockIdx.y + w, so warpgroup g covers 64 rows); warpgroup 3 produces:
// one lane drives the copy engine. Per 256-page block the producer copies two contiguous runs
// into a ring stage:
//   A: the 12 m-tiles of the block (layout A, 6 KiB; each lane later loads its own 16-byte
//      mma fragment from it: the A operand of wgmma from registers has the same fragment layout
//      as mma.m16n8k256's), and
//   B: the N keys' selection bits, N * 32 bytes, in layout "B for wgmma" (pirq_common.cuh): the
//      no-swizzle K-major core-matrix layout that a shared-memory matrix descriptor names with
//      leading (K) byte offset 128 and stride (N) byte offset 256.
// Stages are handed over with mbarriers: `full` (the copy engine's transaction count) and `empty`
// (one arrival per consumer warp once its wgmma that read the stage has completed).
// The accumulator layout of wgmma (per warp: rows g, g + 8 of its 16; columns 8j + 2t, +1) is the
// mma.sync C layout per n-tile j, so the parities go to `partial` exactly as in scan_mma.cu.
//
// Why three consumer warpgroups and a whole producer warpgroup: what binds is the L2 -> SM
// traffic (docs/bench/gpu-scan.md, "Roofline"): every CTA reads the N keys' bits again for its
// rows, so more rows a CTA means fewer bytes per product. 128 accumulators a thread (N = 256) for
// three warpgroups do not fit beside a producer warp (13 warps: 128 registers a thread), so the
// producer is a warpgroup that gives its registers back (`setmaxnreg`: 24 a thread) and the
// consumers take them (160). Measured 1.3x the two-warpgroup kernel it replaced
// (kernels/bench/wgmma_old.cu at commit 2adcc3f) at 64 GiB on the H100.
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PIRQ_WGMMA 1
#endif
#if defined(PIRQ_WGMMA) || !defined(__CUDA_ARCH__)
// A marker the backend looks for: without it the scan_wgmma_* bodies are empty. (The host pass of
// nvcc, for the bench harness, declares it too.)
extern "C" __global__ void pirq_has_wgmma() {}
#endif

#ifdef PIRQ_WGMMA
template <int N>
__device__ __forceinline__ void pirq_wgmma_b1(int (&c)[N / 2], const uint4& a, unsigned long long desc);

template <> __device__ __forceinline__ void pirq_wgmma_b1<128>(int (&c)[64], const uint4& a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k256.s32.b1.b1.and.popc "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, {%64, %65, %66, %67}, %68, p;\n}\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]), "+r"(c[4]), "+r"(c[5]), "+r"(c[6]), "+r"(c[7]),
          "+r"(c[8]), "+r"(c[9]), "+r"(c[10]), "+r"(c[11]), "+r"(c[12]), "+r"(c[13]), "+r"(c[14]), "+r"(c[15]),
          "+r"(c[16]), "+r"(c[17]), "+r"(c[18]), "+r"(c[19]), "+r"(c[20]), "+r"(c[21]), "+r"(c[22]), "+r"(c[23]),
          "+r"(c[24]), "+r"(c[25]), "+r"(c[26]), "+r"(c[27]), "+r"(c[28]), "+r"(c[29]), "+r"(c[30]), "+r"(c[31]),
          "+r"(c[32]), "+r"(c[33]), "+r"(c[34]), "+r"(c[35]), "+r"(c[36]), "+r"(c[37]), "+r"(c[38]), "+r"(c[39]),
          "+r"(c[40]), "+r"(c[41]), "+r"(c[42]), "+r"(c[43]), "+r"(c[44]), "+r"(c[45]), "+r"(c[46]), "+r"(c[47]),
          "+r"(c[48]), "+r"(c[49]), "+r"(c[50]), "+r"(c[51]), "+r"(c[52]), "+r"(c[53]), "+r"(c[54]), "+r"(c[55]),
          "+r"(c[56]), "+r"(c[57]), "+r"(c[58]), "+r"(c[59]), "+r"(c[60]), "+r"(c[61]), "+r"(c[62]), "+r"(c[63])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(1));
}

template <> __device__ __forceinline__ void pirq_wgmma_b1<192>(int (&c)[96], const uint4& a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %101, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n192k256.s32.b1.b1.and.popc "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
        "}, {%96, %97, %98, %99}, %100, p;\n}\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]), "+r"(c[4]), "+r"(c[5]), "+r"(c[6]), "+r"(c[7]),
          "+r"(c[8]), "+r"(c[9]), "+r"(c[10]), "+r"(c[11]), "+r"(c[12]), "+r"(c[13]), "+r"(c[14]), "+r"(c[15]),
          "+r"(c[16]), "+r"(c[17]), "+r"(c[18]), "+r"(c[19]), "+r"(c[20]), "+r"(c[21]), "+r"(c[22]), "+r"(c[23]),
          "+r"(c[24]), "+r"(c[25]), "+r"(c[26]), "+r"(c[27]), "+r"(c[28]), "+r"(c[29]), "+r"(c[30]), "+r"(c[31]),
          "+r"(c[32]), "+r"(c[33]), "+r"(c[34]), "+r"(c[35]), "+r"(c[36]), "+r"(c[37]), "+r"(c[38]), "+r"(c[39]),
          "+r"(c[40]), "+r"(c[41]), "+r"(c[42]), "+r"(c[43]), "+r"(c[44]), "+r"(c[45]), "+r"(c[46]), "+r"(c[47]),
          "+r"(c[48]), "+r"(c[49]), "+r"(c[50]), "+r"(c[51]), "+r"(c[52]), "+r"(c[53]), "+r"(c[54]), "+r"(c[55]),
          "+r"(c[56]), "+r"(c[57]), "+r"(c[58]), "+r"(c[59]), "+r"(c[60]), "+r"(c[61]), "+r"(c[62]), "+r"(c[63]),
          "+r"(c[64]), "+r"(c[65]), "+r"(c[66]), "+r"(c[67]), "+r"(c[68]), "+r"(c[69]), "+r"(c[70]), "+r"(c[71]),
          "+r"(c[72]), "+r"(c[73]), "+r"(c[74]), "+r"(c[75]), "+r"(c[76]), "+r"(c[77]), "+r"(c[78]), "+r"(c[79]),
          "+r"(c[80]), "+r"(c[81]), "+r"(c[82]), "+r"(c[83]), "+r"(c[84]), "+r"(c[85]), "+r"(c[86]), "+r"(c[87]),
          "+r"(c[88]), "+r"(c[89]), "+r"(c[90]), "+r"(c[91]), "+r"(c[92]), "+r"(c[93]), "+r"(c[94]), "+r"(c[95])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(1));
}

template <> __device__ __forceinline__ void pirq_wgmma_b1<256>(int (&c)[128], const uint4& a, unsigned long long desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k256.s32.b1.b1.and.popc "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, {%128, %129, %130, %131}, %132, p;\n}\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]), "+r"(c[4]), "+r"(c[5]), "+r"(c[6]), "+r"(c[7]),
          "+r"(c[8]), "+r"(c[9]), "+r"(c[10]), "+r"(c[11]), "+r"(c[12]), "+r"(c[13]), "+r"(c[14]), "+r"(c[15]),
          "+r"(c[16]), "+r"(c[17]), "+r"(c[18]), "+r"(c[19]), "+r"(c[20]), "+r"(c[21]), "+r"(c[22]), "+r"(c[23]),
          "+r"(c[24]), "+r"(c[25]), "+r"(c[26]), "+r"(c[27]), "+r"(c[28]), "+r"(c[29]), "+r"(c[30]), "+r"(c[31]),
          "+r"(c[32]), "+r"(c[33]), "+r"(c[34]), "+r"(c[35]), "+r"(c[36]), "+r"(c[37]), "+r"(c[38]), "+r"(c[39]),
          "+r"(c[40]), "+r"(c[41]), "+r"(c[42]), "+r"(c[43]), "+r"(c[44]), "+r"(c[45]), "+r"(c[46]), "+r"(c[47]),
          "+r"(c[48]), "+r"(c[49]), "+r"(c[50]), "+r"(c[51]), "+r"(c[52]), "+r"(c[53]), "+r"(c[54]), "+r"(c[55]),
          "+r"(c[56]), "+r"(c[57]), "+r"(c[58]), "+r"(c[59]), "+r"(c[60]), "+r"(c[61]), "+r"(c[62]), "+r"(c[63]),
          "+r"(c[64]), "+r"(c[65]), "+r"(c[66]), "+r"(c[67]), "+r"(c[68]), "+r"(c[69]), "+r"(c[70]), "+r"(c[71]),
          "+r"(c[72]), "+r"(c[73]), "+r"(c[74]), "+r"(c[75]), "+r"(c[76]), "+r"(c[77]), "+r"(c[78]), "+r"(c[79]),
          "+r"(c[80]), "+r"(c[81]), "+r"(c[82]), "+r"(c[83]), "+r"(c[84]), "+r"(c[85]), "+r"(c[86]), "+r"(c[87]),
          "+r"(c[88]), "+r"(c[89]), "+r"(c[90]), "+r"(c[91]), "+r"(c[92]), "+r"(c[93]), "+r"(c[94]), "+r"(c[95]),
          "+r"(c[96]), "+r"(c[97]), "+r"(c[98]), "+r"(c[99]), "+r"(c[100]), "+r"(c[101]), "+r"(c[102]), "+r"(c[103]),
          "+r"(c[104]), "+r"(c[105]), "+r"(c[106]), "+r"(c[107]), "+r"(c[108]), "+r"(c[109]), "+r"(c[110]), "+r"(c[111]),
          "+r"(c[112]), "+r"(c[113]), "+r"(c[114]), "+r"(c[115]), "+r"(c[116]), "+r"(c[117]), "+r"(c[118]), "+r"(c[119]),
          "+r"(c[120]), "+r"(c[121]), "+r"(c[122]), "+r"(c[123]), "+r"(c[124]), "+r"(c[125]), "+r"(c[126]), "+r"(c[127])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "n"(1));
}


__device__ __forceinline__ void pirq_mbar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void pirq_mbar_wait(unsigned bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nPIRQ_WAIT:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra PIRQ_WAIT;\n}\n" ::"r"(bar), "r"(parity) : "memory");
}
__device__ __forceinline__ void pirq_mbar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void pirq_mbar_expect_tx(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
// One contiguous global -> shared copy by the copy engine, completing on `bar`.
__device__ __forceinline__ void pirq_bulk_copy(unsigned dst, const void* src, unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}
__device__ __forceinline__ void pirq_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void pirq_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void pirq_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory"); }
// Keeps `a` in its registers up to here: a wgmma still in flight may be reading them.
__device__ __forceinline__ void pirq_keep(uint4& a) {
    asm volatile("" : "+r"(a.x), "+r"(a.y), "+r"(a.z), "+r"(a.w));
}

// The lane's 16-byte A fragment of its warp's m-tile from a ring stage at `addr` (the stage's
// A run starts with warp 0's 32 fragments).
__device__ __forceinline__ uint4 pirq_wgmma_a_fragment(unsigned addr) {
    uint4 a;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w)
                 : "r"(addr) : "memory");
    return a;
}
// Writes a warp's parities into `partial` in the mma.sync C layout that `scan_unpack` reads:
// the warp owns m-tile `mt` (nothing written past `mtiles`), its N keys start at 16-key group
// `np0` of `np_total`; one ballot a register, XORed in by the lane of that register's column.
template <int N>
__device__ __forceinline__ void pirq_wgmma_store_parities(const int (&acc)[N / 2], unsigned* __restrict__ partial,
                                                          unsigned mt, unsigned mtiles, unsigned np_total,
                                                          unsigned np0, unsigned lane) {
    if (mt >= mtiles) return;
    const unsigned ntiles = np_total * 2u;
    unsigned* row = partial + ((unsigned long long)mt * ntiles + np0 * 2u) * 4u;
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
        const unsigned bits = __ballot_sync(0xffffffffu, acc[i] & 1);
        if (lane == (unsigned)(i & 31) && bits != 0u) atomicXor(row + i, bits);
    }
}

// Shared-memory matrix descriptor, no swizzle: start, leading (K) and stride (N) byte offsets.
__device__ __forceinline__ unsigned long long pirq_wgmma_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)(128u >> 4) << 16) |
           ((unsigned long long)(256u >> 4) << 32);
}
#endif  // PIRQ_WGMMA

#define PIRQ_WGMMA_THREADS 512u
#define PIRQ_WGMMA_MTILES 12u
#define PIRQ_WGMMA_PRODUCER_REGS 24
#define PIRQ_WGMMA_CONSUMER_REGS 160

template <int N, int STAGES>
__device__ __forceinline__ void scan_wgmma_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
                                                unsigned* __restrict__ partial, unsigned mtiles,
                                                unsigned nblocks, unsigned np_total,
                                                unsigned blocks_per_task) {
#ifdef PIRQ_WGMMA
    constexpr unsigned A_BYTES = PIRQ_WGMMA_MTILES * 512u;
    constexpr unsigned B_BYTES = N * 32u;
    constexpr unsigned STAGE_BYTES = A_BYTES + B_BYTES;
    // A sub-partition holds 512 registers a lane: one warp of each warpgroup.
    static_assert(PIRQ_WGMMA_PRODUCER_REGS + 3 * PIRQ_WGMMA_CONSUMER_REGS <= 512, "register file");
    extern __shared__ unsigned char pirq_wg_smem[];
    __shared__ __align__(8) unsigned long long bars[2 * STAGES];
    const unsigned warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;
    const unsigned mt0 = blockIdx.y * PIRQ_WGMMA_MTILES;
    // The last CTA row may hold fewer m-tiles (2048 = 170 x 12 + 8 at 4 KiB pages): only those
    // are copied; the warps past them compute on stale shared memory and write nothing.
    const unsigned a_bytes = min(PIRQ_WGMMA_MTILES, mtiles - mt0) * 512u;
    const unsigned np0 = blockIdx.x * (N / 16);
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    const unsigned steps = kb1 > kb0 ? kb1 - kb0 : 0u;
    const unsigned ring = ((unsigned)__cvta_generic_to_shared(pirq_wg_smem) + 127u) & ~127u;
    const unsigned full0 = (unsigned)__cvta_generic_to_shared(bars), empty0 = full0 + 8u * STAGES;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            pirq_mbar_init(full0 + 8u * s, 1);
            pirq_mbar_init(empty0 + 8u * s, PIRQ_WGMMA_MTILES);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (warp >= PIRQ_WGMMA_MTILES) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(PIRQ_WGMMA_PRODUCER_REGS));
        if (warp == PIRQ_WGMMA_MTILES && lane == 0) {
            for (unsigned i = 0; i < steps; ++i) {
                const unsigned s = i % STAGES;
                if (i >= (unsigned)STAGES) pirq_mbar_wait(empty0 + 8u * s, ((i / STAGES) - 1u) & 1u);
                const unsigned long long kb = kb0 + i;
                const unsigned full = full0 + 8u * s, dst = ring + s * STAGE_BYTES;
                pirq_mbar_expect_tx(full, a_bytes + B_BYTES);
                pirq_bulk_copy(dst, a + (kb * mtiles + mt0) * 32u, a_bytes, full);
                pirq_bulk_copy(dst + A_BYTES, b + (kb * np_total + np0) * 32u, B_BYTES, full);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(PIRQ_WGMMA_CONSUMER_REGS));
    int acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[i] = 0;
    for (unsigned i = 0; i < steps; ++i) {
        const unsigned s = i % STAGES;
        pirq_mbar_wait(full0 + 8u * s, (i / STAGES) & 1u);
        const unsigned stage = ring + s * STAGE_BYTES;
        uint4 af = pirq_wgmma_a_fragment(stage + (warp * 32u + lane) * 16u);
        pirq_wgmma_fence();
        if (N == 256) {
            // Two m64n128 halves (keys 128.. start 16 core matrices = 4 KiB into B): ptxas checks
            // each instruction against the kernel's entry register count (128 at 512 threads),
            // not the setmaxnreg budget, and one m64n256 needs 158.
            pirq_wgmma_b1<128>(*reinterpret_cast<int(*)[64]>(&acc[0]), af, pirq_wgmma_desc(stage + A_BYTES));
            pirq_wgmma_b1<128>(*reinterpret_cast<int(*)[64]>(&acc[64]), af,
                               pirq_wgmma_desc(stage + A_BYTES + 4096u));
        } else {
            pirq_wgmma_b1<N>(*reinterpret_cast<int(*)[N / 2]>(&acc[0]), af, pirq_wgmma_desc(stage + A_BYTES));
        }
        pirq_wgmma_commit();
        // Waiting for each block's wgmma measured faster than keeping one in flight (and the
        // register-A form allows no more than one: its registers stay read until it retires).
        pirq_wgmma_wait<0>();
        pirq_keep(af);
        __syncwarp();
        if (lane == 0) pirq_mbar_arrive(empty0 + 8u * s);
    }
    pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
#endif
}

#define PIRQ_SCAN_WGMMA(N, ST)                                                                      \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_THREADS, 1) scan_wgmma_n##N##_s##ST(   \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_body<N, ST>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);           \
    }
// The variants the backend picks from (`scan/src/cuda/layout.rs`, WGMMA_VARIANTS):
// scan_wgmma_n<N>_s<STAGES>. 12 stages beat 8 by 5-6 % at N = 256 and 384-512 keys; 8 stages
// are 2 % ahead at 256 keys (docs/bench/gpu-scan.md; the harness: kernels/README.md).
PIRQ_SCAN_WGMMA(128, 8)
PIRQ_SCAN_WGMMA(192, 8)
PIRQ_SCAN_WGMMA(256, 12)
