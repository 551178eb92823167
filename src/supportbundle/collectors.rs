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

use super::archive::{Budget, Item, Keep};
use crate::cli::client;
use crate::cli::{run_get, GetArgs, OutputFormat, Resource};
use crate::ovs::vswitchd::{control_socket, Vswitchd};

/// Where the tools live on the hosts this agent runs on, besides `PATH` (which may lack sbin).
const EXTRA_TOOL_DIRS: &[&str] = &["/usr/local/sbin", "/usr/sbin", "/sbin", "/usr/bin", "/bin"];
/// What a failed command's standard error contributes to its error message.
const STDERR_KEPT: u64 = 4096;
/// Rotated copies of a log looked for after the file itself (`<log>.1` ... `<log>.N`).
const MAX_ROTATED: u32 = 10;
/// Directory levels [`tree`] descends below the directory it is given.
pub const MAX_TREE_DEPTH: usize = 8;
/// Files [`tree`] collects from one directory tree; the rest is one skipped entry.
pub const MAX_TREE_FILES: usize = 5_000;
/// Directories [`tree`] refuses to copy as a whole: a `stateDir: /` or an audit `logDir: /etc`
/// by mistake must not put `/etc/shadow` or a home directory in a bundle.
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/lib", "/var/log", "/var/run",
];
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

/// Drops the partial line a cut leaves at its edge (the first line of a kept end, the last line
/// of a kept beginning): half a token or half a key line is no longer what the scrub knows.
pub fn drop_partial_line(data: &mut Vec<u8>, keep: Keep) {
    match keep {
        Keep::Tail => match data.iter().position(|&b| b == b'\n') {
            Some(p) => {
                data.drain(..=p);
            }
            None => data.clear(),
        },
        Keep::Head => match data.iter().rposition(|&b| b == b'\n') {
            Some(p) => data.truncate(p + 1),
            None => data.clear(),
        },
    }
}

/// Keeps the last `n` bytes of `data`, which may hold one byte more before them: when that
/// byte is a line end, the first line kept is whole; otherwise it is dropped.
fn keep_tail_lines(data: &mut Vec<u8>, n: usize) {
    if data.len() <= n {
        return;
    }
    let whole = data[data.len() - n - 1] == b'\n';
    data.drain(..data.len() - n);
    if !whole {
        drop_partial_line(data, Keep::Tail);
    }
}

/// What a read bounded by the per-file cap and the shared budget kept.
struct Bounded {
    data: Vec<u8>,
    /// Bytes the source had.
    total: u64,
    /// The budget gave less than the per-file cap asked for.
    budget_short: bool,
}

/// Reads `r` to its end, keeping at most `max` bytes (its beginning or its end) and no more than
/// `budget` grants; a cut drops the partial line at its edge.
async fn read_bounded<R: AsyncRead + Unpin>(
    mut r: R,
    max: u64,
    keep: Keep,
    budget: Option<&Budget>,
) -> Bounded {
    // The end is only known at the end: reserve the cap, give back what is not kept.
    let reserved = match (keep, budget) {
        (Keep::Tail, Some(b)) => b.take(max),
        _ => max,
    };
    let mut head = Vec::new();
    let mut tail: std::collections::VecDeque<Vec<u8>> = std::collections::VecDeque::new();
    let mut tail_len = 0usize;
    let mut total = 0u64;
    let mut budget_short = keep == Keep::Tail && reserved < max;
    let mut buf = vec![0u8; 64 * 1024];
    let room_max = usize::try_from(reserved).unwrap_or(usize::MAX);
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        total += n as u64;
        match keep {
            Keep::Head => {
                let want = n.min(room_max.saturating_sub(head.len()));
                let granted = match budget {
                    Some(b) => usize::try_from(b.take(want as u64)).unwrap_or(0),
                    None => want,
                };
                budget_short |= granted < want;
                head.extend_from_slice(&buf[..granted]);
            }
            Keep::Tail => {
                // Chunks, the oldest dropped once the rest covers the bound: about `max` held.
                tail.push_back(buf[..n].to_vec());
                tail_len += n;
                // One byte more than kept: it says whether the first line kept is whole.
                while tail.front().is_some_and(|f| tail_len - f.len() > room_max) {
                    if let Some(f) = tail.pop_front() {
                        tail_len -= f.len();
                    }
                }
            }
        }
    }
    let mut data = match keep {
        Keep::Head => head,
        Keep::Tail => {
            let mut d: Vec<u8> = tail.into_iter().flatten().collect();
            keep_tail_lines(&mut d, room_max);
            d
        }
    };
    let taken = match keep {
        Keep::Head => data.len() as u64,
        Keep::Tail => reserved,
    };
    if keep == Keep::Head && total > data.len() as u64 {
        drop_partial_line(&mut data, keep);
    }
    if let Some(b) = budget {
        b.give_back(taken.saturating_sub(data.len() as u64));
    }
    Bounded {
        data,
        total,
        budget_short,
    }
}

