//! `pirq-gateway`: parse the flags, then serve ([`pirq_gateway::serve`]) until Ctrl-C or
//! SIGTERM.

use clap::Parser;
use pirq_gateway::Config;

/// jemalloc, not the system allocator: a gateway turns over a request body, a job, an event
/// frame and an answer per query on many threads, and glibc's malloc spent about a fifth of
/// the gateway's CPU under load (`_int_malloc`, `unlink_chunk`, `malloc_consolidate`; perf on
/// the 2-core VM, docs/bench/host-path.md). jemalloc took 88 to 69 µs of CPU a party query
/// there; mimalloc (tried before) saved less and kept 661 MB after the HTTP fuzz test, while
/// jemalloc hands freed memory back on its own (dirty pages decay in seconds).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Errors end the process with one line (`error: <what>: <why>`), never a backtrace: operators
/// read these, and release builds have no symbols to show anyway.
fn main() -> std::process::ExitCode {
    let config = Config::parse();
    let threads = config.threads().runtime;
    pirq_party::main_on_threads(threads, || {
        pirq_gateway::serve(config, pirq_party::shutdown_signal())
    })
}
