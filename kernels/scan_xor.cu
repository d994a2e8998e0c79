// scan_xor.cu: the same pass on CUDA cores, as masked XOR in the transposed layout: the reference
// the tensor-core kernel must beat, and the fallback for GPUs without binary MMA (before sm_80).
//
// CPU twin: `pirq_worker::scan::cpu::CpuScanner::scan`. In layout A a u32 word is one bit
// position of 32 pages, and a key's selection word for those pages is its mask, so
// `acc ^= row_word & sel_word` XORs 32 pages' bits into the key's accumulator at once; the
// accumulator's parity (popc & 1) at the end is the answer bit. Lane 4g+t of a warp holds rows g
// and g+8 of an m-tile, words t and t+4 (the A fragment); the four lanes of a row combine their
// parities with two shuffles.
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

// Grid (ceil(q_count / KQ), mtiles / (warps * MT), k-splits); answers (q_count pages of
// words_per_page u32) must be zeroed first: every warp XORs its k-split's parities in.
template <int MT, int KQ>
__device__ __forceinline__ void scan_xor_body(const uint4* __restrict__ a, const unsigned* __restrict__ sel,
                                              unsigned* __restrict__ answers, unsigned mtiles,
                                              unsigned nblocks, unsigned np_total, unsigned q_count,
                                              unsigned words_per_page, unsigned blocks_per_task) {
    const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    const unsigned g = lane >> 2, t = lane & 3u;
    const unsigned mt0 = (blockIdx.y * warps + warp) * MT;
    const unsigned q0 = blockIdx.x * KQ;
    const unsigned kb0 = blockIdx.z * blocks_per_task;
    const unsigned kb1 = min(kb0 + blocks_per_task, nblocks);
    if (mt0 >= mtiles) return;
    unsigned acc[MT][KQ][2];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int k = 0; k < KQ; ++k) acc[i][k][0] = acc[i][k][1] = 0;
    for (unsigned kb = kb0; kb < kb1; ++kb) {
        uint4 af[MT];
#pragma unroll
        for (int i = 0; i < MT; ++i)
            af[i] = __ldcs(a + ((unsigned long long)kb * mtiles + mt0 + i) * 32u + lane);
#pragma unroll
        for (int k = 0; k < KQ; ++k) {
            const unsigned q = q0 + k;  // keys past q_count read padding (zero or unused)
            const uint2 s = __ldg(reinterpret_cast<const uint2*>(sel + pirq_sel_word_index(kb, np_total, q, t)));
#pragma unroll
            for (int i = 0; i < MT; ++i) {
                acc[i][k][0] ^= (af[i].x & s.x) ^ (af[i].z & s.y);  // row g
                acc[i][k][1] ^= (af[i].y & s.x) ^ (af[i].w & s.y);  // row g + 8
            }
        }
    }
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int k = 0; k < KQ; ++k) {
            unsigned lo = __popc(acc[i][k][0]) & 1u, hi = __popc(acc[i][k][1]) & 1u;
            lo ^= __shfl_xor_sync(0xffffffffu, lo, 1);
            lo ^= __shfl_xor_sync(0xffffffffu, lo, 2);
            hi ^= __shfl_xor_sync(0xffffffffu, hi, 1);
            hi ^= __shfl_xor_sync(0xffffffffu, hi, 2);
            const unsigned blo = __ballot_sync(0xffffffffu, lo), bhi = __ballot_sync(0xffffffffu, hi);
            const unsigned q = q0 + k;
            if (lane == (unsigned)(k & 31) && q < q_count) {
                unsigned v = 0;
#pragma unroll
                for (int r = 0; r < 8; ++r) v |= ((blo >> (4 * r)) & 1u) << r | ((bhi >> (4 * r)) & 1u) << (8 + r);
                const unsigned mt = mt0 + i;
                if (v) atomicXor(answers + (unsigned long long)q * words_per_page + mt / 2, v << (16 * (mt & 1u)));
            }
        }
    (void)g;
}

#define PIRQ_SCAN_XOR(MT, KQ)                                                                        \
    extern "C" __global__ void __launch_bounds__(256) scan_xor_m##MT##_k##KQ(                       \
        const uint4* __restrict__ a, const unsigned* __restrict__ sel, unsigned* __restrict__ answers, \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned q_count,                     \
        unsigned words_per_page, unsigned blocks_per_task) {                                        \
        scan_xor_body<MT, KQ>(a, sel, answers, mtiles, nblocks, np_total, q_count, words_per_page,  \
                              blocks_per_task);                                                     \
    }

PIRQ_SCAN_XOR(2, 8)
