//! Database files for tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pirq_db::{self as db, Header, PirDb};
use pirq_shared::synthetic;
use tempfile::TempDir;

/// A `.pirdb` file of deterministic synthetic pages (`pirq_shared::synthetic`, the generator `pirq db gen`
/// and the GPU use) in a temporary directory of its own, removed on drop; open, mapped.
pub struct TestDb {
    pub path: PathBuf,
    pub db: Arc<PirDb>,
    dir: TempDir,
}

impl TestDb {
    /// `num_pages` pages of `page_size` bytes under `seed`, at epoch 0.
    pub fn create(num_pages: u64, page_size: u32, seed: u64) -> anyhow::Result<TestDb> {
        TestDb::create_at(num_pages, page_size, 0, seed)
    }

    /// [`TestDb::create`] with `epoch` in the header.
    pub fn create_at(
        num_pages: u64,
        page_size: u32,
        epoch: u64,
        seed: u64,
    ) -> anyhow::Result<TestDb> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("test.pirdb");
        let header = Header {
            page_size,
            num_pages,
            epoch,
        };
        db::write(
            &path,
            &header,
            |p, page| synthetic::fill_page(seed, p, page),
            |_| {},
        )?;
        let db = Arc::new(PirDb::open(&path)?);
        Ok(TestDb { path, db, dir })
    }

    /// Page `index` (panics past the end).
    pub fn page(&self, index: u64) -> &[u8] {
        self.db.page(index).expect("index inside the database")
    }

    /// The file's directory, for files a test writes beside it (removed with it).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
