//! Why the CUDA scanner could not start or run: one error type for every file of the backend,
//! each cause kept as the error's source (the driver's or NVRTC's own error), and its
//! conversion into the scanner-wide [`ScanError`] beside it.

use cudarc::driver::DriverError;
use cudarc::nvrtc::CompileError;

use crate::ScanError;

/// Why the CUDA scanner could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    #[error("CUDA driver: {0}")]
    Driver(#[from] DriverError),
    #[error("NVRTC could not compile the kernels: {0}")]
    Compile(#[source] CompileError),
    #[error(
        "not enough GPU memory: the database and workspaces need {needed} bytes ({:.2} GiB), {free} bytes ({:.2} GiB) are free",
        *needed as f64 / GIB, *free as f64 / GIB
    )]
    OutOfMemory { needed: u64, free: u64 },
    #[error("unsupported: {0}")]
    Unsupported(String),
}

const GIB: f64 = (1u64 << 30) as f64;

impl From<CudaError> for ScanError {
    fn from(e: CudaError) -> ScanError {
        ScanError::Cuda(e)
    }
}

impl From<DriverError> for ScanError {
    fn from(e: DriverError) -> ScanError {
        ScanError::Cuda(CudaError::Driver(e))
    }
}
