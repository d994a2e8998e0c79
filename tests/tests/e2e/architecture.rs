//! docs/architecture.md held to the tree: every module its crate table names (a lowercase name
//! in backquotes, `routes/` for a folder) is a file or folder of that crate's sources or test
//! binaries, and every `module::item` it names is defined in that module (`pirq_x::item`: at
//! that crate's root). A module renamed, split or removed fails here until the map says so. And
//! no production function of the workspace is over 120 lines (issue 39), but those listed with why.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The repository root (this crate is `tests/`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository root")
        .to_path_buf()
}

/// One row of the crate table.
#[derive(Debug)]
struct Row {
    /// `shared`, `tests`, `clients/ts`.
    folder: String,
    /// `pirq_shared`: the name code uses (none for the TypeScript client).
    krate: Option<String>,
    /// The text of what it owns.
    owns: String,
}

/// The crate table's rows (`| `folder/` (`pirq-x`) | owns |`).
fn rows(doc: &str) -> Vec<Row> {
    doc.lines()
        .filter_map(|line| {
            let mut cells = line.strip_prefix("| `")?.splitn(2, '|');
            let first = cells.next()?;
            let folder = first.split('`').next()?.strip_suffix('/')?;
            Some(Row {
                folder: folder.to_string(),
                krate: first.split('`').nth(2).map(|k| k.replace('-', "_")),
                owns: cells.next()?.to_string(),
            })
        })
        .collect()
}

/// The names in backquotes in `text`.
fn quoted(text: &str) -> impl Iterator<Item = &str> {
    text.split('`').skip(1).step_by(2)
}

/// Every `.rs` file and folder under `dir`, by path.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            found.extend(sources(&path));
            found.push(path);
        } else if path.extension().is_some_and(|x| x == "rs") {
            found.push(path);
        }
    }
    found
}

/// The module of that name among `files`: `name.rs`, or a folder `name/` (its `mod.rs`).
fn module(files: &[PathBuf], name: &str) -> Option<PathBuf> {
    files.iter().find_map(|p| {
        if p.is_dir() && p.file_name()? == name {
            Some(p.join("mod.rs"))
        } else if p.file_stem()? == name && p.extension()? == "rs" {
            Some(p.clone())
        } else {
            None
        }
    })
}

fn is_module_name(s: &str) -> bool {
    let s = s.strip_suffix('/').unwrap_or(s);
    !s.is_empty()
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Whether `source` defines `item` (a function, type, constant or module of that name) or
/// re-exports it (`pub use …item…`, over as many lines as rustfmt breaks it into).
fn defines(source: &str, item: &str) -> bool {
    let word = |text: &str| {
        text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w == item)
    };
    let mut lines = source.lines();
    while let Some(line) = lines.next() {
        let line = line.trim_start();
        let line = line.strip_prefix("pub(crate) ").unwrap_or(line);
        let line = line.strip_prefix("pub ").unwrap_or(line);
        if line.starts_with("use ") {
            let mut statement = line.to_string();
            while !statement.contains(';') {
                match lines.next() {
                    Some(more) => statement.push_str(more),
                    None => break,
                }
            }
            if word(&statement) {
                return true;
            }
            continue;
        }
        let defined = [
            "fn", "struct", "enum", "trait", "type", "const", "static", "mod",
        ]
        .iter()
        .any(|kind| {
            line.strip_prefix(kind)
                .and_then(|rest| rest.strip_prefix(' '))
                .is_some_and(|rest| {
                    rest.starts_with(item)
                        && !rest[item.len()..]
                            .starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
                })
        });
        if defined {
            return true;
        }
    }
    false
}

