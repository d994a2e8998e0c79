//! Every Redis command of a party is written in this crate: no server crate depends on the
//! `redis` crate or names one of its types (docs/architecture.md). The two test crates
//! (`testkit/`, `tests/`) read and damage Redis directly, as fault tests must.

use std::path::{Path, PathBuf};

/// Crates allowed to link a Redis client: this one and the test crates.
const ALLOWED: &[&str] = &["queue", "testkit", "tests"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// The workspace members (directories with a Cargo.toml) under the root.
fn members() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(workspace()).unwrap() {
        let dir = entry.unwrap().path();
        if dir.join("Cargo.toml").is_file() && dir.file_name().is_some_and(|n| n != "target") {
            out.push(dir);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Whether a line of code names the `redis` crate (`redis::…`, not `pirq_redis_args::…`).
fn names_the_redis_crate(code: &str) -> bool {
    code.match_indices("redis::").any(|(at, _)| {
        !code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn the_check_sees_paths_not_lookalikes() {
    assert!(names_the_redis_crate("use redis::aio::ConnectionManager;"));
    assert!(names_the_redis_crate("    let c = redis::cmd(\"PING\");"));
    assert!(!names_the_redis_crate("pub use redis_args::RedisArgs;"));
    assert!(!names_the_redis_crate("let url = \"redis://127.0.0.1\";"));
}

#[test]
fn no_other_crate_speaks_redis() {
    let members = members();
    assert!(members.len() > 5, "found the workspace: {members:?}");
    let mut offenders = Vec::new();
    for dir in &members {
        let name = dir.file_name().unwrap().to_str().unwrap();
        if ALLOWED.contains(&name) {
            continue;
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        for line in manifest.lines() {
            let key = line.split(['=', '.']).next().unwrap_or("").trim();
            if key == "redis" || key == "deadpool-redis" {
                offenders.push(format!("{name}/Cargo.toml: {line}"));
            }
        }
        let mut files = Vec::new();
        rust_files(dir, &mut files);
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                if names_the_redis_crate(code) {
                    offenders.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "Redis outside pirq-queue (add the command to pirq-queue instead):\n{}",
        offenders.join("\n")
    );
}
