//! `pirq-gateway`: parse the flags, then serve ([`pirq_gateway::serve`]) until Ctrl-C or
//! SIGTERM.

use clap::Parser;
use pirq_gateway::Config;

/// Errors end the process with one line (`error: <what>: <why>`), never a backtrace: operators
/// read these, and release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    let config = Config::parse();
    let threads = config.runtime_threads;
    pirq_party::main_on_threads(threads, || {
        pirq_gateway::serve(config, pirq_party::shutdown_signal())
    })
}
