// scan_mma_hint.cu: cache-hint experiments on the production kernel body (harness only).
// _acg: A through L2 only even when WN > 1; _blast: B loads with L1::evict_last.
#define PIRQ_SCAN_MMA_HINT(MT, NT, ST, WN, AL1, BL, TAG)                                           \
    extern "C" __global__ void __launch_bounds__(256) scan_mma_m##MT##_n##NT##_s##ST##_w##WN##TAG( \
        const uint4* __restrict__ a, const uint4* __restrict__ b, unsigned* __restrict__ partial, \
        unsigned mtiles, unsigned nblocks, unsigned np_total, unsigned blocks_per_task) {         \
        scan_mma_body<MT, NT, ST, WN, AL1, BL>(a, b, partial, mtiles, nblocks, np_total, blocks_per_task); \
    }

PIRQ_SCAN_MMA_HINT(2, 8, 4, 2, false, false, _acg)
PIRQ_SCAN_MMA_HINT(2, 8, 4, 2, false, true, _acg_blast)
PIRQ_SCAN_MMA_HINT(2, 8, 4, 2, true, true, _blast)
PIRQ_SCAN_MMA_HINT(2, 8, 4, 1, false, true, _blast)
