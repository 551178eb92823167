//! The bundle's collectors: each produces files ([`Item`]s) from one source — a command run with
//! its output bounded, a file read from the end that matters, ovs-vswitchd's control socket
//! ([`crate::ovs::vswitchd::Vswitchd`]), the agent API (the `get` client) — and never fails the
//! bundle: a missing tool, a dead daemon or a stopped agent becomes a failed entry with its
//! reason. The caller ([`super::collect`]) runs them concurrently, each under the collector
//! timeout, and scrubs what they return.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use clap::ValueEnum;
use tokio::io::{AsyncRead, AsyncReadExt};

use super::archive::{Item, Keep};
use crate::cli::client;
use crate::cli::{run_get, GetArgs, OutputFormat, Resource};
use crate::ovs::vswitchd::{control_socket, Vswitchd};

/// Where the tools live on the hosts this agent runs on, besides `PATH` (which may lack sbin).
const EXTRA_TOOL_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"];
/// What a failed command's standard error contributes to its error message.
const STDERR_KEPT: u64 = 4096;
/// Rotated copies of a log looked for after the file itself (`<log>.1` ... `<log>.N`).
const MAX_ROTATED: u32 = 10;
/// Journal lines read when no `--since` bounds them.
const JOURNAL_LINES: &str = "100000";
/// The agent's systemd unit.
pub const UNIT: &str = "antrea-vm-agent.service";

/// The executable `program` resolves to: a path as given, else the first match in `PATH`, then
/// in the usual sbin directories.
pub fn which(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(EXTRA_TOOL_DIRS.iter().map(PathBuf::from))
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Reads `r` to its end, keeping at most `max` bytes (its beginning or its end); returns them and
/// how many bytes there were.
async fn read_bounded<R: AsyncRead + Unpin>(mut r: R, max: u64, keep: Keep) -> (Vec<u8>, u64) {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut kept = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += n as u64;
        match keep {
            Keep::Head => {
                let room = max.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
            Keep::Tail => {
                kept.extend_from_slice(&buf[..n]);
                // Amortized: drop the front only once twice the bound is held.
                if kept.len() > max.saturating_mul(2).max(1 << 20) {
                    kept.drain(..kept.len() - max);
                }
            }
        }
    }
    if keep == Keep::Tail && kept.len() > max {
        kept.drain(..kept.len() - max);
    }
    (kept, total)
}

/// Runs `program args` (no shell, `LC_ALL=C`) and files its standard output at `path`. The child
/// is killed when the collector's timeout drops this future. A missing program or a failed run
/// (with its standard error) is a failed item.
pub async fn run_command(path: &str, program: &str, args: &[String], keep: Keep, max: u64) -> Item {
    let source = std::iter::once(program.to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    let Some(exe) = which(program) else {
        return Item::failed(
            path,
            source,
            format!("{program} not found (PATH, {})", EXTRA_TOOL_DIRS.join(", ")),
        );
    };
    let mut child = match tokio::process::Command::new(&exe)
        .args(args)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => return Item::failed(path, source, format!("cannot run {}: {e}", exe.display())),
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return Item::failed(path, source, "no pipes to the child");
    };
    let ((out, total), (err, _), status) = tokio::join!(
        read_bounded(stdout, max, keep),
        read_bounded(stderr, STDERR_KEPT, Keep::Tail),
        child.wait()
    );
    match status {
        Ok(s) if s.success() => {
            let mut item = Item::ok(path, source, out).keep(keep);
            if total > item.data.as_ref().map_or(0, |d| d.len() as u64) {
                item.original_bytes = Some(total);
            }
            item
        }
        Ok(s) => Item::failed(
            path,
            source,
            format!("{s}: {}", String::from_utf8_lossy(&err).trim()),
        ),
        Err(e) => Item::failed(path, source, format!("waiting for {program}: {e}")),
    }
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        _ => e.to_string(),
    }
}

/// The file at `src` filed at `path`, at most `max` bytes of it (read from the end for
/// [`Keep::Tail`]). Blocking: run it on the blocking pool.
pub fn file(path: &str, src: &Path, keep: Keep, max: u64) -> Item {
    use std::io::{Read, Seek, SeekFrom};
    let source = src.display().to_string();
    let read = || -> std::io::Result<(Vec<u8>, u64)> {
        let mut f = std::fs::File::open(src)?;
        let len = f.metadata()?.len();
        if keep == Keep::Tail && len > max {
            f.seek(SeekFrom::Start(len - max))?;
        }
        let mut data = Vec::new();
        f.take(max).read_to_end(&mut data)?;
        Ok((data, len))
    };
    match read() {
        Ok((data, len)) => {
            let mut item = Item::ok(path, source, data).keep(keep);
            if len > max {
                item.original_bytes = Some(len);
            }
            item
        }
        Err(e) => Item::failed(path, source, io_text(&e)),
    }
}

