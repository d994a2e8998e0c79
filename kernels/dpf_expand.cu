// dpf_expand.cu: full-domain DPF v1 evaluation of Q keys on the GPU (SPEC §1), written straight
// into the scan's selection layout B (see pirq_common.cuh).
//
// CPU twin: `pirq_shared::dpf::eval_full` (bitmap index p = bit p%64 of u64 word p/64). The GPU
// writes the same bits, only arranged per 256-page block and key for the tensor-core scan; the
// parity test in scan/tests/gpu_parity.rs compares them bit for bit.
//
// The tree of depth m = max(n - 7, 0) is expanded in two kinds of launches:
//   1. `dpf_expand_nodes` (zero or more times): each CTA takes one (key, node) and expands it
//      `levels` (<= 10) levels breadth-first in shared memory, writing the 2^levels descendants.
//   2. `dpf_expand_leaves`: each CTA takes 16 keys (one n-tile pair) and one node of level
//      T = m - S (S = min(m, 7)), expands S - 1 levels in shared memory, and computes the last level
//      as pairs of leaves: the two leaves of a parent are exactly one 256-page block. The leaves
//      are staged in shared memory in B order and written as whole 512-byte chunks.
// One ChaCha8 block per tree node, as SPEC §1.1 says.
#ifndef PIRQ_ONE_SOURCE
#include "pirq_common.cuh"
#endif

#define PIRQ_QR(a, b, c, d)                 \
    a += b; d = __funnelshift_l(d ^ a, d ^ a, 16); \
    c += d; b = __funnelshift_l(b ^ c, b ^ c, 12); \
    a += b; d = __funnelshift_l(d ^ a, d ^ a, 8);  \
    c += d; b = __funnelshift_l(b ^ c, b ^ c, 7);

// G(s): ChaCha8 keyed by s||s, counter 0, nonce 0; children seeds and control bits.
__device__ __forceinline__ void pirq_prg(uint4 s, uint4& left, uint4& right, unsigned& tl,
                                         unsigned& tr) {
    unsigned x0 = 0x61707865u, x1 = 0x3320646eu, x2 = 0x79622d32u, x3 = 0x6b206574u;
    unsigned x4 = s.x, x5 = s.y, x6 = s.z, x7 = s.w;
    unsigned x8 = s.x, x9 = s.y, x10 = s.z, x11 = s.w;
    unsigned x12 = 0, x13 = 0, x14 = 0, x15 = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        PIRQ_QR(x0, x4, x8, x12) PIRQ_QR(x1, x5, x9, x13) PIRQ_QR(x2, x6, x10, x14)
        PIRQ_QR(x3, x7, x11, x15) PIRQ_QR(x0, x5, x10, x15) PIRQ_QR(x1, x6, x11, x12)
        PIRQ_QR(x2, x7, x8, x13) PIRQ_QR(x3, x4, x9, x14)
    }
    left = make_uint4(x0 + 0x61707865u, x1 + 0x3320646eu, x2 + 0x79622d32u, x3 + 0x6b206574u);
    right = make_uint4(x4 + s.x, x5 + s.y, x6 + s.z, x7 + s.w);
    tl = (x8 + s.x) & 1u;
    tr = (x9 + s.y) & 1u;
}

// Children of (s, t) after the level's correction (SPEC §1.4).
__device__ __forceinline__ void pirq_children(const unsigned* __restrict__ key, unsigned level,
                                              uint4 s, unsigned t, uint4& l, unsigned& tl,
                                              uint4& r, unsigned& tr) {
    pirq_prg(s, l, r, tl, tr);
    if (t) {
        const unsigned* cw = key + 16u + 8u * level;
        uint4 c = make_uint4(cw[0], cw[1], cw[2], cw[3]);
        unsigned f = cw[4];
        l.x ^= c.x; l.y ^= c.y; l.z ^= c.z; l.w ^= c.w;
        r.x ^= c.x; r.y ^= c.y; r.z ^= c.z; r.w ^= c.w;
        tl ^= f & 1u;
        tr ^= (f >> 1) & 1u;
    }
}

#define PIRQ_NODES_SMEM 1024u

