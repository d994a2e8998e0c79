// Standalone nvcc harness for scan_wgmma.cu (sm_90a):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v -o wgmma wgmma.cu
//   ./wgmma [GiB=64] [Q list=128,256,384,512]      PIRQ_WG=<name,name,...> picks variants (checked and timed)
// 1. checks every wgmma variant against a host reference (random selection bits in layout
//    "B for wgmma", a database whose page count is not a multiple of 256, split-K tasks);
// 2. checks that dpf_expand_leaves writes the same bits in both layouts;
// 3. times read-all, the best mma.sync plan and the wgmma variants on a synthetic database.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>
#include <algorithm>
#include <random>
#include <cuda_runtime.h>
#include "../pirq_common.cuh"
#include "../dpf_expand.cu"
#include "../db_layout.cu"
#include "../scan_mma.cu"
#include "../scan_wgmma.cu"
#include "wgmma_old.cu"
#include "wgmma_tried.cu"
#include "wgmma_ss.cu"

// 8 stages at N = 256 (the kernel in use takes 12): 2 % ahead at 256 keys, 5-6 % behind above.
PIRQ_SCAN_WGMMA(256, 8)

// Clusters of 2 CTAs along the m-groups (gridDim.y must be even) sharing B by multicast.
#define PIRQ_SCAN_WGMMA_C2(N, ST, IF)                                                               \
    extern "C" __global__ void __cluster_dims__(1, 2, 1) __launch_bounds__(PIRQ_WGMMA_OLD_THREADS, 1)    \
        scan_wgmma_n##N##_s##ST##_f##IF##_c2(const uint4* __restrict__ a, const uint4* __restrict__ b, \
                                             unsigned* __restrict__ partial, unsigned mtiles,         \
                                             unsigned nblocks, unsigned np_total,                     \
                                             unsigned blocks_per_task) {                              \
        scan_wgmma_old_body<N, ST, IF, 2>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task);    \
    }

PIRQ_SCAN_WGMMA_C2(128, 8, 0)
PIRQ_SCAN_WGMMA_C2(192, 8, 0)
PIRQ_SCAN_WGMMA_C2(256, 8, 0)
PIRQ_SCAN_WGMMA_C2(256, 12, 0)
PIRQ_SCAN_WGMMA_C2(256, 8, 1)

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1);} } while (0)

