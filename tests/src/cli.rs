//! The `pirq` tool as the e2e suites run it: a real process of the binary the harness built
//! ([`bin_dir`]), on the flags and environment the test gives it and none of the tool's settings
//! from the environment that runs the tests, without a backtrace on failure (the suites read its
//! error text).

use std::path::Path;
use std::process::{Command, Output};

use crate::bin_dir;

/// What one finished run of `pirq` printed.
#[derive(Debug)]
pub struct Ran {
    /// Raw standard output (`--out -` writes page bytes there).
    pub stdout: Vec<u8>,
    pub stderr: String,
}

impl Ran {
    /// Standard output as text.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// The environment variables the `pirq` tool reads in place of flags (cli/src: `env = …`).
const TOOL_SETTINGS: [&str; 7] = [
    "PIRQ_ADMIN_TOKEN",
    "PIRQ_CA_CERT",
    "PIRQ_PARTY_A",
    "PIRQ_PARTY_B",
    "PIRQ_PUBLISHER_KEY",
    "PIRQ_TOKEN_A",
    "PIRQ_TOKEN_B",
];

/// `pirq ARGS`, not yet started: for a run with more flags or environment than [`pirq`] gives.
pub fn pirq_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin_dir().join("pirq"));
    cmd.args(args).env("RUST_BACKTRACE", "0");
    for name in TOOL_SETTINGS {
        cmd.env_remove(name);
    }
    cmd
}

/// Runs `pirq ARGS` to completion.
pub fn pirq(args: &[&str]) -> Output {
    pirq_command(args).output().expect("running pirq")
}

/// A publisher key pair made by `pirq publisher keygen`: `DIR/NAME.key` (secret) and
/// `DIR/NAME.pub` (public), their paths in that order.
pub fn publisher_keygen(dir: &Path, name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let (secret, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    pirq_ok(&[
        "publisher",
        "keygen",
        "--secret",
        arg(&secret),
        "--public",
        arg(&public),
    ]);
    (secret, public)
}

/// Runs `pirq ARGS`, which must succeed.
pub fn pirq_ok(args: &[&str]) -> Ran {
    succeeded(args, pirq(args))
}

/// Runs `pirq ARGS`, which must fail.
pub fn pirq_fails(args: &[&str]) -> Ran {
    failed(args, pirq(args))
}

/// The output of a run of `pirq ARGS` that must have succeeded (else the test fails with its
/// standard error).
pub fn succeeded(args: &[&str], out: Output) -> Ran {
    let ran = ran(out.stdout, &out.stderr);
    assert!(
        out.status.success(),
        "pirq {args:?} failed:\n{}",
        ran.stderr
    );
    ran
}

/// The output of a run of `pirq ARGS` that must have failed.
pub fn failed(args: &[&str], out: Output) -> Ran {
    let ran = ran(out.stdout, &out.stderr);
    assert!(
        !out.status.success(),
        "pirq {args:?} succeeded:\n{}",
        ran.stderr
    );
    ran
}

fn ran(stdout: Vec<u8>, stderr: &[u8]) -> Ran {
    Ran {
        stdout,
        stderr: String::from_utf8_lossy(stderr).into_owned(),
    }
}

/// `path` as a command-line argument (the suites' temporary paths are UTF-8).
pub fn arg(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}