// Expands `levels` (1..=10) levels below every node of level `level_in`.
// Grid (2^level_in nodes, Q keys), 256 threads. in_* hold 2^level_in nodes per key (level 0:
// pass in_seed = null to start from the keys' roots); out_* receive 2^(level_in+levels) per key.
extern "C" __global__ void __launch_bounds__(256) dpf_expand_nodes(
    const unsigned* __restrict__ keys, const uint4* __restrict__ in_seed,
    const unsigned char* __restrict__ in_t, uint4* __restrict__ out_seed,
    unsigned char* __restrict__ out_t, unsigned level_in, unsigned levels) {
    __shared__ uint4 seeds[PIRQ_NODES_SMEM];
    __shared__ unsigned char tbits[PIRQ_NODES_SMEM];
    const unsigned q = blockIdx.y;
    const unsigned long long node = blockIdx.x;
    const unsigned* key = keys + (unsigned long long)q * PIRQ_KEY_WORDS;
    if (threadIdx.x == 0) {
        if (in_seed == nullptr) {
            seeds[0] = make_uint4(key[0], key[1], key[2], key[3]);
            tbits[0] = (unsigned char)key[4];
        } else {
            unsigned long long i = ((unsigned long long)q << level_in) + node;
            seeds[0] = in_seed[i];
            tbits[0] = in_t[i];
        }
    }
    __syncthreads();
    for (unsigned d = 0; d < levels; ++d) {
        const unsigned parents = 1u << d;
        // Read parents first, then (after the barrier) write children in place: child 2j, 2j+1.
        uint4 ps[2];
        unsigned pt[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            unsigned j = threadIdx.x + 256u * k;
            if (j < parents) { ps[k] = seeds[j]; pt[k] = tbits[j]; }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            unsigned j = threadIdx.x + 256u * k;
            if (j < parents) {
                uint4 l, r;
                unsigned tl, tr;
                pirq_children(key, level_in + d, ps[k], pt[k], l, tl, r, tr);
                seeds[2 * j] = l; tbits[2 * j] = (unsigned char)tl;
                seeds[2 * j + 1] = r; tbits[2 * j + 1] = (unsigned char)tr;
            }
        }
        __syncthreads();
    }
    const unsigned count = 1u << levels;
    unsigned long long base = (((unsigned long long)q << level_in) + node) << levels;
    for (unsigned j = threadIdx.x; j < count; j += blockDim.x) {
        out_seed[base + j] = seeds[j];
        out_t[base + j] = tbits[j];
    }
}

#define PIRQ_LEAF_LEVELS 7u
#define PIRQ_LEAF_PARENTS (1u << (PIRQ_LEAF_LEVELS - 1))  // per key, per CTA