/// Whether the file at `p` was last written before `since` ago.
fn older_than(p: &Path, since: Option<Duration>) -> bool {
    let Some(since) = since else {
        return false;
    };
    let Ok(modified) = std::fs::metadata(p).and_then(|m| m.modified()) else {
        return false;
    };
    SystemTime::now()
        .duration_since(modified)
        .is_ok_and(|age| age > since)
}

/// A log file and its rotated copies (`.1` ... while they exist), under `dir` in the bundle, each
/// keeping its end. With `since`, the copies last written before it are skipped.
pub fn log_files(dir: &str, log: &Path, since: Option<Duration>, max: u64) -> Vec<Item> {
    let name = log
        .file_name()
        .map_or_else(|| "log".to_string(), |n| n.to_string_lossy().into_owned());
    let mut items = vec![file(&format!("{dir}/{name}"), log, Keep::Tail, max)];
    for n in 1..=MAX_ROTATED {
        let rotated = PathBuf::from(format!("{}.{n}", log.display()));
        if !rotated.is_file() {
            break;
        }
        let path = format!("{dir}/{name}.{n}");
        if older_than(&rotated, since) {
            items.push(Item::skipped(
                path,
                rotated.display().to_string(),
                "older than --since",
            ));
        } else {
            items.push(file(&path, &rotated, Keep::Tail, max));
        }
    }
    items
}

/// Every regular file under `src` (recursively, symlinks not followed), filed under `dir`;
/// `since` skips the files last written before it. An unreadable directory is one failed item.
pub fn tree(dir: &str, src: &Path, keep: Keep, since: Option<Duration>, max: u64) -> Vec<Item> {
    let mut items = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                let rel = d.strip_prefix(src).unwrap_or(&d).display().to_string();
                let path = if rel.is_empty() {
                    dir.to_string()
                } else {
                    format!("{dir}/{rel}")
                };
                items.push(Item::failed(path, d.display().to_string(), io_text(&e)));
                continue;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                let rel = p.strip_prefix(src).unwrap_or(&p).display().to_string();
                let path = format!("{dir}/{rel}");
                if older_than(&p, since) {
                    items.push(Item::skipped(path, p.display().to_string(), "older than --since"));
                } else {
                    items.push(file(&path, &p, keep, max));
                }
            }
        }
    }
    items
}

/// One ovs-vswitchd control-socket command filed at `path`.
pub async fn unixctl(vswitchd: Arc<Vswitchd>, path: &str, method: &str, args: &[String]) -> Item {
    let source = format!(
        "ovs-vswitchd control socket: {method}{}",
        args.iter().map(|a| format!(" {a}")).collect::<String>()
    );
    match vswitchd.call(method, args).await {
        Ok(text) => Item::ok(path, source, text.into_bytes()),
        Err(e) => Item::failed(path, source, e.to_string()),
    }
}

/// The command line of the process whose pid `pid_file` holds, split at its NULs.
fn cmdline_of(pid_file: &Path) -> Result<(u32, Vec<String>), String> {
    let text =
        std::fs::read_to_string(pid_file).map_err(|e| format!("{}: {}", pid_file.display(), io_text(&e)))?;
    let pid = text
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .ok_or_else(|| format!("{}: no pid in it", pid_file.display()))?;
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).map_err(|e| {
        format!(
            "pid {pid} (from {}) is not running: {}",
            pid_file.display(),
            io_text(&e)
        )
    })?;
    let args = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    Ok((pid, args))
}

/// The value of `--flag=V` or `--flag V` for any of `names` in `args`; `Some(None)` for the flag
/// alone.
fn flag_value(args: &[String], names: &[&str]) -> Option<Option<String>> {
    let mut found = None;
    let mut it = args.iter().peekable();
    while let Some(a) = it.next() {
        for name in names {
            if let Some(v) = a.strip_prefix(name) {
                if let Some(v) = v.strip_prefix('=') {
                    found = Some(Some(v.to_string()));
                } else if v.is_empty() {
                    let next = it.peek().filter(|n| !n.starts_with('-'));
                    found = Some(next.map(|n| n.to_string()));
                }
            }
        }
    }
    found
}

