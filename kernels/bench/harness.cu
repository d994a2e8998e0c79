// Standalone nvcc harness for tuning the pirq kernels without cargo:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -o harness harness.cu && ./harness
// It checks every scan variant against a host reference on a small random-length database,
// checks the DPF expansion at random points against a host DPF, then times read-all, the scan
// variants and the expansion on a synthetic database (64 GiB by default, first argument in GiB).
// The Rust backend loads the same .cu files through NVRTC; this harness is only for iteration.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <random>
#include <string>
#include <cuda_runtime.h>
#include "../pirq_common.cuh"
#include "../dpf_expand.cu"
#include "../db_layout.cu"
#include "../scan_mma.cu"
#include "../scan_xor.cu"
#include "scan_mma_sb.cu"
#include "scan_mma_hint.cu"

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1);} } while (0)

typedef void (*MmaFn)(const uint4*, const uint4*, unsigned*, unsigned, unsigned, unsigned, unsigned);
struct Variant { const char* name; MmaFn fn; int mt, nt, st, wn; int sbw = 0; };
static Variant VARIANTS[] = {
    {"m2n2s8", scan_mma_m2_n2_s8_w1, 2, 2, 8, 1},     {"m2n4s6", scan_mma_m2_n4_s6_w1, 2, 4, 6, 1},
    {"m4n4s4", scan_mma_m4_n4_s4_w1, 4, 4, 4, 1},     {"m2n8s4", scan_mma_m2_n8_s4_w1, 2, 8, 4, 1},
    {"m2n8s4w2", scan_mma_m2_n8_s4_w2, 2, 8, 4, 2},   {"m2n8s6w2", scan_mma_m2_n8_s6_w2, 2, 8, 6, 2},
    {"m1n16s4w2", scan_mma_m1_n16_s4_w2, 1, 16, 4, 2},
    {"m2n8s4w2_acg", scan_mma_m2_n8_s4_w2_acg, 2, 8, 4, 2},
    {"m2n8s4w2_acg_blast", scan_mma_m2_n8_s4_w2_acg_blast, 2, 8, 4, 2},
    {"m2n8s4w2_blast", scan_mma_m2_n8_s4_w2_blast, 2, 8, 4, 2},
    {"m2n8s4w1_blast", scan_mma_m2_n8_s4_w1_blast, 2, 8, 4, 1},
    {"sb_m4n8s4w2t8", scan_mma_sb_m4_n8_s4_w2_t8, 4, 8, 4, 2, 8},
    {"sb_m4n8s4w1t4", scan_mma_sb_m4_n8_s4_w1_t4, 4, 8, 4, 1, 4},
    {"sb_m2n8s4w2t8", scan_mma_sb_m2_n8_s4_w2_t8, 2, 8, 4, 2, 8},
    {"sb_m2n16s4w1t8", scan_mma_sb_m2_n16_s4_w1_t8, 2, 16, 4, 1, 8},
    {"sb_m4n8s6w2t8", scan_mma_sb_m4_n8_s6_w2_t8, 4, 8, 6, 2, 8},
    {"sb_m2n8s4w4t8", scan_mma_sb_m2_n8_s4_w4_t8, 2, 8, 4, 4, 8},
};
static const int NVAR = sizeof(VARIANTS) / sizeof(VARIANTS[0]);

