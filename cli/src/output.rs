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

/// Progress of a long job: a bar on a terminal (standard error), nothing elsewhere; then one
/// summary line on standard error. A job without a known size shows nothing.
pub struct Progress {
    bar: Option<indicatif::ProgressBar>,
    enabled: bool,
}

impl Progress {
    /// Progress over `total` items named `unit` (`None`: no progress and no summary).
    pub fn new(total: Option<u64>, unit: &str) -> Progress {
        let bar = total
            .filter(|_| std::io::stderr().is_terminal())
            .map(|total| {
                let style = indicatif::ProgressStyle::with_template(&format!(
                    "{{bar:40}} {{human_pos}}/{{human_len}} {unit} {{per_sec}} eta {{eta}}"
                ))
                .expect("valid template");
                let bar = indicatif::ProgressBar::new(total).with_style(style);
                bar.set_draw_target(indicatif::ProgressDrawTarget::stderr_with_hz(4));
                bar
            });
        Progress {
            bar,
            enabled: total.is_some(),
        }
    }

    pub fn inc(&self, n: u64) {
        if let Some(bar) = &self.bar {
            bar.inc(n);
        }
    }

    /// Clears the bar and prints `summary` (when progress was wanted).
    pub fn finish(&self, summary: &str) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
        if self.enabled {
            eprintln!("{summary}");
        }
    }
}

/// `println!` for command output: a closed standard output returns an error from the enclosing
/// function (which must return `anyhow::Result`) instead of panicking.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::println(format!($($arg)*))?
    };
}
