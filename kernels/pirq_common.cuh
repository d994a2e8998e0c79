// pirq_common.cuh: layouts and helpers shared by every pirq kernel.
//
// The Rust backend (scan/src/cuda, through the pirq-kernels crate) concatenates this header and
// the kernel files into one NVRTC program (defining PIRQ_ONE_SOURCE so the #include lines below each file drop out); the
// standalone tuning harness (kernels/bench/ at commit 2adcc3f, kernels/README.md) includes them
// with nvcc. No system headers: NVRTC has none.
//
// ## The two operands of the scan (a GF(2) matrix product)
//
// answer[q][bit m] = parity( sum over pages p of sel[q][p] * page[p][bit m] ).
// Page bit m is bit m%32 of the page's little-endian u32 word m/32 (= bit m%8 of byte m/8).
//
// The database is cut into blocks of 256 pages (block b = pages 256b .. 256b+255; pages at or past
// num_pages are zero). Inside a block, "word w" of a 256-bit page set means pages 32w .. 32w+31,
// page 32w+j at bit j.
//
// **A, the bit-transposed database** (rows M = 8 * page_size bit positions, K = 256 pages per
// block), stored in *fragment-native* order so that one 16-byte load per lane yields exactly the
// A fragment of `mma.m16n8k256.row.col.b1` for one 16-row tile:
//   tile (b, mt) = rows 16mt .. 16mt+15 of block b, 512 bytes at ((b * mtiles + mt) * 32 + lane) * 16
//   lane L = 4g + t holds uint4 { row g word t, row g+8 word t, row g word t+4, row g+8 word t+4 }
//   (= the mma registers a0, a1, a2, a3).
//
// **B, the selection bits** of Q keys (padded to QP, a multiple of 16), also fragment-native:
//   n-tile pair np = keys 16np .. 16np+15; chunk (b, np) is 512 bytes at ((b * NP + np) * 32 + lane) * 16
//   lane L = 4g + t holds uint4 { key 16np+g word t, word t+4, key 16np+8+g word t, word t+4 }
//   (= the mma registers b0, b1 of n-tile 2np, then of n-tile 2np+1).
// Word w of key q in block b is therefore u32 number
//   ((b * NP + q/16) * 32 + 4*(q%8) + w%4) * 4 + 2*((q/8)%2) + w/4.
//
// **B for wgmma** (scan_wgmma.cu): the same 512-byte chunks (b, np) at the same places, arranged
// inside as the no-swizzle K-major core matrices that a wgmma shared-memory descriptor reads:
//   chunk word  64*h + 32*c + 4*g + (w%4)  = key 16np + 8h + g, word w = 4c + (w%4)
// (a core matrix = 8 keys x 16 bytes; k-halves c 128 bytes apart, 8-key groups 256 bytes apart).
// The chunks of consecutive np are adjacent, so N keys of one block are N * 32 contiguous bytes.
#ifndef PIRQ_COMMON_CUH
#define PIRQ_COMMON_CUH

#define PIRQ_BLOCK_PAGES 256u

// Keys on the device: one record of PIRQ_KEY_WORDS u32 per key.
//   [0..4)  root seed          [4] party (root control bit)
//   [8..12) cw_out             [16 + 8i .. 16 + 8i + 4) seed correction of level i
//   [16 + 8i + 4] bit 0 = tL correction, bit 1 = tR correction
#define PIRQ_KEY_WORDS 256u
#define PIRQ_KEY_MAX_LEVELS 29u

__device__ __forceinline__ unsigned long long pirq_sel_word_index(unsigned long long b, unsigned np_total,
                                                                  unsigned q, unsigned w) {
    return (((b * np_total + (q >> 4)) * 32ull + 4u * (q & 7u) + (w & 3u)) * 4ull) +
           2u * ((q >> 3) & 1u) + (w >> 2);
}

// The same word in layout "B for wgmma".
__device__ __forceinline__ unsigned long long pirq_sel_word_index_wg(unsigned long long b, unsigned np_total,
                                                                     unsigned q, unsigned w) {
    return (b * np_total + (q >> 4)) * 128ull + 64u * ((q >> 3) & 1u) + 32u * (w >> 2) + 4u * (q & 7u) +
           (w & 3u);
}

#endif  // PIRQ_COMMON_CUH