// ---- host references ----
static uint64_t mix64(uint64_t z) { z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; z = (z ^ (z >> 27)) * 0x94D049BB133111EBull; return z ^ (z >> 31); }
static uint64_t synth_word(uint64_t seed, uint64_t p, uint64_t i) { uint64_t b = mix64(seed + (p + 1) * PIRQ_G); return mix64(b + (i + 1) * PIRQ_G); }
static uint32_t rotl(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }
static void host_prg(const uint32_t s[4], uint32_t l[4], uint32_t r[4], int& tl, int& tr) {
    uint32_t in[16] = {0x61707865u, 0x3320646eu, 0x79622d32u, 0x6b206574u, s[0], s[1], s[2], s[3], s[0], s[1], s[2], s[3], 0, 0, 0, 0};
    uint32_t x[16]; for (int i = 0; i < 16; ++i) x[i] = in[i];
    auto qr = [&](int a, int b, int c, int d) { x[a] += x[b]; x[d] = rotl(x[d] ^ x[a], 16); x[c] += x[d]; x[b] = rotl(x[b] ^ x[c], 12); x[a] += x[b]; x[d] = rotl(x[d] ^ x[a], 8); x[c] += x[d]; x[b] = rotl(x[b] ^ x[c], 7); };
    for (int i = 0; i < 4; ++i) { qr(0, 4, 8, 12); qr(1, 5, 9, 13); qr(2, 6, 10, 14); qr(3, 7, 11, 15); qr(0, 5, 10, 15); qr(1, 6, 11, 12); qr(2, 7, 8, 13); qr(3, 4, 9, 14); }
    for (int i = 0; i < 16; ++i) x[i] += in[i];
    for (int i = 0; i < 4; ++i) { l[i] = x[i]; r[i] = x[4 + i]; }
    tl = x[8] & 1; tr = x[9] & 1;
}
static int host_eval_point(const uint32_t* key, int m, uint64_t idx) {
    uint32_t s[4] = {key[0], key[1], key[2], key[3]}; int t = key[4];
    uint64_t leaf = idx >> 7;
    for (int lv = 0; lv < m; ++lv) {
        uint32_t l[4], r[4]; int tl, tr; host_prg(s, l, r, tl, tr);
        const uint32_t* cw = key + 16 + 8 * lv;
        if (t) { for (int i = 0; i < 4; ++i) { l[i] ^= cw[i]; r[i] ^= cw[i]; } tl ^= cw[4] & 1; tr ^= (cw[4] >> 1) & 1; }
        int right = (leaf >> (m - 1 - lv)) & 1;
        for (int i = 0; i < 4; ++i) s[i] = right ? r[i] : l[i];
        t = right ? tr : tl;
    }
    if (t) for (int i = 0; i < 4; ++i) s[i] ^= key[8 + i];
    int bit = idx & 127; return (s[bit / 32] >> (bit % 32)) & 1;
}

__global__ void fill_random(unsigned* p, unsigned long long n, unsigned long long seed) {
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x)
        p[i] = (unsigned)pirq_mix64(seed ^ (i * PIRQ_G));
}

__global__ void mma_peak(int* out, int iters) {
    int acc[8][4] = {};
    uint4 a = make_uint4(threadIdx.x, threadIdx.x * 3, threadIdx.x * 5, threadIdx.x * 7);
    unsigned b0 = threadIdx.x * 11, b1 = threadIdx.x * 13;
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int k = 0; k < 8; ++k) pirq_mma_b1(acc[k], a, b0 + k, b1);
    }
    int s = 0; for (int k = 0; k < 8; ++k) s += acc[k][0] + acc[k][1] + acc[k][2] + acc[k][3];
    if (s == 0x12345) out[0] = s;
}

struct Ctx {
    unsigned words_per_page, mtiles; unsigned long long num_pages, nblocks;
    uint4* a = nullptr; unsigned* partial = nullptr; unsigned* answers = nullptr;
};