typedef void (*Fn)(const uint4*, const uint4*, unsigned*, unsigned, unsigned, unsigned, unsigned);
// wgs: consumer warpgroups (64 rows each); the 2-warpgroup kernels ("...old", wgmma_old.cu, and
// the tried ones) have a producer warp;
// -2: two warpgroups loading A from global memory (only B in the shared-memory stages);
// 102: two warpgroups, no producer warp (256 threads); -102: A from global with a producer warp.
struct WgVariant { const char* name; Fn fn; int n, stages, wgs; };
static WgVariant WG[] = {
    {"n128s8", scan_wgmma_n128_s8, 128, 8, 303},       {"n192s8", scan_wgmma_n192_s8, 192, 8, 303},
    {"n256s12", scan_wgmma_n256_s12, 256, 12, 303},    {"n256s8", scan_wgmma_n256_s8, 256, 8, 303},
    {"n128s8old", scan_wgmma_n128_s8_f0, 128, 8, 2},   {"n192s8old", scan_wgmma_n192_s8_f0, 192, 8, 2},
    {"n256s8old", scan_wgmma_n256_s8_f0, 256, 8, 2},
    {"n256s8w2k2", scan_wgmma_n256_s8_w2_k2, 256, 8, 2},
    {"n256s6w3k1", scan_wgmma_n256_s6_w3_k1, 256, 6, 3}, {"n256s8w3k1", scan_wgmma_n256_s8_w3_k1, 256, 8, 3},
    {"n256s8w3k2", scan_wgmma_n256_s8_w3_k2, 256, 8, 3}, {"n256s12w3k2", scan_wgmma_n256_s12_w3_k2, 256, 12, 3},
    {"n192s8w3k2", scan_wgmma_n192_s8_w3_k2, 192, 8, 3}, {"n128s8w3k2", scan_wgmma_n128_s8_w3_k2, 128, 8, 3},
    {"n256s8ag4", scan_wgmma_n256_s8_ag4, 256, 8, -2}, {"n256s8ag8", scan_wgmma_n256_s8_ag8, 256, 8, -2},
    {"n256s12ag8", scan_wgmma_n256_s12_ag8, 256, 12, -2}, {"n256s16ag8", scan_wgmma_n256_s16_ag8, 256, 16, -2},
    {"n256s16ag12", scan_wgmma_n256_s16_ag12, 256, 16, -2}, {"n256s16ag16", scan_wgmma_n256_s16_ag16, 256, 16, -2},
    {"n128s8ag8", scan_wgmma_n128_s8_ag8, 128, 8, -2}, {"n192s8ag8", scan_wgmma_n192_s8_ag8, 192, 8, -2},
    {"n256s8fold0", scan_wgmma_n256_s8_fold0, 256, 8, 102}, {"n256s8fold1", scan_wgmma_n256_s8_fold1, 256, 8, 102},
    {"n128s8fold1", scan_wgmma_n128_s8_fold1, 128, 8, 102},
    {"n256s8agp2", scan_wgmma_n256_s8_agp2, 256, 8, -102}, {"n256s8agp3", scan_wgmma_n256_s8_agp3, 256, 8, -102},
    {"n256s16agp3", scan_wgmma_n256_s16_agp3, 256, 16, -102}, {"n128s8agp8", scan_wgmma_n128_s8_agp8, 128, 8, -102},
    {"n256s8mc", scan_wgmma_n256_s8_mc, 256, 8, 2}, {"n256s12mc", scan_wgmma_n256_s12_mc, 256, 12, 2},
    {"n128s8mc", scan_wgmma_n128_s8_mc, 128, 8, 2},
    {"n128s8c2", scan_wgmma_n128_s8_f0_c2, 128, 8, 2},
    {"n256s8ss0", scan_wgmma_n256_s8_ss0, 256, 8, 202}, {"n256s8ss1", scan_wgmma_n256_s8_ss1, 256, 8, 202},
    {"n256s12ss2", scan_wgmma_n256_s12_ss2, 256, 12, 202}, {"n128s8ss1", scan_wgmma_n128_s8_ss1, 128, 8, 202},
    {"n192s8c2", scan_wgmma_n192_s8_f0_c2, 192, 8, 2},  {"n256s8c2", scan_wgmma_n256_s8_f0_c2, 256, 8, 2},
    {"n256s12c2", scan_wgmma_n256_s12_f0_c2, 256, 12, 2}, {"n256s8f1c2", scan_wgmma_n256_s8_f1_c2, 256, 8, 2},
};
static const int NWG = sizeof(WG) / sizeof(WG[0]);
// 202: two warpgroups with a producer warp, A by descriptor (wgmma_ss.cu): timed, not checked.
// 303: the kernels in use (../scan_wgmma.cu): three consumer warpgroups and a producer warpgroup
// that lends them its registers, 512 threads.
static int wg_groups(const WgVariant& v) { return (v.wgs < 0 ? -v.wgs : v.wgs) % 100; }
static bool wg_checked(const WgVariant& v) { return v.wgs != 202; }
static size_t wg_smem(const WgVariant& v) { return (size_t)v.stages * ((v.wgs < 0 ? 0 : wg_groups(v) * 2048) + v.n * 32) + 128; }
static unsigned wg_threads(const WgVariant& v) {
    if (v.wgs == 303) return 512u;
    return v.wgs == -102 || v.wgs == 202 ? 288u : v.wgs < 0 || v.wgs > 100 ? 256u : PIRQ_WGMMA_WIDE_THREADS(v.wgs);
}
static unsigned wg_rows(const WgVariant& v) { return 4u * wg_groups(v); }

static uint64_t mix64(uint64_t z) { z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return z ^ (z >> 31); }
static uint64_t synth_word(uint64_t seed, uint64_t p, uint64_t i) { uint64_t b = mix64(seed + (p + 1) * PIRQ_G); return mix64(b + (i + 1) * PIRQ_G); }
static uint64_t idx_b(uint64_t b, unsigned np, unsigned q, unsigned w) { return ((b * np + (q >> 4)) * 32ull + 4u * (q & 7u) + (w & 3u)) * 4ull + 2u * ((q >> 3) & 1u) + (w >> 2); }
static uint64_t idx_wg(uint64_t b, unsigned np, unsigned q, unsigned w) { return (b * np + (q >> 4)) * 128ull + 64u * ((q >> 3) & 1u) + 32u * (w >> 2) + 4u * (q & 7u) + (w & 3u); }

