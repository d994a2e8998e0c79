//! The kernels of `kernels/*.cu` (the `pirq-kernels` crate), compiled with NVRTC for the device
//! at start-up.
//!
//! The sources are concatenated into one program (with [`pirq_kernels::ONE_SOURCE_DEFINE`]
//! defined so their `#include` lines drop out): the binary carries no PTX and always runs code
//! built for the exact GPU it finds. On Hopper (compute capability 9.0) it is built for
//! `sm_90a`, the target with `wgmma` (`kernels/scan_wgmma.cu`); if NVRTC cannot build that, it
//! builds for plain `sm_90` and the `mma.sync` kernels serve alone.

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::sys::CUfunction_attribute_enum;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use pirq_kernels::entry;

use super::error::CudaError;
use super::layout::{ScanPlan, MMA_VARIANTS, WGMMA_VARIANTS};

/// Largest dynamic shared memory a scan CTA asks for (8 warps x 8 stages x 2 tiles x 512 B).
const MAX_SCAN_SMEM: i32 = 64 * 1024;

/// Handles to every kernel of the module.
pub struct Kernels {
    _module: Arc<CudaModule>,
    pub expand_nodes: CudaFunction,
    pub expand_leaves: CudaFunction,
    pub transpose: CudaFunction,
    pub synthetic: CudaFunction,
    pub read_all: CudaFunction,
    pub unpack: CudaFunction,
    pub scan_xor: CudaFunction,
    pub page_read: CudaFunction,
    pub page_xor: CudaFunction,
    pub epoch_merge: CudaFunction,
    /// Tensor-core variants by name (`mma.sync`, and `wgmma` on sm_90a); empty before sm_80.
    scan_mma: HashMap<String, CudaFunction>,
    /// Whether the `wgmma` variants were built (sm_90a).
    wgmma: bool,
    /// Compute capability (major, minor).
    pub capability: (i32, i32),
    /// Streaming multiprocessors: the launches that size their grids by the GPU read it here
    /// rather than asking the driver at every launch.
    pub sms: u32,
}

impl Kernels {
    /// Compiles the sources for `ctx`'s device and loads every kernel.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels, CudaError> {
        let capability = ctx.compute_capability()?;
        let sms = ctx.attribute(
            cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
        )? as u32;
        let (major, minor) = capability;
        let mut src = format!("#define {} 1\n", pirq_kernels::ONE_SOURCE_DEFINE);
        for source in pirq_kernels::SOURCES {
            src.push_str(&format!("// ---- {} ----\n", source.name));
            src.push_str(source.text);
            src.push('\n');
        }
        let compile = |arch: String| {
            let opts = CompileOptions {
                // NVRTC wants a &'static str; one small leak per build.
                arch: Some(Box::leak(arch.into_boxed_str())),
                options: vec!["-std=c++17".into(), "-default-device".into()],
                ..Default::default()
            };
            compile_ptx_with_opts(src.clone(), opts).map_err(CudaError::Compile)
        };
        let hopper = (major, minor) == (9, 0);
        let (ptx, wgmma) = match hopper.then(|| compile("sm_90a".into())) {
            Some(Ok(ptx)) => (ptx, true),
            other => {
                if let Some(Err(e)) = other {
                    tracing::info!(reason = %e, "no sm_90a build; the mma.sync kernels serve alone");
                }
                (compile(format!("sm_{major}{minor}"))?, false)
            }
        };
        let module = ctx.load_module(ptx)?;
        let f = |name: &str| module.load_function(name);
        // The wgmma bodies compile only where NVRTC defines the sm_90a feature macro.
        let wgmma = wgmma && f(entry::HAS_WGMMA).is_ok();
        let mut scan_mma = HashMap::new();
        if major >= 8 {
            for &(mt, nt, stages, wn) in MMA_VARIANTS {
                let plan = ScanPlan::Mma {
                    mt,
                    nt,
                    stages,
                    wn,
                    warps: 8,
                    blocks_per_task: 1,
                };
                let name = plan.kernel_name();
                let func = f(&name)?;
                func.set_attribute(
                    CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    MAX_SCAN_SMEM,
                )?;
                scan_mma.insert(name, func);
            }
        }
        if wgmma {
            for &(n, stages) in WGMMA_VARIANTS {
                let plan = ScanPlan::Wgmma {
                    n,
                    stages,
                    blocks_per_task: 1,
                };
                let name = plan.kernel_name();
                let func = f(&name)?;
                func.set_attribute(
                    CUfunction_attribute_enum::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                    plan.dynamic_smem() as i32,
                )?;
                scan_mma.insert(name, func);
            }
        }
        Ok(Kernels {
            expand_nodes: f(entry::DPF_EXPAND_NODES)?,
            expand_leaves: f(entry::DPF_EXPAND_LEAVES)?,
            transpose: f(entry::DB_TRANSPOSE)?,
            synthetic: f(entry::DB_SYNTHETIC)?,
            read_all: f(entry::READ_ALL)?,
            unpack: f(entry::SCAN_UNPACK)?,
            scan_xor: f(entry::SCAN_XOR)?,
            page_read: f(entry::DB_PAGE_READ)?,
            page_xor: f(entry::DB_PAGE_XOR)?,
            epoch_merge: f(entry::EPOCH_MERGE)?,
            scan_mma,
            wgmma,
            capability,
            sms,
            _module: module,
        })
    }

    /// Whether this GPU has the binary tensor-core MMA (sm_80+).
    pub fn has_binary_mma(&self) -> bool {
        !self.scan_mma.is_empty()
    }

    /// Whether the `wgmma` kernels are built (Hopper, sm_90a).
    pub fn has_wgmma(&self) -> bool {
        self.wgmma
    }

    /// The function that runs `plan`.
    pub fn scan(&self, plan: &ScanPlan) -> Result<&CudaFunction, CudaError> {
        match plan {
            ScanPlan::Xor { .. } => Ok(&self.scan_xor),
            ScanPlan::Mma { .. } | ScanPlan::Wgmma { .. } => {
                self.scan_mma.get(&plan.kernel_name()).ok_or_else(|| {
                    CudaError::Unsupported(format!(
                        "scan plan {plan} on sm_{}{}",
                        self.capability.0, self.capability.1
                    ))
                })
            }
        }
    }
}