static void run_mma(const Ctx& c, const Variant& v, const uint4* sel, unsigned np_total, unsigned q, unsigned bpt, int warps, cudaStream_t st = 0) {
    unsigned ntiles = np_total * 2;
    CK(cudaMemsetAsync(c.partial, 0, (size_t)c.mtiles * ntiles * 16, st));
    if (v.sbw) warps = v.sbw;
    int wm = warps / v.wn;
    dim3 grid(ntiles / (v.nt * v.wn), (c.mtiles + wm * v.mt - 1) / (wm * v.mt), (unsigned)((c.nblocks + bpt - 1) / bpt));
    size_t smem = v.sbw ? (size_t)v.st * (wm * v.mt + v.wn * v.nt / 2) * 512 : (size_t)warps * v.st * v.mt * 512;
    v.fn<<<grid, warps * 32, smem, st>>>(c.a, sel, c.partial, c.mtiles, (unsigned)c.nblocks, np_total, bpt);
    unsigned long long n = (unsigned long long)q * c.words_per_page;
    scan_unpack<<<(unsigned)((n + 255) / 256), 256, 0, st>>>(c.partial, c.answers, q, c.words_per_page, np_total, 0);
}
static void run_xor(const Ctx& c, int kind, const unsigned* sel, unsigned np_total, unsigned q, unsigned bpt, cudaStream_t st = 0) {
    CK(cudaMemsetAsync(c.answers, 0, (size_t)q * c.words_per_page * 4, st));
    int mt = kind == 0 ? 2 : 4, kq = kind == 0 ? 8 : 16, warps = 8;
    dim3 grid((q + kq - 1) / kq, (c.mtiles + warps * mt - 1) / (warps * mt), (unsigned)((c.nblocks + bpt - 1) / bpt));
    if (kind == 0) scan_xor_m2_k8<<<grid, 256, 0, st>>>(c.a, sel, c.answers, c.mtiles, (unsigned)c.nblocks, np_total, q, c.words_per_page, bpt);
}
static unsigned pad_np(unsigned q, int nt, int wn = 1) { unsigned per = nt * 8 * wn; unsigned qp = (q + per - 1) / per * per; if (qp < 16) qp = 16; return qp / 16; }

