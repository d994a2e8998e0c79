//! The CUDA sources of pirq's scan and their entry-point names, as data.
//!
//! The `.cu` files beside this crate are the single copy: `pirq-scan` compiles them with NVRTC
//! for the exact GPU it finds at start-up, so no PTX is shipped. A crate (rather than
//! `include_str!` reaching four folders up from the scanner) makes the dependency real: cargo
//! rebuilds the scanner when a kernel changes, and the names the scanner loads sit next to the
//! sources that define them.

/// One kernel source file.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    /// File name under `kernels/` (used for `#include` and for the program's section markers).
    pub name: &'static str,
    /// The file's text.
    pub text: &'static str,
}

/// A [`Source`] for a file beside this crate: its name is written once, so the name and the
/// file read cannot disagree.
macro_rules! source {
    ($name:literal) => {
        Source {
            name: $name,
            text: include_str!(concat!("../", $name)),
        }
    };
}

/// Every source, in the order they are concatenated into one NVRTC program (the common header
/// first). With `PIRQ_ONE_SOURCE` defined, the files' own `#include` lines drop out.
pub const SOURCES: &[Source] = &[
    source!("pirq_common.cuh"),
    source!("dpf_expand.cu"),
    source!("db_layout.cu"),
    source!("scan_mma.cu"),
    source!("scan_wgmma.cu"),
    source!("scan_xor.cu"),
    source!("epoch_merge.cu"),
];

/// The macro that makes the concatenated program skip the files' `#include` lines.
pub const ONE_SOURCE_DEFINE: &str = "PIRQ_ONE_SOURCE";

/// Entry points (`extern "C" __global__`) the scanner loads by name.
pub mod entry {
    /// `dpf_expand.cu`: the upper tree levels of every key.
    pub const DPF_EXPAND_NODES: &str = "dpf_expand_nodes";
    /// `dpf_expand.cu`: the leaves (selection bits) of every key.
    pub const DPF_EXPAND_LEAVES: &str = "dpf_expand_leaves";
    /// `db_layout.cu`: pages into the scan's block layout.
    pub const DB_TRANSPOSE: &str = "db_transpose";
    /// `db_layout.cu`: a synthetic database generated on the device.
    pub const DB_SYNTHETIC: &str = "db_synthetic";
    /// `db_layout.cu`: reads the whole database (bandwidth probe).
    pub const READ_ALL: &str = "read_all";
    /// `db_layout.cu`: one page read back out of the block layout.
    pub const DB_PAGE_READ: &str = "db_page_read";
    /// `db_layout.cu`: XOR one page into the block layout (epoch folds).
    pub const DB_PAGE_XOR: &str = "db_page_xor";
    /// `scan_mma.cu`: accumulators out of the tensor-core scan's tile layout.
    pub const SCAN_UNPACK: &str = "scan_unpack";
    /// `scan_xor.cu`: the portable XOR scan (the `PIRQ_SCAN_XOR(2, 8)` instance).
    pub const SCAN_XOR: &str = "scan_xor_m2_k8";
    /// `epoch_merge.cu`: later epochs' deltas merged into the base answers.
    pub const EPOCH_MERGE: &str = "epoch_merge";
    /// `scan_wgmma.cu`: present only when the program was built for sm_90a (the `wgmma`
    /// kernels' bodies are empty otherwise).
    pub const HAS_WGMMA: &str = "pirq_has_wgmma";
    // The tensor-core variants `scan_mma_m<MT>_n<NT>_s<STAGES>_w<WN>` and
    // `scan_wgmma_n<N>_s<STAGES>` are named from their shape by `pirq-scan`'s
    // `ScanPlan::kernel_name`.
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every named entry point is defined in some source: a renamed kernel fails here, on any
    /// machine, instead of at NVRTC load time on a GPU.
    #[test]
    fn entry_points_are_defined() {
        let all: String = SOURCES.iter().map(|s| s.text).collect();
        for name in [
            entry::DPF_EXPAND_NODES,
            entry::DPF_EXPAND_LEAVES,
            entry::DB_TRANSPOSE,
            entry::DB_SYNTHETIC,
            entry::READ_ALL,
            entry::DB_PAGE_READ,
            entry::DB_PAGE_XOR,
            entry::SCAN_UNPACK,
            entry::EPOCH_MERGE,
            entry::HAS_WGMMA,
        ] {
            assert!(all.contains(name), "no kernel named {name} in kernels/");
        }
        // Macro-made: `scan_xor_m##MT##_k##KQ`, instantiated as (2, 8).
        assert_eq!(entry::SCAN_XOR, "scan_xor_m2_k8");
        assert!(all.contains("PIRQ_SCAN_XOR(2, 8)"));
        assert!(all.contains(ONE_SOURCE_DEFINE));
    }
}