/// The log file of an OVS daemon (`ovs-vswitchd`, `ovsdb-server`), from the `--log-file` of its
/// running command line (pid file in `run_dir`); the flag alone means `$OVS_LOGDIR/<name>.log`
/// (by default /var/log/openvswitch).
pub fn ovs_daemon_log(run_dir: &Path, name: &str) -> Result<PathBuf, String> {
    let (pid, args) = cmdline_of(&run_dir.join(format!("{name}.pid")))?;
    match flag_value(&args, &["--log-file"]) {
        Some(Some(p)) => Ok(PathBuf::from(p)),
        Some(None) => {
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let dir = env
                .split(|b| *b == 0)
                .find_map(|kv| kv.strip_prefix(b"OVS_LOGDIR="))
                .map(|d| PathBuf::from(String::from_utf8_lossy(d).into_owned()))
                .unwrap_or_else(|| PathBuf::from("/var/log/openvswitch"));
            Ok(dir.join(format!("{name}.log")))
        }
        None => Err(format!("{name} (pid {pid}) runs without --log-file")),
    }
}

/// Where the running agent (the holder of `<stateDir>/agent.lock`) writes its log: `Ok(Some)`
/// for its `--log_file`, `Ok(None)` when it logs to standard error (the journal), `Err` when no
/// agent runs with this state dir.
pub fn running_agent_log(state_dir: &Path) -> Result<Option<PathBuf>, String> {
    let (pid, args) = cmdline_of(&state_dir.join(crate::uplink::lock::LOCK_FILE))?;
    // A stale lock file's pid may have been reused by another program.
    let program = args.first().map(|a| a.rsplit('/').next().unwrap_or(a));
    if program != Some("antrea-vm-agent") {
        return Err(format!("pid {pid} of the agent lock is not an antrea-vm-agent"));
    }
    let file = flag_value(&args, &["--log_file", "--log-file"]).flatten();
    let to_stderr = flag_value(&args, &["--logtostderr"])
        .map(|v| v.as_deref() != Some("false"))
        .unwrap_or(file.is_none());
    Ok(file.filter(|_| !to_stderr).map(PathBuf::from))
}

/// The agent's journal (`journalctl -u antrea-vm-agent.service`), the last lines or those since
/// `since`.
pub async fn journal(path: &str, since: Option<Duration>, max: u64) -> Item {
    let mut args = vec![
        "-u".to_string(),
        UNIT.to_string(),
        "--no-pager".to_string(),
        "-o".to_string(),
        "short-iso-precise".to_string(),
    ];
    match since {
        Some(s) => args.push(format!("--since=-{}s", s.as_secs().max(1))),
        None => args.extend(["-n".to_string(), JOURNAL_LINES.to_string()]),
    }
    run_command(path, "journalctl", &args, Keep::Tail, max).await
}

/// Every `get` resource, as a table and as JSON, through the agent API at `socket`; when the agent
/// does not answer, each is a failed item saying so (`unavailable`).
pub async fn agent_api(socket: PathBuf, unavailable: Option<String>) -> Vec<Item> {
    let mut jobs = Vec::new();
    for resource in Resource::value_variants() {
        let name = resource
            .to_possible_value()
            .map_or_else(|| format!("{resource:?}"), |v| v.get_name().to_string());
        for (output, ext) in [(OutputFormat::Table, "txt"), (OutputFormat::Json, "json")] {
            let path = format!("agent/get/{name}.{ext}");
            let source = format!(
                "antrea-vm-agent get {name} -o {} --socket {}",
                if ext == "txt" { "table" } else { "json" },
                socket.display()
            );
            if let Some(why) = &unavailable {
                jobs.push(tokio::task::spawn(std::future::ready(Item::failed(
                    path,
                    source,
                    why.clone(),
                ))));
                continue;
            }
            let args = GetArgs {
                resource: *resource,
                name: None,
                output,
                policy: None,
                socket: socket.clone(),
            };
            jobs.push(tokio::task::spawn_blocking(move || match run_get(&args) {
                Ok(text) => Item::ok(path, source, text.into_bytes()),
                Err(e) => Item::failed(path, source, e.to_string()),
            }));
        }
    }
    let mut items = Vec::new();
    for job in jobs {
        match job.await {
            Ok(item) => items.push(item),
            Err(e) => items.push(Item::failed("agent/get", "agent API", e.to_string())),
        }
    }
    items
}

/// Whether the agent API answers at `socket`; the reason it does not otherwise.
pub fn probe_agent_api(socket: &Path) -> Result<(), String> {
    match client::get(socket, "/agentinfo", Duration::from_secs(3)) {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("agent API unavailable (is the agent running?): {e}")),
    }
}

