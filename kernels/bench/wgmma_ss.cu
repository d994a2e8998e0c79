// A variant with the A operand read from shared memory by descriptor (wgmma "SS"), so a warpgroup
// can keep INFLIGHT + 1 wgmmas in flight (the register-A form must hold its registers until the
// wgmma retires). TIMING ONLY: the A stage is the database's layout A as stored (mma.sync fragment
// order), which is not the canonical K-major core-matrix layout the descriptor names, so its
// answers are wrong; the harness times it and does not check it. If it wins, the database layout
// changes to core matrices (ldmatrix.x4 reads the same layout for the mma.sync kernel).
#ifdef PIRQ_WGMMA
template <int N>
__device__ __forceinline__ void pirq_wgmma_b1_ss(int (&c)[N / 2], unsigned long long adesc, unsigned long long bdesc);
template <> __device__ __forceinline__ void pirq_wgmma_b1_ss<128>(int (&c)[64], unsigned long long adesc, unsigned long long bdesc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k256.s32.b1.b1.and.popc "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]), "+r"(c[4]), "+r"(c[5]), "+r"(c[6]), "+r"(c[7]), "+r"(c[8]), "+r"(c[9]), "+r"(c[10]), "+r"(c[11]), "+r"(c[12]), "+r"(c[13]), "+r"(c[14]), "+r"(c[15]), "+r"(c[16]), "+r"(c[17]), "+r"(c[18]), "+r"(c[19]), "+r"(c[20]), "+r"(c[21]), "+r"(c[22]), "+r"(c[23]), "+r"(c[24]), "+r"(c[25]), "+r"(c[26]), "+r"(c[27]), "+r"(c[28]), "+r"(c[29]), "+r"(c[30]), "+r"(c[31]), "+r"(c[32]), "+r"(c[33]), "+r"(c[34]), "+r"(c[35]), "+r"(c[36]), "+r"(c[37]), "+r"(c[38]), "+r"(c[39]), "+r"(c[40]), "+r"(c[41]), "+r"(c[42]), "+r"(c[43]), "+r"(c[44]), "+r"(c[45]), "+r"(c[46]), "+r"(c[47]), "+r"(c[48]), "+r"(c[49]), "+r"(c[50]), "+r"(c[51]), "+r"(c[52]), "+r"(c[53]), "+r"(c[54]), "+r"(c[55]), "+r"(c[56]), "+r"(c[57]), "+r"(c[58]), "+r"(c[59]), "+r"(c[60]), "+r"(c[61]), "+r"(c[62]), "+r"(c[63])
        : "l"(adesc), "l"(bdesc), "n"(1));
}
template <> __device__ __forceinline__ void pirq_wgmma_b1_ss<256>(int (&c)[128], unsigned long long adesc, unsigned long long bdesc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k256.s32.b1.b1.and.popc "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n}\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3]), "+r"(c[4]), "+r"(c[5]), "+r"(c[6]), "+r"(c[7]), "+r"(c[8]), "+r"(c[9]), "+r"(c[10]), "+r"(c[11]), "+r"(c[12]), "+r"(c[13]), "+r"(c[14]), "+r"(c[15]), "+r"(c[16]), "+r"(c[17]), "+r"(c[18]), "+r"(c[19]), "+r"(c[20]), "+r"(c[21]), "+r"(c[22]), "+r"(c[23]), "+r"(c[24]), "+r"(c[25]), "+r"(c[26]), "+r"(c[27]), "+r"(c[28]), "+r"(c[29]), "+r"(c[30]), "+r"(c[31]), "+r"(c[32]), "+r"(c[33]), "+r"(c[34]), "+r"(c[35]), "+r"(c[36]), "+r"(c[37]), "+r"(c[38]), "+r"(c[39]), "+r"(c[40]), "+r"(c[41]), "+r"(c[42]), "+r"(c[43]), "+r"(c[44]), "+r"(c[45]), "+r"(c[46]), "+r"(c[47]), "+r"(c[48]), "+r"(c[49]), "+r"(c[50]), "+r"(c[51]), "+r"(c[52]), "+r"(c[53]), "+r"(c[54]), "+r"(c[55]), "+r"(c[56]), "+r"(c[57]), "+r"(c[58]), "+r"(c[59]), "+r"(c[60]), "+r"(c[61]), "+r"(c[62]), "+r"(c[63]), "+r"(c[64]), "+r"(c[65]), "+r"(c[66]), "+r"(c[67]), "+r"(c[68]), "+r"(c[69]), "+r"(c[70]), "+r"(c[71]), "+r"(c[72]), "+r"(c[73]), "+r"(c[74]), "+r"(c[75]), "+r"(c[76]), "+r"(c[77]), "+r"(c[78]), "+r"(c[79]), "+r"(c[80]), "+r"(c[81]), "+r"(c[82]), "+r"(c[83]), "+r"(c[84]), "+r"(c[85]), "+r"(c[86]), "+r"(c[87]), "+r"(c[88]), "+r"(c[89]), "+r"(c[90]), "+r"(c[91]), "+r"(c[92]), "+r"(c[93]), "+r"(c[94]), "+r"(c[95]), "+r"(c[96]), "+r"(c[97]), "+r"(c[98]), "+r"(c[99]), "+r"(c[100]), "+r"(c[101]), "+r"(c[102]), "+r"(c[103]), "+r"(c[104]), "+r"(c[105]), "+r"(c[106]), "+r"(c[107]), "+r"(c[108]), "+r"(c[109]), "+r"(c[110]), "+r"(c[111]), "+r"(c[112]), "+r"(c[113]), "+r"(c[114]), "+r"(c[115]), "+r"(c[116]), "+r"(c[117]), "+r"(c[118]), "+r"(c[119]), "+r"(c[120]), "+r"(c[121]), "+r"(c[122]), "+r"(c[123]), "+r"(c[124]), "+r"(c[125]), "+r"(c[126]), "+r"(c[127])
        : "l"(adesc), "l"(bdesc), "n"(1));
}
#endif

