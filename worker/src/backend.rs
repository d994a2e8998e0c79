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

/// One table's database as the memory check sees it: its name, page size, total pages and the
/// pages this worker loads.
pub struct TableShape {
    pub name: String,
    pub page_size: usize,
    pub total_pages: u64,
    pub range: std::ops::Range<u64>,
}

/// The backend a worker of several tables loads them all on, checked before any is loaded: on
/// CUDA every table's database, workspaces and headroom must fit in the GPU's free memory
/// together, or the worker refuses to start naming each table's share (`--backend cuda`), or
/// serves every table from the CPU (`auto`, logged). A worker of one table keeps `kind`: its
/// scanner checks its own memory as it loads.
pub fn for_tables(
    kind: Backend,
    tables: &[TableShape],
    options: &ScannerOptions,
) -> anyhow::Result<Backend> {
    if tables.len() < 2 || kind == Backend::Cpu {
        return Ok(kind);
    }
    match gpu_fit(tables, options) {
        Ok(()) => Ok(kind),
        Err(why) if kind == Backend::Auto => {
            tracing::info!(reason = %why, "using the CPU backend for every table");
            Ok(Backend::Cpu)
        }
        Err(why) => Err(anyhow::anyhow!(why)),
    }
}

/// Whether every table fits on the GPU at once; else why not, in one sentence.
#[cfg(feature = "cuda")]
fn gpu_fit(tables: &[TableShape], options: &ScannerOptions) -> Result<(), String> {
    use pirq_scan::cuda::{device_bytes_needed, free_device_memory};
    let config = cuda_config(options);
    let free = free_device_memory(options.gpu)
        .map_err(|e| format!("no GPU to load the tables on: {e}"))?;
    let needs: Vec<(&str, u64)> = tables
        .iter()
        .map(|t| {
            let need = device_bytes_needed(t.page_size, t.total_pages, t.range.clone(), &config);
            (t.name.as_str(), need)
        })
        .collect();
    let total: u64 = needs.iter().map(|(_, n)| n).sum();
    if total <= free {
        return Ok(());
    }
    const GIB: f64 = (1u64 << 30) as f64;
    let each: Vec<String> = needs
        .iter()
        .map(|(name, n)| format!("{name} {:.2} GiB", *n as f64 / GIB))
        .collect();
    Err(format!(
        "not enough GPU memory for the {} tables on GPU {}: they need {:.2} GiB together ({}; \
         each its database, workspaces and 256 MiB of headroom), {:.2} GiB are free; serve \
         fewer tables on this GPU (another worker with --gpu), lower --workspaces or \
         --max-batch-keys, or use --backend cpu",
        tables.len(),
        options.gpu,
        total as f64 / GIB,
        each.join(", "),
        free as f64 / GIB
    ))
}

#[cfg(not(feature = "cuda"))]
fn gpu_fit(_tables: &[TableShape], _options: &ScannerOptions) -> Result<(), String> {
    Err("this build has no CUDA backend (cargo feature `cuda`)".into())
}