__global__ void fill_random(unsigned* p, unsigned long long n, unsigned long long seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = (unsigned)pirq_mix64(seed ^ (i * PIRQ_G));
}

struct Ctx { unsigned wpp, mtiles; unsigned long long num_pages, nblocks; uint4* a; unsigned* partial; unsigned* answers; };

static void run_wg(const Ctx& c, const WgVariant& v, const uint4* sel, unsigned np_total, unsigned q, unsigned bpt, cudaStream_t st = 0) {
    unsigned ntiles = np_total * 2;
    CK(cudaMemsetAsync(c.partial, 0, (size_t)c.mtiles * ntiles * 16, st));
    dim3 grid(np_total * 16 / v.n, (c.mtiles + wg_rows(v) - 1) / wg_rows(v), (unsigned)((c.nblocks + bpt - 1) / bpt));
    v.fn<<<grid, wg_threads(v), wg_smem(v), st>>>(c.a, sel, c.partial, c.mtiles, (unsigned)c.nblocks, np_total, bpt);
    unsigned long long n = (unsigned long long)q * c.wpp;
    scan_unpack<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(c.partial, c.answers, q, c.wpp, np_total, 0);
}
static void run_mma(const Ctx& c, const uint4* sel, unsigned np_total, unsigned q, unsigned bpt) {
    unsigned ntiles = np_total * 2;
    CK(cudaMemsetAsync(c.partial, 0, (size_t)c.mtiles * ntiles * 16));
    // m2n8s4w2, 8 warps
    dim3 grid(ntiles / 16, (c.mtiles + 7) / 8, (unsigned)((c.nblocks + bpt - 1) / bpt));
    scan_mma_m2_n8_s4_w2<<<grid, 256, 8 * 4 * 2 * 512>>>(c.a, sel, c.partial, c.mtiles, (unsigned)c.nblocks, np_total, bpt);
    unsigned long long n = (unsigned long long)q * c.wpp;
    scan_unpack<<<(unsigned)((n + 255) / 256), 256>>>(c.partial, c.answers, q, c.wpp, np_total, 0);
}
// PIRQ_WG: comma-separated names; a variant runs when its name equals one of them (all without it).
static bool wg_selected(const char* name) {
    const char* sel = getenv("PIRQ_WG");
    if (!sel) return true;
    for (const char* p = sel; *p;) {
        const char* e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (strlen(name) == len && strncmp(name, p, len) == 0) return true;
        p += len + (e ? 1 : 0);
    }
    return false;
}
static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main(int argc, char** argv) {
    double gib = argc > 1 ? atof(argv[1]) : 64.0;
    std::vector<unsigned> qs = {128, 256, 384, 512};
    if (argc > 2) { qs.clear(); for (char* s = strtok(argv[2], ","); s; s = strtok(nullptr, ",")) qs.push_back(atoi(s)); }
    cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s sm_%d%d SMs %d\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
    for (int i = 0; i < NWG; ++i) CK(cudaFuncSetAttribute(WG[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 220 * 1024));
    CK(cudaFuncSetAttribute(scan_mma_m2_n8_s4_w2, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    unsigned* dsink; CK(cudaMalloc(&dsink, 64));
    bool ok = true;
    {
        Ctx c; unsigned ps = 4096; c.wpp = ps / 4; c.mtiles = ps / 2; c.num_pages = 21 * 256 + 77; c.nblocks = (c.num_pages + 255) / 256;
        CK(cudaMalloc(&c.a, c.nblocks * 256 * ps));
        unsigned long long seed = 0x77;
        db_synthetic<<<dim3((unsigned)c.nblocks, (c.wpp + 31) / 32), 256>>>((unsigned*)c.a, seed, 0, c.num_pages, c.wpp);
        CK(cudaGetLastError());
        std::vector<uint64_t> host(c.num_pages * ps / 8);
        for (uint64_t p = 0; p < c.num_pages; ++p) for (uint64_t i = 0; i < ps / 8; ++i) host[p * ps / 8 + i] = synth_word(seed, p, i);
        const unsigned QMAX = 512;
        unsigned* sel; CK(cudaMalloc(&sel, c.nblocks * (QMAX / 16) * 512));
        CK(cudaMalloc(&c.partial, (size_t)c.mtiles * (QMAX / 8) * 16)); CK(cudaMalloc(&c.answers, (size_t)QMAX * ps));
        for (int vi = 0; vi < NWG; ++vi) {
            const WgVariant& v = WG[vi];
            if (!wg_selected(v.name)) continue;
            unsigned q = v.n + 37; unsigned np_total = (q + v.n - 1) / v.n * v.n / 16;
            fill_random<<<256, 256>>>(sel, c.nblocks * np_total * 128, 99 + vi);
            CK(cudaDeviceSynchronize());
            std::vector<unsigned> hs(c.nblocks * np_total * 128); CK(cudaMemcpy(hs.data(), sel, hs.size() * 4, cudaMemcpyDeviceToHost));
            std::vector<uint64_t> exp((size_t)q * ps / 8, 0);
            for (unsigned k = 0; k < q; ++k) for (uint64_t p = 0; p < c.num_pages; ++p) {
                uint64_t b = p / 256, j = p % 256;
                if ((hs[idx_wg(b, np_total, k, j / 32)] >> (j % 32)) & 1) for (unsigned i = 0; i < ps / 8; ++i) exp[(size_t)k * ps / 8 + i] ^= host[p * ps / 8 + i];
            }
            for (unsigned bpt : {2u, 5u, 1000u}) {
                CK(cudaMemset(c.answers, 0xcd, (size_t)q * ps));
                run_wg(c, v, (uint4*)sel, np_total, q, bpt);
                CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
                std::vector<uint64_t> got((size_t)q * ps / 8); CK(cudaMemcpy(got.data(), c.answers, got.size() * 8, cudaMemcpyDeviceToHost));
                size_t bad = 0; for (size_t i = 0; i < got.size(); ++i) bad += got[i] != exp[i];
                printf("wgmma %-10s Q=%u bpt=%u vs host: %s (%zu bad words of %zu)\n", v.name, q, bpt, bad ? "MISMATCH" : "ok", bad, got.size());
                if (wg_checked(v)) ok &= bad == 0;
                else printf("  (%s: timing only, A layout not canonical; not counted)\n", v.name);
            }
        }
        // expansion: both layouts hold the same bits (n = 18: m = 11)
        {
            int n = 18, m = n - 7, T = m - 7; unsigned qk = 45, np_total = 48 / 16;
            std::vector<unsigned> keys(qk * PIRQ_KEY_WORDS, 0); std::mt19937_64 rng(5);
            for (auto& x : keys) x = rng();
            for (unsigned k = 0; k < qk; ++k) { keys[k * PIRQ_KEY_WORDS + 4] = k & 1; for (int lv = 0; lv < m; ++lv) keys[k * PIRQ_KEY_WORDS + 16 + 8 * lv + 4] &= 3; }
            unsigned* dk; CK(cudaMalloc(&dk, keys.size() * 4)); CK(cudaMemcpy(dk, keys.data(), keys.size() * 4, cudaMemcpyHostToDevice));
            unsigned long long nbd = 1ull << (m - 1);
            uint4 *s1, *o1, *o2; unsigned char* t1;
            CK(cudaMalloc(&s1, (qk << T) * 16ull)); CK(cudaMalloc(&t1, qk << T));
            CK(cudaMalloc(&o1, nbd * np_total * 512)); CK(cudaMalloc(&o2, nbd * np_total * 512));
            dpf_expand_nodes<<<dim3(1, qk), 256>>>(dk, nullptr, nullptr, s1, t1, 0, T);
            dpf_expand_leaves<<<dim3(1u << T, np_total), 256>>>(dk, qk, s1, t1, m, o1, np_total, 0, 0);
            dpf_expand_leaves<<<dim3(1u << T, np_total), 256>>>(dk, qk, s1, t1, m, o2, np_total, 1, 0);
            CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
            std::vector<unsigned> h1(nbd * np_total * 128), h2(h1.size());
            CK(cudaMemcpy(h1.data(), o1, h1.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(h2.data(), o2, h2.size() * 4, cudaMemcpyDeviceToHost));
            size_t bad = 0, ones = 0;
            for (uint64_t b = 0; b < nbd; ++b) for (unsigned k = 0; k < np_total * 16; ++k) for (unsigned w = 0; w < 8; ++w) {
                unsigned x = h1[idx_b(b, np_total, k, w)], y = h2[idx_wg(b, np_total, k, w)];
                bad += x != y; ones += __builtin_popcount(x);
            }
            printf("expand layouts B vs B-for-wgmma: %s (%zu bad words, %zu one bits)\n", bad ? "MISMATCH" : "ok", bad, ones);
            ok &= bad == 0 && ones > 0;
        }
        cudaFree(c.a); cudaFree(sel); cudaFree(c.partial); cudaFree(c.answers);
    }
    printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    if (!ok || gib <= 0) return ok ? 0 : 1;

    Ctx c; unsigned ps = 4096; c.wpp = ps / 4; c.mtiles = ps / 2;
    c.num_pages = (unsigned long long)(gib * (1ull << 30)) / ps; c.nblocks = (c.num_pages + 255) / 256;
    size_t abytes = c.nblocks * 256ull * ps;
    CK(cudaMalloc(&c.a, abytes));
    db_synthetic<<<dim3((unsigned)c.nblocks, (c.wpp + 31) / 32), 256>>>((unsigned*)c.a, 42, 0, c.num_pages, c.wpp);
    CK(cudaDeviceSynchronize());
    const unsigned QMAX = 512;
    uint4* sel; CK(cudaMalloc(&sel, c.nblocks * (QMAX / 16) * 512));
    fill_random<<<4096, 256>>>((unsigned*)sel, c.nblocks * (QMAX / 16) * 128, 7);
    CK(cudaMalloc(&c.partial, (size_t)c.mtiles * (QMAX / 8) * 16)); CK(cudaMalloc(&c.answers, (size_t)QMAX * ps));
    auto timeit = [&](auto&& f, int reps) { std::vector<float> v; f(); CK(cudaDeviceSynchronize()); for (int r = 0; r < reps; ++r) { CK(cudaEventRecord(e0)); f(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1); v.push_back(ms); } CK(cudaGetLastError()); return median(v); };
    float floor_ms = timeit([&] { read_all<<<prop.multiProcessorCount * 16, 256>>>(c.a, abytes / 16, dsink); }, 5);
    printf("read-all floor: %.2f ms (%.0f GB/s)\n", floor_ms, abytes / floor_ms / 1e6);
    std::vector<unsigned> bpts = {512, 2048};
    if (getenv("PIRQ_BPT")) { bpts.clear(); for (char* s = strtok(getenv("PIRQ_BPT"), ","); s; s = strtok(nullptr, ",")) bpts.push_back(atoi(s)); }
    for (unsigned q : qs) {
        if (!getenv("PIRQ_NO_MMA")) {
            unsigned np_total = (q + 127) / 128 * 128 / 16;
            float ms = timeit([&] { run_mma(c, sel, np_total, q, 256); }, 3);
            printf("Q=%4u mma m2n8s4w2/8/256      %8.2f ms %8.0f keys/s\n", q, ms, q / ms * 1e3);
        }
        for (int vi = 0; vi < NWG; ++vi) {
            const WgVariant& v = WG[vi];
            if (!wg_selected(v.name)) continue;
            unsigned np_total = (q + v.n - 1) / v.n * v.n / 16;
            if (np_total > QMAX / 16 || np_total * 16 - q >= (unsigned)v.n) continue;
            for (unsigned bpt : bpts) {
                float ms = timeit([&] { run_wg(c, v, sel, np_total, q, bpt); }, 3);
                double tops = 2.0 * c.mtiles * 16 * c.nblocks * 256.0 * np_total * 16 / ms / 1e9;
                printf("Q=%4u wgmma %-10s bpt=%4u %8.2f ms %8.0f keys/s %6.0f TOPS\n", q, v.name, bpt, ms, q / ms * 1e3, tops);
            }
        }
        fflush(stdout);
    }
    return 0;
}
