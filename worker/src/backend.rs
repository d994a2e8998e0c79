//! Picks the scanner backend named by `--backend`.

use std::sync::Arc;

use pirq_shared::db::PirDb;

use crate::config::Backend;
use crate::scan::cpu::CpuScanner;
use crate::scan::{ScanError, Scanner};

/// Opens the scanner. `auto` takes CUDA when this build has it and a GPU answers, else CPU.
/// `epoch_window` is how many epochs the scanner answers exactly (`--epoch-window`).
pub fn open(
    kind: Backend,
    db: Arc<PirDb>,
    threads: usize,
    max_batch_keys: usize,
    epoch_window: usize,
) -> Result<Arc<dyn Scanner>, ScanError> {
    match kind {
        Backend::Cpu => cpu(db, threads, max_batch_keys, epoch_window),
        Backend::Cuda => cuda(db, max_batch_keys, epoch_window),
        Backend::Auto => match cuda(db.clone(), max_batch_keys, epoch_window) {
            Ok(s) => Ok(s),
            Err(e) => {
                tracing::info!(reason = %e, "CUDA backend unavailable; using the CPU backend");
                cpu(db, threads, max_batch_keys, epoch_window)
            }
        },
    }
}

fn cpu(
    db: Arc<PirDb>,
    threads: usize,
    max_batch_keys: usize,
    epoch_window: usize,
) -> Result<Arc<dyn Scanner>, ScanError> {
    Ok(Arc::new(
        CpuScanner::new(db, threads)?
            .with_max_batch_keys(max_batch_keys)
            .with_epoch_window(epoch_window),
    ))
}

#[cfg(feature = "cuda")]
fn cuda(
    db: Arc<PirDb>,
    max_batch_keys: usize,
    epoch_window: usize,
) -> Result<Arc<dyn Scanner>, ScanError> {
    let scanner = crate::scan::cuda::CudaScanner::new(db, max_batch_keys, epoch_window)
        .map_err(|e| ScanError::Device(e.to_string()))?;
    Ok(Arc::new(scanner))
}

#[cfg(not(feature = "cuda"))]
fn cuda(
    _db: Arc<PirDb>,
    _max_batch_keys: usize,
    _epoch_window: usize,
) -> Result<Arc<dyn Scanner>, ScanError> {
    Err(ScanError::Device(
        "this build has no CUDA backend (cargo feature `cuda`)".into(),
    ))
}