// The last S = min(m, 7) levels of 16 keys (n-tile pair blockIdx.y) below node blockIdx.x of
// level T = m - S, then the output correction, then B. Grid (2^T, NP), 256 threads.
// in_seed/in_t: 2^T nodes per key (null when T = 0: start from the roots).
// Keys q >= q_count get zero selection bits. `wg_layout` != 0 writes layout "B for wgmma"
// (scan_wgmma.cu) instead of B (scan_mma.cu, scan_xor.cu): the same chunks, arranged inside
// differently. Key q's bits go to key column 16 * np_first + q of a buffer `np_total` n-tile
// pairs wide: a pass expands into columns 0.. (np_first = 0, grid.y = np_total); the rotating
// scan expands a joining group into its own columns beside the keys in flight.
extern "C" __global__ void __launch_bounds__(256) dpf_expand_leaves(
    const unsigned* __restrict__ keys, unsigned q_count, const uint4* __restrict__ in_seed,
    const unsigned char* __restrict__ in_t, unsigned tree_depth, uint4* __restrict__ sel,
    unsigned np_total, unsigned wg_layout, unsigned np_first) {
    // Tree nodes (16 keys x 64 parents x 16 B = 16 KiB) and, after the last barrier, the staged
    // B chunks (64 blocks x 512 B = 32 KiB) share this buffer.
    __shared__ uint4 buf[2048];
    __shared__ unsigned char tbits[16 * PIRQ_LEAF_PARENTS];
    const unsigned m = tree_depth;
    const unsigned S = m < PIRQ_LEAF_LEVELS ? m : PIRQ_LEAF_LEVELS;
    const unsigned T = m - S;
    const unsigned long long node = blockIdx.x;
    const unsigned np = blockIdx.y;
    // Parents per key after S - 1 levels (S = 0: the root is the only leaf).
    const unsigned per_key = S == 0 ? 1u : 1u << (S - 1);
    if (threadIdx.x < 16) {
        unsigned k = threadIdx.x, q = np * 16u + k;
        uint4 s = make_uint4(0, 0, 0, 0);
        unsigned char t = 0;
        if (q < q_count) {
            const unsigned* key = keys + (unsigned long long)q * PIRQ_KEY_WORDS;
            if (in_seed == nullptr) {
                s = make_uint4(key[0], key[1], key[2], key[3]);
                t = (unsigned char)key[4];
            } else {
                unsigned long long i = ((unsigned long long)q << T) + node;
                s = in_seed[i];
                t = in_t[i];
            }
        }
        buf[k * PIRQ_LEAF_PARENTS] = s;
        tbits[k * PIRQ_LEAF_PARENTS] = t;
    }
    __syncthreads();
    // Breadth-first down to the parents of the leaves: level d has 2^d nodes per key.
    for (unsigned d = 0; d + 1 < S; ++d) {
        const unsigned parents = 16u << d;
        uint4 ps[2];
        unsigned pt[2];
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            unsigned i = threadIdx.x + 256u * k;
            if (i < parents) {
                unsigned key_slot = i >> d, j = i & ((1u << d) - 1);
                ps[k] = buf[key_slot * PIRQ_LEAF_PARENTS + j];
                pt[k] = tbits[key_slot * PIRQ_LEAF_PARENTS + j];
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            unsigned i = threadIdx.x + 256u * k;
            if (i < parents) {
                unsigned key_slot = i >> d, j = i & ((1u << d) - 1);
                unsigned q = np * 16u + key_slot;
                if (q < q_count) {
                    const unsigned* key = keys + (unsigned long long)q * PIRQ_KEY_WORDS;
                    uint4 l, r;
                    unsigned tl, tr;
                    pirq_children(key, T + d, ps[k], pt[k], l, tl, r, tr);
                    unsigned o = key_slot * PIRQ_LEAF_PARENTS + 2 * j;
                    buf[o] = l; tbits[o] = (unsigned char)tl;
                    buf[o + 1] = r; tbits[o + 1] = (unsigned char)tr;
                }
            }
        }
        __syncthreads();
    }
    // Last level: parent j of key slot k gives leaves 2j, 2j+1 = block j of this subtree.
    const unsigned pairs = 16u * per_key;  // <= 1024
    uint4 lo[4], hi[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        unsigned i = threadIdx.x + 256u * k;
        lo[k] = make_uint4(0, 0, 0, 0);
        hi[k] = make_uint4(0, 0, 0, 0);
        if (i < pairs) {
            unsigned key_slot = i / per_key, j = i % per_key;
            unsigned q = np * 16u + key_slot;
            if (q < q_count) {
                const unsigned* key = keys + (unsigned long long)q * PIRQ_KEY_WORDS;
                uint4 s = buf[key_slot * PIRQ_LEAF_PARENTS + j];
                unsigned t = tbits[key_slot * PIRQ_LEAF_PARENTS + j];
                const uint4 co = make_uint4(key[8], key[9], key[10], key[11]);
                if (S == 0) {
                    // n <= 7: the root is the single leaf, the upper half-block stays zero.
                    if (t) { s.x ^= co.x; s.y ^= co.y; s.z ^= co.z; s.w ^= co.w; }
                    lo[k] = s;
                } else {
                    uint4 l, r;
                    unsigned tl, tr;
                    pirq_children(key, m - 1, s, t, l, tl, r, tr);
                    if (tl) { l.x ^= co.x; l.y ^= co.y; l.z ^= co.z; l.w ^= co.w; }
                    if (tr) { r.x ^= co.x; r.y ^= co.y; r.z ^= co.z; r.w ^= co.w; }
                    lo[k] = l;
                    hi[k] = r;
                }
            }
        }
    }
    __syncthreads();
    // Stage in B order: chunk j (512 B) = lanes 4g+t, uint4 component 2*(k/8) + (w/4).
    unsigned* stage = reinterpret_cast<unsigned*>(buf);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        unsigned i = threadIdx.x + 256u * k;
        if (i < pairs) {
            unsigned key_slot = i / per_key, j = i % per_key;
            unsigned g = key_slot & 7u, half = key_slot >> 3;
            unsigned wl[4] = {lo[k].x, lo[k].y, lo[k].z, lo[k].w};
            unsigned wh[4] = {hi[k].x, hi[k].y, hi[k].z, hi[k].w};
            if (wg_layout) {
                unsigned base = j * 128u + 64u * half + 4u * g;
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    stage[base + t] = wl[t];        // word t: k-half 0
                    stage[base + 32u + t] = wh[t];  // word t + 4: k-half 1
                }
            } else {
                unsigned base = j * 128u + (4u * g) * 4u + 2u * half;
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    stage[base + 4u * t] = wl[t];      // word t
                    stage[base + 4u * t + 1] = wh[t];  // word t + 4
                }
            }
        }
    }
    __syncthreads();
    const unsigned long long block0 = node * per_key;
    for (unsigned i = threadIdx.x; i < per_key * 32u; i += blockDim.x) {
        unsigned j = i >> 5, lane = i & 31u;
        sel[((block0 + j) * np_total + np_first + np) * 32ull + lane] = buf[i];
    }
}
