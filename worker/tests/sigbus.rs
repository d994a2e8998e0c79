//! The SIGBUS guard (`pirq_worker::guard::exit_on_sigbus`): a mapped database truncated under
//! the process makes the next read of a lost page fault; the worker must then write one line
//! naming the file and exit with status 3, not die silently. The fault is real: the test runs
//! itself again as a child process that maps a file, truncates it and reads past the new end
//! (the inotify watch, which usually acts first, is not installed there).

use std::process::Command;

use pirq_db::{self as db, Header, PirDb};

const CHILD: &str = "PIRQ_SIGBUS_TEST_FILE";

#[test]
fn a_truncated_mapping_exits_with_one_line() {
    if let Ok(path) = std::env::var(CHILD) {
        fault_in_child(path.as_ref());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("served.pirdb");
    let header = Header {
        page_size: 4096,
        num_pages: 8,
        epoch: 0,
    };
    db::write(&path, &header, |p, page| page.fill(p as u8 + 1), |_| {}).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_truncated_mapping_exits_with_one_line",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    let expect = format!(
        "the database file {} was truncated or rewritten under the worker; exiting",
        path.display()
    );
    assert_eq!(stderr.matches(&expect).count(), 1, "{stderr}");
}

/// Maps the file, installs the guard, truncates the file and reads a page that is gone.
fn fault_in_child(path: &std::path::Path) -> ! {
    let served = PirDb::open(path).unwrap();
    pirq_worker::guard::exit_on_sigbus(path).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let page = served.page(7).unwrap();
    // SAFETY: reading a byte of a live mapping; the page behind it is gone, which faults.
    let byte = unsafe { std::ptr::read_volatile(page.as_ptr()) };
    panic!("read {byte} from a truncated page without a fault");
}
