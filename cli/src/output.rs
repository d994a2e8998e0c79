//! Output: machine-readable lines of `pirq query --json` and `pirq get --json` (one JSON object
//! a line, bytes as hex or base64), progress of long work, and a closed standard output.
//!
//! Progress is a bar on a terminal and nothing while the work runs elsewhere, so redirected
//! output never holds control characters; one summary line at the end says what was done
//! either way. A reader that closes standard output early (`pirq … | head`) ends the command
//! quietly with the status a shell gives a SIGPIPE death (141), never a panic.

use std::io::{IsTerminal, Write};

use base64::Engine as _;
use serde_json::{Map, Value};

/// How bytes are written into JSON (and how `pirq get` reads keys).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum BytesAs {
    /// Lowercase hex digits.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

impl BytesAs {
    pub fn encode(self, bytes: &[u8]) -> String {
        match self {
            BytesAs::Hex => hex::encode(bytes),
            BytesAs::Base64 => base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }
}

/// One output object, fields in the order they are added.
pub struct JsonLine(Map<String, Value>);

impl JsonLine {
    pub fn new() -> JsonLine {
        JsonLine(Map::new())
    }

    pub fn num(&mut self, name: &str, n: u64) -> &mut Self {
        self.0.insert(name.into(), n.into());
        self
    }

    pub fn bool(&mut self, name: &str, b: bool) -> &mut Self {
        self.0.insert(name.into(), b.into());
        self
    }

    /// Any JSON value.
    pub fn value(&mut self, name: &str, value: Value) -> &mut Self {
        self.0.insert(name.into(), value);
        self
    }

    pub fn bytes(&mut self, name: &str, bytes: &[u8], how: BytesAs) -> &mut Self {
        self.0.insert(name.into(), how.encode(bytes).into());
        self
    }

    /// The database digest the answers were computed from (64 hex digits).
    pub fn digest(&mut self, digest: Option<pirq_client::Digest>) -> &mut Self {
        let v = digest.map_or(Value::Null, |d| d.to_hex().into());
        self.0.insert("digest".into(), v);
        self
    }

    pub fn finish(&mut self) -> String {
        Value::Object(std::mem::take(&mut self.0)).to_string()
    }
}

/// Exit status after standard output was closed by its reader: 128 + SIGPIPE, as a shell
/// reports a process that SIGPIPE ended.
pub const BROKEN_PIPE_STATUS: i32 = 141;

/// Whether `e` (or a cause) is a write to a closed pipe.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes `text` to standard output (what `println!` does, but a closed pipe is an error to
/// return, not a panic).
pub fn print(text: impl AsRef<[u8]>) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_ref())?;
    out.flush()?;
    Ok(())
}

/// [`print()`] with a newline.
pub fn println(text: impl AsRef<str>) -> anyhow::Result<()> {
    print(format!("{}\n", text.as_ref()))
}

/// The unit of [`Progress::stage`] that counts bytes (shown as KiB/MiB, with a byte rate).
pub const BYTES: &str = "bytes";

/// Progress of a long job: a bar on a terminal (standard error) unless `--quiet` asked for none,
/// nothing elsewhere (so redirected output holds no control characters); then one summary line
/// on standard error either way. A job of several stages (read, compare, place) shows each
/// stage's own bar in turn, named.
pub struct Progress {
    /// The bar of the stage under way (none before the first, or when nothing is drawn).
    bar: std::sync::Mutex<Option<indicatif::ProgressBar>>,
    draw: bool,
    summary: bool,
}

impl Progress {
    /// Progress over `total` items named `unit` (`None`: no progress and no summary).
    pub fn new(total: Option<u64>, unit: &str, quiet: bool) -> Progress {
        match total {
            None => Progress {
                bar: Default::default(),
                draw: false,
                summary: false,
            },
            Some(total) => {
                let progress = Progress::stages(quiet);
                progress.stage("", Some(total), unit);
                progress
            }
        }
    }

    /// Progress of work in stages, each begun by [`Progress::stage`], and a summary at the end.
    pub fn stages(quiet: bool) -> Progress {
        Progress {
            bar: Default::default(),
            draw: !quiet && std::io::stderr().is_terminal(),
            summary: true,
        }
    }

    /// The bar of the stage under way.
    fn bar(&self) -> Option<indicatif::ProgressBar> {
        self.bar.lock().expect("not poisoned").clone()
    }

    /// Starts the stage `what` (shown before the bar; may be empty) over `total` items named
    /// `unit` ([`BYTES`] for bytes); `None`: a count without an end. The previous stage's bar
    /// goes.
    pub fn stage(&self, what: &str, total: Option<u64>, unit: &str) {
        if !self.draw {
            return;
        }
        let (done, rate) = match (unit, total) {
            (BYTES, Some(_)) => (
                "{bytes}/{total_bytes}".to_string(),
                "{binary_bytes_per_sec}",
            ),
            (BYTES, None) => ("{bytes}".to_string(), "{binary_bytes_per_sec}"),
            (_, Some(_)) => (format!("{{human_pos}}/{{human_len}} {unit}"), "{per_sec}"),
            (_, None) => (format!("{{human_pos}} {unit}"), "{per_sec}"),
        };
        let name = if what.is_empty() { "" } else { "{msg} " };
        let template = match total {
            Some(_) => format!("{name}{{bar:40}} {done} {rate} eta {{eta}}"),
            None => format!("{{spinner}} {name}{done} {rate}"),
        };
        // Made whole out of sight, so that its first drawing is already the stage's.
        let bar = indicatif::ProgressBar::with_draw_target(
            total,
            indicatif::ProgressDrawTarget::hidden(),
        )
        .with_style(indicatif::ProgressStyle::with_template(&template).expect("valid template"))
        .with_message(what.to_string());
        let mut current = self.bar.lock().expect("not poisoned");
        if let Some(previous) = current.take() {
            previous.finish_and_clear();
        }
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
        *current = Some(bar);
    }

    pub fn inc(&self, n: u64) {
        if let Some(bar) = self.bar() {
            bar.inc(n);
        }
    }

    /// How far the stage got, as a count from its start.
    pub fn set_position(&self, done: u64) {
        if let Some(bar) = self.bar() {
            bar.set_position(done);
        }
    }

    /// `read`, counting the bytes taken from it as the stage's progress.
    pub fn wrap_read(
        &self,
        read: Box<dyn std::io::BufRead + Send>,
    ) -> Box<dyn std::io::BufRead + Send> {
        match self.bar() {
            Some(bar) => Box::new(bar.wrap_read(read)),
            None => read,
        }
    }

    /// Takes the bar away (the work is done; lines printed next stand alone).
    pub fn clear(&self) {
        if let Some(bar) = self.bar.lock().expect("not poisoned").take() {
            bar.finish_and_clear();
        }
    }

    /// Clears the bar and prints `summary` (when progress was wanted).
    pub fn finish(&self, summary: &str) {
        self.clear();
        if self.summary {
            eprintln!("{summary}");
        }
    }
}

impl Drop for Progress {
    /// A job that ends early (an error) takes its bar away too, before the error is printed.
    fn drop(&mut self) {
        self.clear();
    }
}

/// The size of the file at `path` when it is a regular file (what a byte bar runs to); `None`
/// for standard input (`-`), a pipe or anything whose end is not known in advance.
pub fn file_len(path: &std::path::Path) -> Option<u64> {
    if path == std::path::Path::new("-") {
        return None;
    }
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len())
}

/// `println!` for command output: a closed standard output returns an error from the enclosing
/// function (which must return `anyhow::Result`) instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::println(format!($($arg)*))?
    };
}