#[test]
fn every_module_the_crate_table_names_exists() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
    let rows = rows(&doc);
    assert!(rows.len() >= 12, "the crate table: {rows:?}");
    let lib_of = |krate: &str| {
        rows.iter()
            .find(|r| r.krate.as_deref() == Some(krate))
            .map(|r| root.join(&r.folder).join("src/lib.rs"))
    };
    let mut missing = BTreeSet::new();
    for row in &rows {
        let src = root.join(&row.folder).join("src");
        if !src.is_dir() {
            continue; // clients/ts: not a Rust crate
        }
        // The crate's modules, and its test binaries' (the e2e suite's modules).
        let mut files = sources(&src);
        let tests = root.join(&row.folder).join("tests");
        if tests.is_dir() {
            files.extend(sources(&tests));
        }
        for name in quoted(&row.owns) {
            if is_module_name(name) {
                let name = name.trim_end_matches('/');
                if module(&files, name).is_none() {
                    missing.insert(format!("{}: module {name}", row.folder));
                }
                continue;
            }
            let Some((path, item)) = name.rsplit_once("::") else {
                continue;
            };
            if !is_module_name(item) && !item.starts_with(|c: char| c.is_ascii_uppercase()) {
                continue; // `entry::*`
            }
            let file = if path.starts_with("pirq_") {
                lib_of(path)
            } else if is_module_name(path) {
                module(&files, path)
            } else {
                continue; // a type's method: `Producer::submit`
            };
            let found = file
                .and_then(|f| std::fs::read_to_string(f).ok())
                .is_some_and(|text| defines(&text, item));
            if !found {
                missing.insert(format!("{}: {name}", row.folder));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/architecture.md names what the tree does not have: {missing:?}"
    );
}

/// Every member of the workspace has its row in the crate table (a new crate joins the map).
#[test]
fn every_workspace_crate_has_a_row() {
    let root = root();
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).expect("the map");
    let folders: BTreeSet<String> = rows(&doc).into_iter().map(|r| r.folder).collect();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace");
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace's members");
    let missing: Vec<&str> = members
        .split(',')
        .map(|m| m.trim().trim_end_matches(']').trim_matches('"'))
        .filter(|m| !m.is_empty() && !folders.contains(*m))
        .collect();
    assert!(missing.is_empty(), "crates without a row: {missing:?}");
    assert!(folders.contains("db"), "{folders:?}");
}

#[test]
fn the_check_catches_a_module_that_is_not_there() {
    let root = root();
    let files = sources(&root.join("gateway/src"));
    assert!(module(&files, "routes").is_some());
    assert!(module(&files, "queries").is_some());
    assert!(module(&files, "store").is_none());
    let rows = rows("| `gateway/` (`pirq-gateway`) | `store` (gone), `Routes` |\n");
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].krate.as_deref(), Some("pirq_gateway"));
    let names: Vec<&str> = quoted(&rows[0].owns)
        .filter(|n| is_module_name(n))
        .collect();
    assert_eq!(names, ["store"]);
    assert!(defines(
        "pub(crate) fn connection_settings(",
        "connection_settings"
    ));
    assert!(!defines(
        "pub(crate) fn connection_settings(",
        "connection_config"
    ));
    assert!(!defines("pub fn connection(", "conn"));
    assert!(defines(
        "pub use connect::{Connection, RedisTarget};",
        "RedisTarget"
    ));
    let broken = "pub use write::{\n    ensure_not_an_input, write_atomically,\n};\nfn other() {}";
    assert!(defines(broken, "write_atomically"));
    assert!(!defines(broken, "write_shard"));
}

/// The longest a production function may be (issue 39): a function longer than a screenful or
/// two does more than one thing, and its parts want names.
const MAX_FUNCTION_LINES: usize = 120;

/// Functions over [`MAX_FUNCTION_LINES`] waiting for their split, by `path:name`, each with
/// why it may wait. An entry that is no longer over the limit fails the test too, so the list
/// only shrinks.
const LONG_FUNCTIONS_ALLOWED: &[(&str, &str)] = &[];