/// `versions.txt`: the agent's, ovs-vswitchd's (control socket), the kernel's and the OS's. A
/// part that cannot be read says why on its line.
pub async fn versions(vswitchd: Arc<Vswitchd>, run_dir: PathBuf) -> Item {
    let mut text = format!(
        "antrea-vm-agent: {}\n",
        crate::version::LONG_VERSION.replace('\n', "\n  ")
    );
    let ovs = if control_socket(&run_dir).is_some() {
        vswitchd
            .call("version", &[])
            .await
            .map(|v| v.trim().replace('\n', "\n  "))
            .unwrap_or_else(|e| format!("unavailable: {e}"))
    } else {
        format!(
            "unavailable: no ovs-vswitchd control socket in {}",
            run_dir.display()
        )
    };
    text.push_str(&format!("ovs-vswitchd: {ovs}\n"));
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|e| format!("unavailable: {p}: {}", io_text(&e)))
    };
    text.push_str(&format!("kernel: {}\n", read("/proc/version")));
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                .map(|v| v.trim_matches('"').to_string())
        })
        .unwrap_or_else(|| "unavailable: /etc/os-release has no PRETTY_NAME".to_string());
    text.push_str(&format!("os: {os}\n"));
    Item::ok(
        "versions.txt",
        "antrea-vm-agent --version, ovs-vswitchd version, /proc/version, /etc/os-release",
        text.into_bytes(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn flags_are_read_in_both_spellings() {
        let args = strings(&["agent", "run", "--log_file=/a.log", "--logtostderr=false"]);
        assert_eq!(flag_value(&args, &["--log_file"]), Some(Some("/a.log".into())));
        assert_eq!(flag_value(&args, &["--logtostderr"]), Some(Some("false".into())));
        let args = strings(&["ovs-vswitchd", "--log-file", "--pidfile"]);
        assert_eq!(flag_value(&args, &["--log-file"]), Some(None));
        let args = strings(&["x", "--log-file", "/b.log"]);
        assert_eq!(flag_value(&args, &["--log-file"]), Some(Some("/b.log".into())));
        assert_eq!(flag_value(&args, &["--other"]), None);
    }

    #[tokio::test]
    async fn a_command_is_bounded_and_a_missing_one_is_a_failure() {
        let args = strings(&["-c", "printf 0123456789"]);
        let head = run_command("x", "sh", &args, Keep::Head, 4).await;
        assert_eq!(head.data.as_deref().ok(), Some(&b"0123"[..]));
        assert_eq!(head.original_bytes, Some(10));
        let tail = run_command("x", "sh", &args, Keep::Tail, 4).await;
        assert_eq!(tail.data.as_deref().ok(), Some(&b"6789"[..]));
        let failed = run_command(
            "x",
            "sh",
            &strings(&["-c", "echo nope >&2; exit 3"]),
            Keep::Head,
            4,
        )
        .await;
        let why = failed.data.expect_err("failed");
        assert!(why.contains("nope") && why.contains('3'), "{why}");
        let missing = run_command("x", "no-such-tool-here", &[], Keep::Head, 4).await;
        assert!(missing
            .data
            .expect_err("missing")
            .contains("no-such-tool-here not found"),);
    }

    #[test]
    fn logs_keep_their_end_and_rotated_copies_follow() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("agent.log");
        std::fs::write(&log, "old\nnew\n").expect("write");
        std::fs::write(dir.path().join("agent.log.1"), "older\n").expect("write");
        let items = log_files("agent/logs", &log, None, 4);
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].path, "agent/logs/agent.log");
        assert_eq!(items[0].data.as_deref().ok(), Some(&b"new\n"[..]));
        assert_eq!(items[0].original_bytes, Some(8));
        assert_eq!(items[1].path, "agent/logs/agent.log.1");
        let missing = log_files("agent/logs", &dir.path().join("none.log"), None, 4);
        assert_eq!(missing[0].data.as_ref().expect_err("missing"), "no such file");
    }

    #[test]
    fn a_tree_is_walked_with_relative_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("a.json"), "{}").expect("write");
        std::fs::write(dir.path().join("sub/b"), "b").expect("write");
        let mut paths: Vec<String> = tree("agent/state", dir.path(), Keep::Head, None, 100)
            .into_iter()
            .map(|i| i.path)
            .collect();
        paths.sort();
        assert_eq!(paths, ["agent/state/a.json", "agent/state/sub/b"]);
        let gone = tree("agent/state", &dir.path().join("nope"), Keep::Head, None, 100);
        assert_eq!(gone.len(), 1);
        assert!(gone[0].data.is_err());
    }
}
