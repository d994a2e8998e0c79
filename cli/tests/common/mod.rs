//! What the suites that run the `pirq` tool share: running the binary cargo built for them and
//! reading what it said. Each suite uses part of it.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// Runs `pirq ARGS` to completion.
pub fn pirq(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pirq"))
        .args(args)
        .output()
        .expect("running pirq")
}

/// Runs `pirq ARGS`, which must succeed; its standard output.
pub fn ok(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(out.status.success(), "pirq {args:?}: {}", stderr(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs `pirq ARGS`, which must succeed; all it said: standard output, then standard error.
pub fn said(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(out.status.success(), "pirq {args:?}: {}", stderr(&out));
    format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out))
}

/// Runs `pirq ARGS`, which must fail; its standard error.
pub fn fails(args: &[&str]) -> String {
    let out = pirq(args);
    assert!(!out.status.success(), "pirq {args:?} succeeded");
    stderr(&out)
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A path as the `&str` argument it is given as (the tests' paths are UTF-8).
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `pirq db gen` of `pages` synthetic pages of 256 bytes into `out`: the page database many
/// cases start from.
pub fn db_gen_args<'a>(pages: &'a str, out: &'a str) -> Vec<&'a str> {
    vec![
        "db",
        "gen",
        "--pages",
        pages,
        "--page-size",
        "256",
        "--out",
        out,
    ]
}

/// `pirq kv build` of hex keys and hex values of `value_size` bytes from `records` into `out`,
/// `more` flags after them: the fixed-size table many cases start from.
pub fn hex_kv_build<'a>(
    records: &'a str,
    value_size: &'a str,
    out: &'a str,
    more: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "kv",
        "build",
        "--key-encoding",
        "hex",
        "--value-encoding",
        "hex",
        "--records",
        records,
        "--value-size",
        value_size,
        "--out",
        out,
    ];
    args.extend_from_slice(more);
    args
}

/// Runs `pirq ARGS` with standard error on a pseudo-terminal, as someone at a terminal runs it:
/// its exit status and everything it wrote there (the terminal turns "\n" into "\r\n").
pub fn pirq_on_a_terminal(args: &[&str]) -> (std::process::ExitStatus, String) {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    // SAFETY: plain libc calls on a descriptor this function opened and then hands to a File.
    let (mut terminal, path) = unsafe {
        let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        assert_eq!(libc::grantpt(fd), 0);
        assert_eq!(libc::unlockpt(fd), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(fd, name.as_mut_ptr(), name.len()), 0);
        let path = std::ffi::CStr::from_ptr(name.as_ptr())
            .to_str()
            .unwrap()
            .to_owned();
        (std::fs::File::from_raw_fd(fd), path)
    };
    let stderr = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY)
        .open(path)
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pirq"))
        .args(args)
        .env("TERM", "xterm")
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    // The terminal is read until its last writer (the child) is gone: then a read fails (EIO).
    let reader = std::thread::spawn(move || {
        let (mut said, mut buf) = (Vec::new(), [0u8; 4096]);
        while let Ok(n @ 1..) = terminal.read(&mut buf) {
            said.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&said).into_owned()
    });
    let status = child.wait().unwrap();
    (status, reader.join().unwrap())
}