static float time_ms(std::vector<float>& v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main(int argc, char** argv) {
    double gib = argc > 1 ? atof(argv[1]) : 64.0;
    int only_small = argc > 2 ? atoi(argv[2]) : 0;
    int dev = 0; cudaDeviceProp prop; CK(cudaGetDeviceProperties(&prop, dev));
    printf("device %s sm_%d%d SMs %d L2 %d MB\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount, prop.l2CacheSize >> 20);
    for (int i = 0; i < NVAR; ++i) CK(cudaFuncSetAttribute(VARIANTS[i].fn, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024));
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    int* dsink; CK(cudaMalloc(&dsink, 64));

    // 1. tensor-core peak
    {
        int iters = 4096; int blocks = prop.multiProcessorCount * 8;
        mma_peak<<<blocks, 256>>>(dsink, iters); CK(cudaDeviceSynchronize());
        CK(cudaEventRecord(e0)); mma_peak<<<blocks, 256>>>(dsink, iters); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        double ops = 2.0 * 16 * 8 * 256 * 8.0 * iters * blocks * 8;
        printf("mma.sync b1 peak: %.0f binary TOPS (%.3f ms)\n", ops / ms / 1e9, ms);
    }

    // 2. correctness on a small database: pages not a multiple of 256, 4 KiB pages.
    bool ok = true;
    {
        Ctx c; unsigned ps = 4096; c.words_per_page = ps / 4; c.mtiles = ps / 2; c.num_pages = 3 * 256 + 77; c.nblocks = (c.num_pages + 255) / 256;
        CK(cudaMalloc(&c.a, c.nblocks * 256 * ps));
        unsigned long long seed = 0x1234567;
        db_synthetic<<<dim3((unsigned)c.nblocks, (c.words_per_page + 31) / 32), 256>>>((unsigned*)c.a, seed, 0, c.num_pages, c.words_per_page);
        CK(cudaGetLastError());
        // transpose path from raw pages must give the same A.
        std::vector<uint64_t> host(c.num_pages * ps / 8);
        for (uint64_t p = 0; p < c.num_pages; ++p) for (uint64_t i = 0; i < ps / 8; ++i) host[p * ps / 8 + i] = synth_word(seed, p, i);
        uint4* raw; CK(cudaMalloc(&raw, c.nblocks * 256 * ps)); CK(cudaMemset(raw, 0xab, c.nblocks * 256 * ps));
        CK(cudaMemcpy(raw, host.data(), host.size() * 8, cudaMemcpyHostToDevice));
        uint4* a2; CK(cudaMalloc(&a2, c.nblocks * 256 * ps));
        db_transpose<<<dim3((unsigned)c.nblocks, (c.words_per_page + 31) / 32), 256>>>((unsigned*)a2, raw, 0, c.num_pages, c.words_per_page);
        CK(cudaDeviceSynchronize());
        std::vector<unsigned> ha(c.nblocks * 256 * ps / 4), ha2(ha.size());
        CK(cudaMemcpy(ha.data(), c.a, ha.size() * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(ha2.data(), a2, ha.size() * 4, cudaMemcpyDeviceToHost));
        printf("synthetic == transpose(raw synthetic): %s\n", ha == ha2 ? "ok" : "MISMATCH"); ok &= ha == ha2;
        unsigned q = 37; int maxnt = 32; unsigned np_max = pad_np(q, maxnt);
        unsigned* sel; CK(cudaMalloc(&sel, c.nblocks * np_max * 512));
        CK(cudaMalloc(&c.partial, (size_t)c.mtiles * np_max * 2 * 16)); CK(cudaMalloc(&c.answers, (size_t)np_max * 16 * ps));
        for (int vi = -1; vi < NVAR; ++vi) {
            unsigned np_total = vi < 0 ? pad_np(q, 2) : pad_np(q, VARIANTS[vi].nt, VARIANTS[vi].wn);
            fill_random<<<256, 256>>>(sel, c.nblocks * np_total * 128, 99 + vi);
            CK(cudaDeviceSynchronize());
            std::vector<unsigned> hs(c.nblocks * np_total * 128); CK(cudaMemcpy(hs.data(), sel, hs.size() * 4, cudaMemcpyDeviceToHost));
            // expected answers on the host
            std::vector<uint64_t> exp((size_t)q * ps / 8, 0);
            for (unsigned k = 0; k < q; ++k) for (uint64_t p = 0; p < c.num_pages; ++p) {
                uint64_t b = p / 256, j = p % 256; unsigned w = j / 32;
                unsigned long long wi = ((b * np_total + (k >> 4)) * 32ull + 4u * (k & 7u) + (w & 3u)) * 4ull + 2u * ((k >> 3) & 1u) + (w >> 2);
                if ((hs[wi] >> (j % 32)) & 1) for (unsigned i = 0; i < ps / 8; ++i) exp[(size_t)k * ps / 8 + i] ^= host[p * ps / 8 + i];
            }
            if (vi < 0) run_xor(c, 0, sel, np_total, q, 2); else run_mma(c, VARIANTS[vi], (uint4*)sel, np_total, q, 3, 8);
            CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
            std::vector<uint64_t> got((size_t)q * ps / 8); CK(cudaMemcpy(got.data(), c.answers, got.size() * 8, cudaMemcpyDeviceToHost));
            bool same = got == exp; ok &= same;
            printf("scan %-8s Q=%u vs host: %s\n", vi < 0 ? "xor_m2k8" : VARIANTS[vi].name, q, same ? "ok" : "MISMATCH");
        }
        // DPF expansion vs host DPF at random points: n = 18 (m = 11, T = 4 levels of nodes)
        for (int n : {3, 7, 8, 12, 14, 18, 20}) {
            int m = n > 7 ? n - 7 : 0; unsigned qk = 21; unsigned np_total = (qk + 15) / 16;
            std::vector<unsigned> keys(qk * PIRQ_KEY_WORDS, 0); std::mt19937_64 rng(n);
            for (unsigned k = 0; k < qk; ++k) { unsigned* kk = &keys[k * PIRQ_KEY_WORDS]; for (int i = 0; i < 4; ++i) kk[i] = rng(); kk[4] = k & 1; for (int i = 0; i < 4; ++i) kk[8 + i] = rng();
                for (int lv = 0; lv < m; ++lv) { for (int i = 0; i < 4; ++i) kk[16 + 8 * lv + i] = rng(); kk[16 + 8 * lv + 4] = rng() & 3; } }
            unsigned* dk; CK(cudaMalloc(&dk, keys.size() * 4)); CK(cudaMemcpy(dk, keys.data(), keys.size() * 4, cudaMemcpyHostToDevice));
            unsigned long long nbd = m == 0 ? 1 : 1ull << (m - 1);
            uint4* dsel; CK(cudaMalloc(&dsel, nbd * np_total * 512));
            int S = m < 7 ? m : 7, T = m - S;
            uint4 *s1 = nullptr, *s2 = nullptr; unsigned char *t1 = nullptr, *t2 = nullptr;
            if (T > 0) { CK(cudaMalloc(&s1, (qk << T) * 16ull)); CK(cudaMalloc(&t1, qk << T)); }
            if (T > 10) { CK(cudaMalloc(&s2, (qk << (T - 10)) * 16ull)); CK(cudaMalloc(&t2, qk << (T - 10))); }
            if (T > 10) { dpf_expand_nodes<<<dim3(1, qk), 256>>>(dk, nullptr, nullptr, s2, t2, 0, T - 10); dpf_expand_nodes<<<dim3(1u << (T - 10), qk), 256>>>(dk, s2, t2, s1, t1, T - 10, 10); }
            else if (T > 0) dpf_expand_nodes<<<dim3(1, qk), 256>>>(dk, nullptr, nullptr, s1, t1, 0, T);
            dpf_expand_leaves<<<dim3(1u << T, np_total), 256>>>(dk, qk, s1, t1, m, dsel, np_total, 0, 0);
            CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
            std::vector<unsigned> hs(nbd * np_total * 128); CK(cudaMemcpy(hs.data(), dsel, hs.size() * 4, cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int trial = 0; trial < 4000; ++trial) {
                unsigned k = rng() % qk; uint64_t p = rng() % (1ull << n);
                uint64_t b = p / 256, j = p % 256; unsigned w = j / 32;
                unsigned long long wi = ((b * np_total + (k >> 4)) * 32ull + 4u * (k & 7u) + (w & 3u)) * 4ull + 2u * ((k >> 3) & 1u) + (w >> 2);
                int got = (hs[wi] >> (j % 32)) & 1, want = host_eval_point(&keys[k * PIRQ_KEY_WORDS], m, p);
                bad += got != want;
            }
            printf("expand n=%d vs host DPF (4000 points): %s\n", n, bad ? "MISMATCH" : "ok"); ok &= bad == 0;
            cudaFree(dk); cudaFree(dsel); if (s1) { cudaFree(s1); cudaFree(t1); } if (s2) { cudaFree(s2); cudaFree(t2); }
        }
        cudaFree(c.a); cudaFree(a2); cudaFree(raw); cudaFree(sel); cudaFree(c.partial); cudaFree(c.answers);
    }
    printf("CORRECTNESS %s\n", ok ? "PASS" : "FAIL");
    if (only_small) return ok ? 0 : 1;

    // 3. timing on a synthetic database of `gib` GiB with 4 KiB pages.
    Ctx c; unsigned ps = 4096; c.words_per_page = ps / 4; c.mtiles = ps / 2;
    c.num_pages = (unsigned long long)(gib * (1ull << 30)) / ps; c.nblocks = (c.num_pages + 255) / 256;
    size_t abytes = c.nblocks * 256ull * ps;
    CK(cudaMalloc(&c.a, abytes));
    CK(cudaEventRecord(e0));
    db_synthetic<<<dim3((unsigned)c.nblocks, (c.words_per_page + 31) / 32), 256>>>((unsigned*)c.a, 42, 0, c.num_pages, c.words_per_page);
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); CK(cudaGetLastError());
    { float ms; cudaEventElapsedTime(&ms, e0, e1); printf("synthetic %.1f GiB generated in %.1f ms\n", abytes / 1073741824.0, ms); }
    const unsigned QMAX = 512;
    uint4* sel; CK(cudaMalloc(&sel, c.nblocks * (QMAX / 16) * 512));
    fill_random<<<4096, 256>>>((unsigned*)sel, c.nblocks * (QMAX / 16) * 128, 7);
    CK(cudaMalloc(&c.partial, (size_t)c.mtiles * (QMAX / 8) * 16)); CK(cudaMalloc(&c.answers, (size_t)QMAX * ps));
    auto timeit = [&](auto&& f, int reps) { std::vector<float> v; f(); CK(cudaDeviceSynchronize()); for (int r = 0; r < reps; ++r) { CK(cudaEventRecord(e0)); f(); CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1)); float ms; cudaEventElapsedTime(&ms, e0, e1); v.push_back(ms); } CK(cudaGetLastError()); return time_ms(v); };
    float floor_ms = timeit([&] { read_all<<<prop.multiProcessorCount * 16, 256>>>(c.a, abytes / 16, (unsigned*)dsink); }, 5);
    printf("read-all floor: %.2f ms (%.0f GB/s)\n", floor_ms, abytes / floor_ms / 1e6);
    int reps = 3;
    std::vector<unsigned> qs = {1, 16, 32, 64, 128, 192, 256, 512};
    if (argc > 3) { qs.clear(); for (char* s = strtok(argv[3], ","); s; s = strtok(nullptr, ",")) qs.push_back(atoi(s)); }
    std::vector<int> bpts = {256, 1024};
    if (getenv("PIRQ_BPT")) bpts = {atoi(getenv("PIRQ_BPT"))};
    for (unsigned q : qs) {
        for (int vi = 0; vi < NVAR; ++vi) {
            const Variant& v = VARIANTS[vi];
            if (getenv("PIRQ_VARIANT") && !strstr(v.name, getenv("PIRQ_VARIANT"))) continue;
            unsigned per = v.nt * 8 * v.wn; if (q > 32 && v.nt * 8 < 32) continue; if (per > 2 * q + 16 && per > 16) continue;
            unsigned np_total = pad_np(q, v.nt, v.wn); if (np_total > QMAX / 16) continue;
            for (int warps : {4, 8}) for (int bpt : bpts) {
                if (warps < 2 * v.wn) continue;
                if (v.sbw && warps != 8) continue;
                float ms = timeit([&] { run_mma(c, v, sel, np_total, q, bpt, warps); }, reps);
                printf("Q=%4u %-8s w=%d bpt=%4d %8.2f ms %8.0f keys/s %6.0f TOPS\n", q, v.name, warps, bpt, ms, q / ms * 1e3,
                       2.0 * c.mtiles * 16 * c.nblocks * 256.0 * np_total * 16 / ms / 1e9);
            }
        }
        if (q <= 64 && q != 1) for (int kind = 0; kind < 1; ++kind) {
            unsigned np_total = pad_np(q, 2);
            float ms = timeit([&] { run_xor(c, kind, (unsigned*)sel, np_total, q, 512); }, reps);
            printf("Q=%4u %-8s            %8.2f ms %8.0f keys/s (CUDA cores)\n", q, kind ? "xor_m4k16" : "xor_m2k8", ms, q / ms * 1e3);
        }
        fflush(stdout);
    }
    // expansion timing at the database's domain
    if (!getenv("PIRQ_VARIANT")) {
        int n = 0; while ((1ull << n) < c.num_pages) ++n; int m = n - 7, S = 7, T = m - S;
        for (unsigned qk : {1u, 16u, 128u, 256u}) {
            unsigned np_total = (qk + 15) / 16;
            std::vector<unsigned> keys(qk * PIRQ_KEY_WORDS, 0); std::mt19937_64 rng(1);
            for (auto& x : keys) x = rng(); for (unsigned k = 0; k < qk; ++k) { keys[k * PIRQ_KEY_WORDS + 4] = k & 1; for (int lv = 0; lv < m; ++lv) keys[k * PIRQ_KEY_WORDS + 16 + 8 * lv + 4] &= 3; }
            unsigned* dk; CK(cudaMalloc(&dk, keys.size() * 4)); CK(cudaMemcpy(dk, keys.data(), keys.size() * 4, cudaMemcpyHostToDevice));
            uint4* s1; unsigned char* t1; CK(cudaMalloc(&s1, (qk << T) * 16ull)); CK(cudaMalloc(&t1, qk << T));
            float ms = timeit([&] {
                dpf_expand_nodes<<<dim3(1, qk), 256>>>(dk, nullptr, nullptr, s1, t1, 0, T);
                dpf_expand_leaves<<<dim3(1u << T, np_total), 256>>>(dk, qk, s1, t1, m, sel, np_total, 0, 0); }, 5);
            printf("expand n=%d Q=%u: %.3f ms (%.0f Mblocks/s)\n", n, qk, ms, qk * (double)(1ull << m) / ms / 1e3);
            cudaFree(dk); cudaFree(s1); cudaFree(t1);
        }
    }
    return ok ? 0 : 1;
}
