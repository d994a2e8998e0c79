//! Child processes of a test: started with their output in a log file, killed on drop.

use std::fs::File;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A free TCP port on 127.0.0.1 (free when asked; the caller binds it right away).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding port 0")
}

/// A child process killed on drop, with its log file.
pub struct Proc {
    child: Option<Child>,
    pub log: PathBuf,
    pub name: String,
}

impl Proc {
    /// Starts `cmd` with stdin closed and stdout and stderr both written to `log`.
    pub fn spawn(name: &str, mut cmd: Command, log: PathBuf) -> anyhow::Result<Proc> {
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(out))
            .stderr(Stdio::from(err));
        let child = cmd.spawn().with_context(|| format!("starting {name}"))?;
        Ok(Proc {
            child: Some(child),
            log,
            name: name.to_string(),
        })
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// SIGTERM, then wait up to `grace` for a clean exit (SIGKILL after).
    pub fn terminate(&mut self, grace: Duration) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = Instant::now() + grace;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends SIGTERM and returns at once (the process keeps its handle).
    pub fn signal_term(&self) {
        self.signal("-TERM");
    }

    /// Freezes the process (SIGSTOP): what it holds in Redis stays as it is, so a test can
    /// look at that and then kill it holding exactly that, whatever the speed of its work. Give
    /// it a few milliseconds to take effect (a thread in a system call finishes that first).
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Asks the process to re-read its files (SIGHUP).
    pub fn hangup(&self) {
        self.signal("-HUP");
    }

    /// Lets a paused process go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = self.child.as_ref() {
            let _ = Command::new("kill")
                .arg(signal)
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Waits up to `within` for the process to exit; its exit status, `None` if still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Resident memory of the process in KiB (Linux `/proc`), `None` when gone.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILL now.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}
