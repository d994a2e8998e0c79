//! `pirq-worker`: parse the flags, then serve ([`pirq_worker::run`]) until Ctrl-C or SIGTERM.

use clap::Parser;
use pirq_worker::config::Config;

/// Errors end the process with one line (`error: <what>: <why>`), never a backtrace: operators
/// read these, and release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    let config = Config::parse();
    pirq_party::main(|| pirq_worker::run(config, pirq_party::shutdown_signal()))
}
