//! Picks the scanner backend named by `--backend`.

use std::sync::Arc;

use pirq_db::PirDb;
use pirq_shared::shard::ShardSpec;

use crate::config::{Backend, SyntheticDb};
use pirq_scan::cpu::CpuScanner;
use pirq_scan::{ScanError, Scanner};

/// What the backends are configured with (the worker's flags).
#[derive(Clone, Copy, Debug)]
pub struct ScannerOptions {
    /// CPU scan threads (0 = one per core).
    pub threads: usize,
    /// Largest batch one pass accepts.
    pub max_batch_keys: usize,
    /// Epochs answered exactly (`--epoch-window`).
    pub epoch_window: usize,
    /// CUDA device ordinal (`--gpu`).
    pub gpu: usize,
    /// CUDA workspaces, each with its own stream (`--workspaces`).
    pub workspaces: usize,
    /// The shard served (`--shard`): the scanner loads and answers its page range only.
    pub shard: ShardSpec,
}

/// Opens the scanner. `auto` takes CUDA when this build has it and a GPU answers, else CPU.
pub fn open(
    kind: Backend,
    db: Arc<PirDb>,
    options: ScannerOptions,
) -> Result<Arc<dyn Scanner>, ScanError> {
    match kind {
        Backend::Cpu => cpu(db, &options),
        Backend::Cuda => cuda(db, &options),
        Backend::Auto => match cuda(db.clone(), &options) {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::info!(reason = %e, "CUDA backend unavailable; using the CPU backend");
                cpu(db, &options)
            }
        },
    }
}

/// Opens a scanner over synthetic pages generated on the GPU (`--synthetic`): the CUDA backend
/// only (the CPU backend serves files).
pub fn open_synthetic(
    kind: Backend,
    source: &SyntheticDb,
    options: ScannerOptions,
) -> Result<Arc<dyn Scanner>, ScanError> {
    match kind {
        Backend::Cpu => Err(ScanError::Unsupported(
            "--synthetic with the CPU backend (use --backend cuda, or a file)",
        )),
        Backend::Cuda | Backend::Auto => cuda_synthetic(source, &options),
    }
}

#[cfg(feature = "cuda")]
fn cuda_synthetic(
    source: &SyntheticDb,
    options: &ScannerOptions,
) -> Result<Arc<dyn Scanner>, ScanError> {
    use pirq_scan::cuda::CudaScanner;
    let range = options
        .shard
        .range(source.num_pages)
        .map_err(|e| ScanError::Device(format!("--shard {}: {e}", options.shard)))?;
    let scanner = CudaScanner::synthetic_range(
        source.page_size as usize,
        source.num_pages,
        range,
        source.seed,
        cuda_config(options),
    )
    .map_err(|e| ScanError::Device(e.to_string()))?;
    Ok(Arc::new(scanner))
}

#[cfg(not(feature = "cuda"))]
fn cuda_synthetic(
    _source: &SyntheticDb,
    _options: &ScannerOptions,
) -> Result<Arc<dyn Scanner>, ScanError> {
    Err(ScanError::Device(
        "this build has no CUDA backend (cargo feature `cuda`)".into(),
    ))
}

/// The pages of `db` that shard `spec` serves.
/// A shard file (`pirq db split`) serves the shard it was cut for, and no other.
pub fn shard_range(db: &PirDb, spec: ShardSpec) -> Result<std::ops::Range<u64>, ScanError> {
    if let Some(origin) = db.shard() {
        if origin.spec != spec {
            return Err(ScanError::Device(format!(
                "{} is the file of shard {}, not of shard {spec}",
                db.path().display(),
                origin.spec
            )));
        }
    }
    spec.range(db.total_pages())
        .map_err(|e| ScanError::Device(format!("--shard {spec}: {e}")))
}

fn cpu(db: Arc<PirDb>, options: &ScannerOptions) -> Result<Arc<dyn Scanner>, ScanError> {
    let range = shard_range(&db, options.shard)?;
    Ok(Arc::new(
        CpuScanner::with_range(db, options.threads, range)?
            .with_max_batch_keys(options.max_batch_keys)
            .with_epoch_window(options.epoch_window),
    ))
}

#[cfg(feature = "cuda")]
fn cuda(db: Arc<PirDb>, options: &ScannerOptions) -> Result<Arc<dyn Scanner>, ScanError> {
    use pirq_scan::cuda::CudaScanner;
    let config = cuda_config(options);
    let range = shard_range(&db, options.shard)?;
    let scanner =
        CudaScanner::new(db, range, config).map_err(|e| ScanError::Device(e.to_string()))?;
    Ok(Arc::new(scanner))
}

#[cfg(feature = "cuda")]
fn cuda_config(options: &ScannerOptions) -> pirq_scan::cuda::CudaConfig {
    pirq_scan::cuda::CudaConfig {
        device: options.gpu,
        workspaces: options.workspaces,
        max_batch_keys: options.max_batch_keys,
        epoch_window: options.epoch_window,
        ..pirq_scan::cuda::CudaConfig::default()
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(_db: Arc<PirDb>, _options: &ScannerOptions) -> Result<Arc<dyn Scanner>, ScanError> {
    Err(ScanError::Device(
        "this build has no CUDA backend (cargo feature `cuda`)".into(),
    ))
}