/// Runs `program args` (no shell, `LC_ALL=C`) and files its standard output at `path`. The child
/// is killed when the collector's timeout drops this future. A missing program or a failed run
/// (with its standard error) is a failed item.
pub async fn run_command(
    path: &str,
    program: &str,
    args: &[String],
    keep: Keep,
    max: u64,
    budget: &Budget,
) -> Item {
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
    let (out, err, status) = tokio::join!(
        read_bounded(stdout, max, keep, Some(budget)),
        read_bounded(stderr, STDERR_KEPT, Keep::Tail, None),
        child.wait()
    );
    let err = err.data;
    if !matches!(&status, Ok(s) if s.success()) {
        budget.give_back(out.data.len() as u64);
    }
    match status {
        Ok(s) if s.success() => {
            let kept = out.data.len() as u64;
            let mut item = Item::ok(path, source, out.data).keep(keep);
            if out.total > kept {
                item.original_bytes = Some(out.total);
                if out.budget_short {
                    item.note = Some(BUDGET_CUT.to_string());
                }
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

/// The note of a file cut (or left out) because the bundle's total bound was reached.
const BUDGET_CUT: &str =
    "cut: the bundle reached its total bound while this was read (kept whole lines only)";

/// Bounds content a collector already holds (a control-socket answer, a `get` output) by `max`
/// and by what `budget` grants, cutting at a line; notes why.
pub fn charge(mut item: Item, max: u64, budget: &Budget) -> Item {
    let Ok(data) = &mut item.data else {
        return item;
    };
    let len = data.len() as u64;
    let granted = budget.take(len.min(max));
    if granted < len {
        let keep = item.keep;
        let granted_len = usize::try_from(granted).unwrap_or(0);
        match keep {
            Keep::Head => {
                data.truncate(granted_len);
                drop_partial_line(data, keep);
            }
            Keep::Tail => keep_tail_lines(data, granted_len),
        }
        budget.give_back(granted - data.len() as u64);
        item.original_bytes = Some(len);
        if granted < len.min(max) {
            item.note = Some(BUDGET_CUT.to_string());
        }
    }
    item
}

fn io_text(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".to_string(),
        _ => e.to_string(),
    }
}

/// The regular file at `src` filed at `path`, at most `max` bytes of it and no more than
/// `budget` grants (read from the end for [`Keep::Tail`]), cut at a line. Opened without
/// blocking (a FIFO or a device is refused, not read). Blocking: run it on the blocking pool.
pub fn file(path: &str, src: &Path, keep: Keep, max: u64, budget: &Budget) -> Item {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::OpenOptionsExt;
    let source = src.display().to_string();
    // `None`: not a regular file.
    let read = || -> std::io::Result<Option<Bounded>> {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(src)?;
        let meta = f.metadata()?;
        if !meta.is_file() {
            return Ok(None);
        }
        let len = meta.len();
        let want = len.min(max);
        let granted = budget.take(want);
        // A tail read starts one byte early: that byte says whether the first line is whole.
        let extra = u64::from(keep == Keep::Tail && len > granted && granted > 0);
        if keep == Keep::Tail && len > granted {
            f.seek(SeekFrom::Start(len - granted - extra))?;
        }
        let mut data = Vec::new();
        let read = f.take(granted + extra).read_to_end(&mut data);
        if let Err(e) = read {
            budget.give_back(granted);
            return Err(e);
        }
        match keep {
            Keep::Tail if extra == 1 => {
                keep_tail_lines(&mut data, usize::try_from(granted).unwrap_or(usize::MAX));
            }
            Keep::Tail => {}
            Keep::Head if len > data.len() as u64 => drop_partial_line(&mut data, keep),
            Keep::Head => {}
        }
        budget.give_back(granted.saturating_sub(data.len() as u64));
        Ok(Some(Bounded {
            data,
            total: len,
            budget_short: granted < want,
        }))
    };
    match read() {
        Ok(Some(Bounded {
            data,
            total: len,
            budget_short,
        })) => {
            let kept = data.len() as u64;
            let mut item = Item::ok(path, source, data).keep(keep);
            if len > kept {
                item.original_bytes = Some(len);
                if budget_short {
                    item.note = Some(BUDGET_CUT.to_string());
                }
            }
            item
        }
        Ok(None) => Item::failed(path, source, "refused: not a regular file"),
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
pub fn log_files(dir: &str, log: &Path, since: Option<Duration>, max: u64, budget: &Budget) -> Vec<Item> {
    let name = log
        .file_name()
        .map_or_else(|| "log".to_string(), |n| n.to_string_lossy().into_owned());
    let mut items = vec![file(&format!("{dir}/{name}"), log, Keep::Tail, max, budget)];
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
            items.push(file(&path, &rotated, Keep::Tail, max, budget));
        }
    }
    items
}

/// Whether `dir` is a system directory (or `/`) that [`tree`] refuses to copy whole.
fn is_system_dir(dir: &Path) -> bool {
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    SYSTEM_DIRS.iter().any(|s| real == Path::new(s))
}

/// Every regular file under `src` (recursively, at most [`MAX_TREE_DEPTH`] levels and
/// [`MAX_TREE_FILES`] files, symlinks not followed), filed under `dir`; `since` skips the files
/// last written before it. An unreadable directory is one failed item; `/` or a system directory
/// such as `/etc` is refused whole.
pub fn tree(
    dir: &str,
    src: &Path,
    keep: Keep,
    since: Option<Duration>,
    max: u64,
    budget: &Budget,
) -> Vec<Item> {
    if is_system_dir(src) {
        return vec![Item::failed(
            dir,
            src.display().to_string(),
            "refused: a system directory, not one of the agent's own (check the configuration)",
        )];
    }
    let mut items = Vec::new();
    let mut files = 0usize;
    let mut stack = vec![(src.to_path_buf(), 0usize)];
    let bundle_path = |p: &Path| {
        let rel = p.strip_prefix(src).unwrap_or(p).display().to_string();
        if rel.is_empty() {
            dir.to_string()
        } else {
            format!("{dir}/{rel}")
        }
    };
    while let Some((d, depth)) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(e) => e,
            Err(e) => {
                items.push(Item::failed(
                    bundle_path(&d),
                    d.display().to_string(),
                    io_text(&e),
                ));
                continue;
            }
        };
        let mut entries: Vec<_> = entries.filter_map(Result::ok).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if depth < MAX_TREE_DEPTH {
                    stack.push((p, depth + 1));
                } else {
                    items.push(Item::skipped(
                        bundle_path(&p),
                        p.display().to_string(),
                        format!("deeper than {MAX_TREE_DEPTH} levels"),
                    ));
                }
            } else if ft.is_file() {
                if files == MAX_TREE_FILES {
                    items.push(Item::skipped(
                        format!("{dir}/..."),
                        src.display().to_string(),
                        format!("more than {MAX_TREE_FILES} files: the rest left out"),
                    ));
                    return items;
                }
                files += 1;
                let path = bundle_path(&p);
                if older_than(&p, since) {
                    items.push(Item::skipped(path, p.display().to_string(), "older than --since"));
                } else {
                    items.push(file(&path, &p, keep, max, budget));
                }
            }
        }
    }
    items
}