template <int N, int STAGES, int INFLIGHT>
__device__ __forceinline__ void scan_wgmma_ss_body(const uint4* __restrict__ a, const uint4* __restrict__ b,
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
                const unsigned long long kb = kb0 + i;
                const unsigned full = full0 + 8u * s, dst = ring + s * STAGE_BYTES;
                pirq_mbar_expect_tx(full, STAGE_BYTES);
                pirq_bulk_copy(dst, a + (kb * mtiles + mt0) * 32u, A_BYTES, full);
                pirq_bulk_copy(dst + A_BYTES, b + (kb * np_total + np0) * 32u, B_BYTES, full);
            }
        }
    } else {
        int acc[N / 2];
#pragma unroll
        for (int i = 0; i < N / 2; ++i) acc[i] = 0;
        const unsigned wg = warp >> 2;
        for (unsigned i = 0; i < steps; ++i) {
            const unsigned s = i % STAGES;
            pirq_mbar_wait(full0 + 8u * s, (i / STAGES) & 1u);
            const unsigned stage = ring + s * STAGE_BYTES;
            pirq_wgmma_fence();
            pirq_wgmma_b1_ss<N>(acc, pirq_wgmma_desc(stage + wg * 2048u), pirq_wgmma_desc(stage + A_BYTES));
            pirq_wgmma_commit();
            pirq_wgmma_wait<INFLIGHT>();
            __syncwarp();
            // The wgmma issued INFLIGHT steps ago (and its stage) is done.
            if (i >= (unsigned)INFLIGHT && lane == 0) pirq_mbar_arrive(empty0 + 8u * ((i - INFLIGHT) % STAGES));
        }
        pirq_wgmma_wait<0>();
        pirq_wgmma_store_parities<N>(acc, partial, mt0 + warp, mtiles, np_total, np0, lane);
    }
#endif
}

#define PIRQ_SCAN_WGMMA_SS(N, ST, IF)                                                                \
    extern "C" __global__ void __launch_bounds__(PIRQ_WGMMA_OLD_THREADS, 1) scan_wgmma_n##N##_s##ST##_ss##IF( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial,    \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {            \
        scan_wgmma_ss_body<N, ST, IF>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);    \
    }
PIRQ_SCAN_WGMMA_SS(256, 8, 0)
PIRQ_SCAN_WGMMA_SS(256, 8, 1)
PIRQ_SCAN_WGMMA_SS(256, 12, 2)
PIRQ_SCAN_WGMMA_SS(128, 8, 1)