/// The production functions of one source file longer than `limit` lines, as `(name, lines)`:
/// from the `fn` line to the closing brace at its indentation, `#[cfg(test)]` modules left out.
fn long_functions(source: &str, limit: usize) -> Vec<(String, usize)> {
    let lines: Vec<&str> = source.lines().collect();
    let indent = |l: &str| l.len() - l.trim_start().len();
    let closes = |l: &str, at: usize| indent(l) == at && l.trim_start().starts_with('}');
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if line.trim() == "#[cfg(test)]" {
            if let Some(next) = lines.get(i + 1) {
                let item = next.trim_start();
                if item.starts_with("mod ") || item.starts_with("pub mod ") {
                    let at = indent(next);
                    i += 2;
                    while i < lines.len() && !closes(lines[i], at) {
                        i += 1;
                    }
                    i += 1;
                    continue;
                }
            }
        }
        let item = line.trim_start();
        let item = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub(super) "))
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item);
        let item = item.strip_prefix("const ").unwrap_or(item);
        let item = item.strip_prefix("async ").unwrap_or(item);
        let item = item.strip_prefix("unsafe ").unwrap_or(item);
        if let Some(rest) = item.strip_prefix("fn ") {
            let one_line = line.trim_end().ends_with('}') || line.trim_end().ends_with(';');
            if !one_line {
                let at = indent(line);
                let mut end = i + 1;
                while end < lines.len() && !closes(lines[end], at) {
                    end += 1;
                }
                let length = end - i + 1;
                if length > limit {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    found.push((name, length));
                }
            }
        }
        i += 1;
    }
    found
}

/// Every `.rs` file of production code under `dir`: test and bench folders left out.
fn production_sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if !matches!(name, "tests" | "benches" | "bench" | "examples" | "target")
                && !name.starts_with('.')
            {
                found.extend(production_sources(&path));
            }
        } else if name.ends_with(".rs") {
            found.push(path);
        }
    }
    found
}

#[test]
fn no_production_function_is_over_120_lines() {
    let root = root();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace");
    let members = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("the workspace's members");
    let mut over = BTreeSet::new();
    for member in members.split(',') {
        let member = member.trim().trim_end_matches(']').trim_matches('"');
        // The test crate is test code, whatever its folders are called.
        if member.is_empty() || member == "tests" || member == "testkit" {
            continue;
        }
        for file in production_sources(&root.join(member).join("src")) {
            let text = std::fs::read_to_string(&file).expect("a source file");
            let path = file.strip_prefix(&root).expect("under the root").display();
            for (name, lines) in long_functions(&text, MAX_FUNCTION_LINES) {
                over.insert((format!("{path}:{name}"), lines));
            }
        }
    }
    let allowed: BTreeSet<&str> = LONG_FUNCTIONS_ALLOWED.iter().map(|(f, _)| *f).collect();
    let new: Vec<_> = over
        .iter()
        .filter(|(f, _)| !allowed.contains(f.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (split them): {new:?}"
    );
    let stale: Vec<&&str> = allowed
        .iter()
        .filter(|f| !over.iter().any(|(o, _)| o == **f))
        .collect();
    assert!(
        stale.is_empty(),
        "no longer over {MAX_FUNCTION_LINES} lines, drop them from LONG_FUNCTIONS_ALLOWED: {stale:?}"
    );
}

#[test]
fn the_length_check_measures_functions_and_skips_tests() {
    let body = |n: usize| "    x();\n".repeat(n);
    let source = format!(
        "pub async fn long() {{\n{}}}\n\nfn short() {{\n{}}}\n\nfn one() {{}}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn in_a_test() {{\n{}    }}\n}}\n\n\
         impl X {{\n    pub(crate) fn method(&self) {{\n{}    }}\n}}\n",
        body(5),
        body(2),
        body(9),
        body(6)
    );
    assert_eq!(
        long_functions(&source, 4),
        [("long".to_string(), 7), ("method".to_string(), 8)]
    );
    assert!(long_functions(&source, 8).is_empty());
}