/// One ovs-vswitchd control-socket command filed at `path`.
pub async fn unixctl(
    vswitchd: Arc<Vswitchd>,
    path: &str,
    method: &str,
    args: &[String],
    max: u64,
    budget: Budget,
) -> Item {
    let source = format!(
        "ovs-vswitchd control socket: {method}{}",
        args.iter().map(|a| format!(" {a}")).collect::<String>()
    );
    match vswitchd.call(method, args).await {
        Ok(text) => charge(Item::ok(path, source, text.into_bytes()), max, &budget),
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
pub async fn journal(path: &str, since: Option<Duration>, max: u64, budget: Budget) -> Item {
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
    run_command(path, "journalctl", &args, Keep::Tail, max, &budget).await
}

/// Every `get` resource, as a table and as JSON, through the agent API at `socket`; when the agent
/// does not answer, each is a failed item saying so (`unavailable`).
pub async fn agent_api(socket: PathBuf, unavailable: Option<String>, max: u64, budget: Budget) -> Vec<Item> {
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
            let budget = budget.clone();
            jobs.push(tokio::task::spawn_blocking(move || match run_get(&args) {
                Ok(text) => charge(Item::ok(path, source, text.into_bytes()), max, &budget),
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

    fn budget() -> Budget {
        Budget::new(u64::MAX / 2)
    }

    #[tokio::test]
    async fn a_command_is_bounded_at_a_line_and_a_missing_one_is_a_failure() {
        let b = budget();
        let args = strings(&["-c", "printf '01\\n23\\n45\\n67\\n89'"]);
        let head = run_command("x", "sh", &args, Keep::Head, 7, &b).await;
        // `01\n23\n4` cut: the partial `4` is dropped.
        assert_eq!(head.data.as_deref().ok(), Some(&b"01\n23\n"[..]));
        assert_eq!(head.original_bytes, Some(14));
        let tail = run_command("x", "sh", &args, Keep::Tail, 7, &b).await;
        assert_eq!(tail.data.as_deref().ok(), Some(&b"67\n89"[..]));
        // A long output through the chunked tail keeps exactly its last lines.
        let many = strings(&["-c", "seq 1 200000"]);
        let tail = run_command("x", "sh", &many, Keep::Tail, 14, &b).await;
        assert_eq!(tail.data.as_deref().ok(), Some(&b"199999\n200000\n"[..]));
        let b = b.clone();
        let failed = run_command(
            "x",
            "sh",
            &strings(&["-c", "echo nope >&2; exit 3"]),
            Keep::Head,
            4,
            &b,
        )
        .await;
        let why = failed.data.expect_err("failed");
        assert!(why.contains("nope") && why.contains('3'), "{why}");
        let missing = run_command("x", "no-such-tool-here", &[], Keep::Head, 4, &b).await;
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
        let items = log_files("agent/logs", &log, None, 4, &budget());
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].path, "agent/logs/agent.log");
        assert_eq!(items[0].data.as_deref().ok(), Some(&b"new\n"[..]));
        assert_eq!(items[0].original_bytes, Some(8));
        assert_eq!(items[1].path, "agent/logs/agent.log.1");
        let missing = log_files("agent/logs", &dir.path().join("none.log"), None, 4, &budget());
        assert_eq!(missing[0].data.as_ref().expect_err("missing"), "no such file");
    }

    #[test]
    fn a_tree_is_walked_with_relative_paths() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("sub")).expect("mkdir");
        std::fs::write(dir.path().join("a.json"), "{}").expect("write");
        std::fs::write(dir.path().join("sub/b"), "b").expect("write");
        let mut paths: Vec<String> = tree("agent/state", dir.path(), Keep::Head, None, 100, &budget())
            .into_iter()
            .map(|i| i.path)
            .collect();
        paths.sort();
        assert_eq!(paths, ["agent/state/a.json", "agent/state/sub/b"]);
        let gone = tree(
            "agent/state",
            &dir.path().join("nope"),
            Keep::Head,
            None,
            100,
            &budget(),
        );
        assert_eq!(gone.len(), 1);
        assert!(gone[0].data.is_err());
    }

    #[test]
    fn a_cut_never_leaves_half_a_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let f = dir.path().join("log");
        std::fs::write(&f, "token=AAAA-first-half\nline two\nsecret=BBBB-last\n").expect("write");
        // From the end, 20 bytes start inside `line two`: that partial line goes.
        let tail = file("x", &f, Keep::Tail, 20, &budget());
        assert_eq!(tail.data.as_deref().ok(), Some(&b"secret=BBBB-last\n"[..]));
        assert_eq!(tail.original_bytes, Some(48));
        // Cut exactly at a line start, the first line kept is whole.
        let whole = file("x", &f, Keep::Tail, 17, &budget());
        assert_eq!(whole.data.as_deref().ok(), Some(&b"secret=BBBB-last\n"[..]));
        // From the start, 24 bytes end inside `line two`.
        let head = file("x", &f, Keep::Head, 24, &budget());
        assert_eq!(head.data.as_deref().ok(), Some(&b"token=AAAA-first-half\n"[..]));
        // No line end at all: nothing is kept.
        std::fs::write(&f, "one-long-secret-without-newline").expect("write");
        let none = file("x", &f, Keep::Tail, 10, &budget());
        assert_eq!(none.data.as_deref().ok(), Some(&b""[..]));
    }

    #[test]
    fn the_budget_bounds_what_all_reads_hold_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        for n in 0..5 {
            std::fs::write(dir.path().join(format!("f{n}")), "0123456789\n".repeat(10)).expect("write");
        }
        let b = Budget::new(250);
        let items = tree("agent/state", dir.path(), Keep::Head, None, 1000, &b);
        let kept: Vec<usize> = items
            .iter()
            .map(|i| i.data.as_ref().map_or(0, Vec::len))
            .collect();
        // Two whole files, then 50 bytes of lines, then nothing; nothing over the budget.
        assert_eq!(kept, [110, 110, 22, 0, 0]);
        assert!(kept.iter().sum::<usize>() <= 250);
        assert!(items[2]
            .note
            .as_deref()
            .is_some_and(|n| n.contains("total bound")));
        assert_eq!(items[3].original_bytes, Some(110));
        // What a cut did not use went back: 250 - 242.
        assert_eq!(b.left(), 8);
        let answer = charge(
            Item::ok("x", "y", b"a\nbbbbbbbbbbbb\n".to_vec()),
            100,
            &Budget::new(8),
        );
        assert_eq!(answer.data.as_deref().ok(), Some(&b"a\n"[..]));
    }

    #[test]
    fn a_tree_is_bounded_and_system_directories_are_refused() {
        for system in ["/", "/etc", "/root", "/home", "/usr", "/var"] {
            let items = tree("agent/state", Path::new(system), Keep::Head, None, 100, &budget());
            assert_eq!(items.len(), 1, "{system}");
            assert!(
                items[0].data.as_ref().is_err_and(|e| e.starts_with("refused")),
                "{system}: {:?}",
                items[0].data
            );
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let mut deep = dir.path().to_path_buf();
        for n in 0..=MAX_TREE_DEPTH + 1 {
            deep = deep.join(format!("d{n}"));
        }
        std::fs::create_dir_all(&deep).expect("mkdir");
        std::fs::write(deep.join("f"), "x").expect("write");
        let items = tree("s", dir.path(), Keep::Head, None, 100, &budget());
        assert_eq!(items.len(), 1);
        assert!(items[0].skipped && items[0].note.as_deref().is_some_and(|n| n.contains("deeper")));
        let wide = tempfile::tempdir().expect("tempdir");
        for n in 0..=MAX_TREE_FILES {
            std::fs::write(wide.path().join(format!("f{n:05}")), "").expect("write");
        }
        let items = tree("s", wide.path(), Keep::Head, None, 100, &budget());
        assert_eq!(items.len(), MAX_TREE_FILES + 1);
        assert_eq!(items[MAX_TREE_FILES].path, "s/...");
        assert!(items[MAX_TREE_FILES].skipped);
    }

    #[test]
    fn a_fifo_is_refused_not_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fifo = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        let item = file("x", &fifo, Keep::Tail, 100, &budget());
        assert!(item.data.is_err_and(|e| e.contains("not a regular file")));
    }
}
