//! Appends benchmark results to a markdown file under `docs/bench/` with everything needed to
//! reproduce them: date, machine, commit and the exact command.

use std::io::Write;
use std::path::Path;
use std::process::Command;

use anyhow::Context;

/// A markdown table built row by row; printed to the terminal and recorded as is.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn to_markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        let mut out = line(&self.header);
        out += &line(&vec!["---".to_string(); self.header.len()]);
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

/// Appends `title`, the provenance block and `body` to `file`.
///
/// The load average is read when the run started ([`load_average`]), so a reader can tell a
/// quiet machine from one shared with builds.
pub fn append(file: &Path, title: &str, body: &str, load_before: &str) -> anyhow::Result<()> {
    let command: Vec<String> = std::env::args().collect();
    let entry = format!(
        "\n## {title}\n\n- date: {}\n- machine: {}\n- load average before the run: {}\n- commit: {}\n- command: `{}`\n\n{body}",
        utc_date(),
        machine(),
        load_before,
        commit(),
        command.join(" "),
    );
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    f.write_all(entry.as_bytes())?;
    eprintln!("recorded in {}", file.display());
    Ok(())
}

/// `YYYY-MM-DD HH:MM UTC` from the system clock (civil-from-days, proleptic Gregorian).
fn utc_date() -> String {
    let secs = pirq_shared::clock::unix_ms() / 1000;
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` gives them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// CPU model and core count (and GPU when the caller adds it).
fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cpu}, {cores} cores")
}

/// Short commit hash, marked `-dirty` when tracked files differ from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        None => "unknown".into(),
    }
}
