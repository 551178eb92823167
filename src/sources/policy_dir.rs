//! Standalone mode: controlplane policies from a directory (`standalone.policyDir`). Each
//! `*.yaml`, `*.yml` or `*.json` file (hidden files and other names are ignored, so a Kubernetes
//! ConfigMap mount works) holds one or more `controlplane.antrea.io/v1beta2` objects of kind
//! NetworkPolicy, AddressGroup or AppliedToGroup: YAML documents separated by `---`, a JSON
//! object or array, or a `...List` object with `items`. The directory is read when inotify
//! reports a change in it or in the ExternalNode file's directory ([`DirWatch`]), and polled as
//! a safety net; whenever its content changes the source emits a full [`PolicySnapshot`].
//!
//! A bad file or object never blocks the others: it is reported in `errors`, naming the file and
//! the object, and the rest loads. Like a rejected update in Kubernetes, a file that stops
//! parsing, or an object that stops validating, keeps its last good version (reported as such),
//! so a half-saved edit never opens traffic; removing the file or the object removes it.
//!
//! Only files whose text changed are parsed again, and in a changed YAML file only the
//! documents whose text changed (the others give back the objects they gave before); no text is
//! kept between polls (a fingerprint of each file and document is): with thousands of policy
//! files, or an inventory of thousands of documents in one file, a change costs its own parse, and
//! the objects are held once, shared with the policy cache (`Arc`). The files one pass parses are
//! parsed on the spare cores too ([`parallel`]). On a pass inotify woke, the
//! regular files no event named are not even looked at (symlinks are: their targets change
//! elsewhere); a file changed with no event in the directory (through a hard link elsewhere, on
//! a network filesystem) is read at the next safety-net poll, which reads every file.

use crate::policy::controlplane::Validate as _;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream, StreamExt};
use serde_json::Value;
use tracing::debug;

use super::bounded::{
    parse_values, parse_yaml_piece, prescan, read_checked, split_yaml_documents, FileError, FileRead,
    InputError, Listed,
};
use super::dir_watch::DirWatch;
use super::file_stat::{FileStat, ReadStamp};
use super::native_policies::{
    native_key, native_raw_key, read_node_text, ChangedFile, LocalController, LocalNode, NativeKey,
};
use crate::config::InputLimits;
use crate::policy::controlplane::{ControlplaneObject, Group, Kind, Policy, ValidObject};
use crate::policy::native::{decode as decode_native, is_native, NativeObject};

mod parallel;

/// The safety-net poll period while inotify events arrive (a network filesystem may deliver
/// none); without inotify the source polls every `interval`.
const WATCHED_POLL: Duration = Duration::from_secs(5);

/// The invalid objects of one file listed one by one; the rest are counted in one line.
const MAX_OBJECT_ERRORS_PER_FILE: usize = 10;

/// From this much text parsed in one pass on, the allocator's free memory is handed back after
/// the texts are dropped (a large or rejected input leaves its peak behind otherwise).
const TRIM_AFTER_BYTES: usize = 256 << 10;

/// From this much text read in one pass on (parsed or not), the same. Not lower: the texts of
/// the unchanged files are read on every pass, and trimming after each of them would cost a
/// large directory's every change tens of milliseconds (and lock the allocator meanwhile); a
/// pass below both hands memory back at the next idle poll instead.
const TRIM_AFTER_READ_BYTES: usize = 16 << 20;

/// How long after a large pass the free memory is handed back once more.
const LATE_TRIM_DELAY: Duration = Duration::from_secs(2);

/// Everything the directory holds right now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PolicySnapshot {
    /// Sorted by name; names are unique within each kind.
    pub network_policies: Vec<Arc<Policy>>,
    pub address_groups: Vec<Arc<Group>>,
    pub applied_to_groups: Vec<Arc<Group>>,
    /// One line per problem, naming the file and the object.
    pub errors: Vec<String>,
}

impl PolicySnapshot {
    /// `==`, comparing shared policies by pointer first (unchanged files keep theirs).
    fn same_as(&self, other: &PolicySnapshot) -> bool {
        self.network_policies.len() == other.network_policies.len()
            && self
                .network_policies
                .iter()
                .zip(&other.network_policies)
                .all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
            && same_groups(&self.address_groups, &other.address_groups)
            && same_groups(&self.applied_to_groups, &other.applied_to_groups)
            && self.errors == other.errors
    }
}

/// `==` for shared groups, by pointer first.
fn same_groups(a: &[Arc<Group>], b: &[Arc<Group>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(a, b)| Arc::ptr_eq(a, b) || a == b)
}

/// Reads `dir` when it changes (or every `interval` if inotify is unavailable) and emits a
/// snapshot when the content changes.
#[derive(Clone, Debug)]
pub struct PolicyDirSource {
    pub dir: PathBuf,
    pub interval: Duration,
    pub limits: InputLimits,
    /// The ExternalNode file, whose ExternalEntities Antrea-native policies apply to.
    pub external_node_file: Option<PathBuf>,
}

impl PolicyDirSource {
    pub fn new(dir: impl Into<PathBuf>, interval: Duration) -> Self {
        PolicyDirSource {
            dir: dir.into(),
            interval,
            limits: InputLimits::default(),
            external_node_file: None,
        }
    }

    /// The same source, deriving the local ExternalEntities from `path` (read on every pass).
    pub fn with_external_node_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.external_node_file = Some(path.into());
        self
    }

    /// The same source with other reading limits.
    pub fn with_limits(mut self, limits: InputLimits) -> Self {
        self.limits = limits;
        self
    }

    /// A new stream of snapshots: the first is the current content, then one per change that
    /// alters the snapshot (objects or errors). Each call starts an independent stream with its
    /// own last-good memory.
    pub fn subscribe(&self) -> BoxStream<'static, PolicySnapshot> {
        let state = StreamState {
            watch: DirWatch::new(&self.dir).with_files_of_interest(is_policy_file),
            node_watch: self.node_file_dir().map(DirWatch::new),
            source: self.clone(),
            loader: Loader::default(),
            last_fingerprint: None,
            last_snapshot: None,
            trim_next: false,
            trim_when_idle: false,
        };
        stream::unfold(state, |mut st| async move {
            loop {
                // A pass woken by inotify skips the files proven unchanged; the first pass and
                // the safety-net polls read every file (whatever the metadata says).
                let mut woken = false;
                if st.last_fingerprint.is_some() {
                    let interval = st.source.interval;
                    let poll = interval.max(WATCHED_POLL);
                    woken = match st.node_watch.as_mut() {
                        // Whichever changes first: both are read on every pass.
                        Some(node) => {
                            tokio::select! {
                                w = st.watch.wait(poll, interval) => w,
                                w = node.wait(poll, interval) => w,
                            }
                        }
                        None => st.watch.wait(poll, interval).await,
                    };
                }
                if !woken && std::mem::take(&mut st.trim_when_idle) {
                    let _ = tokio::task::spawn_blocking(crate::memory::release_free_memory).await;
                }
                // Which of the directory's files events named since the last read: on a pass an
                // event woke, the other regular files need not even be looked at.
                let named = st.watch.arm_for_read();
                let changed = if woken { named } else { None };
                if let Some(node) = st.node_watch.as_mut() {
                    node.arm();
                }
                let loader = std::mem::take(&mut st.loader);
                let started = std::time::Instant::now();
                let skip = woken.then_some(Unchanged { changed });
                let (content, node_text, loader) = read_content(&st.source, loader, skip).await;
                let read_ms = started.elapsed().as_secs_f64() * 1e3;
                st.loader = loader;
                let files_read = content.files_read();
                let fingerprint = (content.fingerprint(), node_text.clone());
                if st.last_fingerprint.as_ref() == Some(&fingerprint) {
                    continue;
                }
                st.loader.node.update(node_text, &st.source.limits);
                let snapshot = build_off_thread(&mut st, content).await;
                debug!(
                    dir = %st.source.dir.display(),
                    woken,
                    files_read,
                    read_ms = format_args!("{read_ms:.1}"),
                    parsed_bytes = st.loader.parsed_bytes,
                    build_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3 - read_ms),
                    "policy directory read"
                );
                st.last_fingerprint = Some(fingerprint);
                if !st
                    .last_snapshot
                    .as_ref()
                    .is_some_and(|last| last.same_as(&snapshot))
                {
                    st.last_snapshot = Some(snapshot.clone());
                    return Some((snapshot, st));
                }
            }
        })
        .boxed()
    }

    /// The directory holding the ExternalNode file, when it is not the policy directory: watched
    /// too, so an edit of the ExternalNode is read as soon as an edit of a policy is.
    fn node_file_dir(&self) -> Option<PathBuf> {
        let file = self.external_node_file.as_ref()?;
        let dir = match file.parent() {
            Some(p) if p.as_os_str().is_empty() => PathBuf::from("."),
            Some(p) => p.to_path_buf(),
            None => return None,
        };
        (dir != self.dir).then_some(dir)
    }

    /// Human description for logs, e.g. `policy directory /etc/antrea/policies`.
    pub fn describe(&self) -> String {
        format!("policy directory {}", self.dir.display())
    }
}

/// Parses on the blocking pool: a large or hostile file never holds the thread that runs the
/// policy cache (or answers health). The loader travels to the pool and back.
async fn build_off_thread(st: &mut StreamState, content: DirContent) -> PolicySnapshot {
    let mut loader = std::mem::take(&mut st.loader);
    let dir = st.source.dir.clone();
    let limits = st.source.limits.clone();
    // The pass after a large one trims too: what the large one built (the previous snapshot, a
    // removed file's objects) is only freed now.
    let trim_anyway = st.trim_next;
    let joined = tokio::task::spawn_blocking(move || {
        let snapshot = loader.build_within(&dir, &content, &limits);
        // What parsing built is the peak to hand back; the texts of unchanged files are read
        // again on every pass and only count when there are many of them.
        let large = loader.parsed_bytes >= TRIM_AFTER_BYTES || content.text_bytes() >= TRIM_AFTER_READ_BYTES;
        drop(content);
        (loader, snapshot, large)
    })
    .await;
    match joined {
        Ok((loader, snapshot, large)) => {
            if large || trim_anyway {
                // Handed back beside the snapshot, not before it: a trim walks every arena (up
                // to tens of milliseconds with a fragmented heap; 0.4 to 0.6 ms in the
                // 2026-11-28 bench runs), while the policies wait to be resolved.
                let dir = st.source.dir.clone();
                tokio::task::spawn_blocking(move || {
                    let started = std::time::Instant::now();
                    let released = crate::memory::release_free_memory();
                    debug!(
                        dir = %dir.display(),
                        released,
                        trim_ms = format_args!("{:.1}", started.elapsed().as_secs_f64() * 1e3),
                        "returned freed memory after a large pass"
                    );
                });
            }
            // Small changes do not trim on their way (it costs tens of milliseconds with a large
            // heap): the next idle poll does, once.
            st.trim_when_idle |= !large && loader.parsed_bytes > 0;
            st.loader = loader;
            st.trim_next = large;
            if large {
                // The actors downstream drop what they derived from the previous snapshot only
                // once they have taken this one: hand that back a little later as well.
                tokio::spawn(async {
                    tokio::time::sleep(LATE_TRIM_DELAY).await;
                    let _ = tokio::task::spawn_blocking(crate::memory::release_free_memory).await;
                });
            }
            snapshot
        }
        // The parse panicked (a bug): the last snapshot stays in force, with the error; the
        // loader starts over on the next change.
        Err(e) => {
            let mut last = st.last_snapshot.clone().unwrap_or_default();
            last.errors.push(format!(
                "policy directory {}: loading failed: {e}; keeping the policies last loaded",
                st.source.dir.display()
            ));
            last
        }
    }
}

struct StreamState {
    source: PolicyDirSource,
    watch: DirWatch,
    /// The ExternalNode file's directory, when it is elsewhere.
    node_watch: Option<DirWatch>,
    loader: Loader,
    /// The directory's fingerprint and the ExternalNode file's text (small).
    last_fingerprint: Option<(DirFingerprint, Option<Result<String, FileError>>)>,
    /// Cheap to keep: the policies in it are shared with the loader.
    last_snapshot: Option<PolicySnapshot>,
    /// The last pass read a large input: the next one hands free memory back too.
    trim_next: bool,
    /// Passes parsed changes since free memory was last handed back: the next poll that no
    /// change woke (the directory idle for the poll period) hands it back.
    trim_when_idle: bool,
}

/// The raw content of the directory: what polling compares.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DirContent {
    Missing,
    Unreadable(String),
    /// Policy files sorted by path, each with its text or why it could not be read.
    Files(Vec<(PathBuf, Result<FileText, FileError>)>),
}

/// A file's text, reduced to what tells a change: its length and a hash.
type TextFingerprint = (usize, u64);

/// A file's text with its fingerprint, computed once when read.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FileText {
    /// Empty when the file was not read again (`read` false).
    text: String,
    fingerprint: TextFingerprint,
    /// The file's metadata before the read that gave `fingerprint`, when it was a regular file.
    stamp: Option<ReadStamp>,
    /// False: its metadata proved it unchanged since the loader last loaded it, with
    /// `fingerprint`; it was not read again.
    read: bool,
}

impl FileText {
    fn new(text: String) -> Self {
        let fingerprint = text_fingerprint(&text);
        FileText {
            text,
            fingerprint,
            stamp: None,
            read: true,
        }
    }

    /// A file not read again: unchanged since the read stamped `stamp`.
    fn unchanged(fingerprint: TextFingerprint, stamp: ReadStamp) -> Self {
        FileText {
            text: String::new(),
            fingerprint,
            stamp: Some(stamp),
            read: false,
        }
    }
}

/// [`DirContent`] without the texts: what polling compares from one poll to the next.
#[derive(Clone, Debug, PartialEq, Eq)]
enum DirFingerprint {
    Missing,
    Unreadable(String),
    Files(Vec<(PathBuf, Result<TextFingerprint, FileError>)>),
}

impl DirContent {
    /// How much text this read holds.
    fn text_bytes(&self) -> usize {
        match self {
            DirContent::Files(files) => files
                .iter()
                .filter_map(|(_, t)| t.as_ref().ok())
                .map(|t| t.text.len())
                .sum(),
            _ => 0,
        }
    }

    /// How many files this read read (the others were proven unchanged).
    fn files_read(&self) -> usize {
        match self {
            DirContent::Files(files) => files
                .iter()
                .filter(|(_, t)| t.as_ref().is_ok_and(|t| t.read))
                .count(),
            _ => 0,
        }
    }

    fn fingerprint(&self) -> DirFingerprint {
        match self {
            DirContent::Missing => DirFingerprint::Missing,
            DirContent::Unreadable(e) => DirFingerprint::Unreadable(e.clone()),
            DirContent::Files(files) => DirFingerprint::Files(
                files
                    .iter()
                    .map(|(path, text)| {
                        (
                            path.clone(),
                            text.as_ref().map(|f| f.fingerprint).map_err(Clone::clone),
                        )
                    })
                    .collect(),
            ),
        }
    }
}

/// A policy file name: `*.yaml`, `*.yml` or `*.json`, not hidden.
pub(crate) fn is_policy_file(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    !name.starts_with('.')
        && (lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json"))
}

/// How a pass tells the files it need not read again.
struct Unchanged {
    /// The entries inotify named since the last read (`None`: unknown). A regular file of the
    /// directory (not a symlink, whose target may change elsewhere) held by the loader and not
    /// named is unchanged since that read began: not even its metadata is looked at.
    changed: Option<NamedEntries>,
}

/// Names of directory entries, as inotify reports them.
type NamedEntries = std::collections::BTreeSet<std::ffi::OsString>;

/// Reads the directory on the blocking pool, in one task (a task per file would cost more than
/// reading thousands of small files). `loader` travels to the pool and back: with `skip`, the
/// files proven unchanged since the loader loaded them (by inotify, or by their metadata) are
/// not read again.
async fn read_content(
    source: &PolicyDirSource,
    loader: Loader,
    skip: Option<Unchanged>,
) -> (DirContent, Option<Result<String, FileError>>, Loader) {
    let owned = source.dir.clone();
    let node_file = source.external_node_file.clone();
    let limits = source.limits.clone();
    tokio::task::spawn_blocking(move || {
        let held = skip.map(|s| (&loader.files, s.changed));
        let content = read_content_blocking(&owned, limits.max_file_bytes, held);
        (content, read_node_text(node_file.as_ref(), &limits), loader)
    })
    .await
    .unwrap_or_else(|e| {
        // The read panicked (a bug): the loader starts over.
        (
            DirContent::Unreadable(format!("reading the directory failed: {e}")),
            None,
            Loader::default(),
        )
    })
}

/// Reads every policy file of `dir`: only regular files (symlinks followed), at most
/// `max_bytes` each, never blocking (a FIFO or device under a policy name is reported, not read).
/// A file of `held` whose metadata proves it unchanged since it was loaded ([`ReadStamp`]) is
/// not read again: a change of one file among thousands costs their metadata, not their texts.
/// With the entries inotify named since then, a regular file not among them costs nothing. Many
/// files to look at are read on every core ([`parallel::map_on_threads`]).
fn read_content_blocking(
    dir: &Path,
    max_bytes: u64,
    held: Option<(&BTreeMap<PathBuf, LoadedFile>, Option<NamedEntries>)>,
) -> DirContent {
    let entries = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return DirContent::Missing,
        Err(e) => return DirContent::Unreadable(e.to_string()),
    };
    let (held, named) = match held {
        Some((files, named)) => (Some(files), named),
        None => (None, None),
    };
    // Each path with whether inotify proves it unchanged: a regular file (the entry's type
    // costs no system call) that no event named.
    let mut paths = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                let name = entry.file_name();
                if name.to_str().is_some_and(is_policy_file) {
                    // The entry's type costs no system call where the filesystem lists it.
                    let listed = if entry.file_type().is_ok_and(|t| t.is_file()) {
                        Listed::RegularFile
                    } else {
                        Listed::Unknown
                    };
                    let quiet = listed == Listed::RegularFile
                        && named.as_ref().is_some_and(|named| !named.contains(&name));
                    paths.push((entry.path(), listed, quiet));
                }
            }
            Err(e) => return DirContent::Unreadable(e.to_string()),
        }
    }
    // All in `dir`: their order as paths is the order of their names' bytes, far cheaper to
    // compare than paths (component by component) when thousands are sorted on every pass.
    paths.sort_unstable_by(|(a, ..), (b, ..)| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    // Both sorted by path: one walk finds what the loader holds for each path.
    let mut held = held.into_iter().flatten().peekable();
    let work: Vec<_> = paths
        .into_iter()
        .map(|(path, listed, quiet)| {
            while held.next_if(|(p, _)| **p < path).is_some() {}
            let known = held
                .next_if(|(p, _)| **p == path)
                .and_then(|(_, f)| Some((f.text?, f.stamp?)));
            (path, listed, quiet, known)
        })
        .collect();
    // Then the stats and reads, on every core when there are many (a file inotify proves
    // unchanged costs nothing and does not count).
    let to_look_at = work
        .iter()
        .filter(|(_, _, quiet, known)| !(*quiet && known.is_some()))
        .count();
    let worth_threads = to_look_at >= parallel::PARALLEL_READS_FROM;
    let files = parallel::map_on_threads(work, worth_threads, |(path, listed, quiet, known)| {
        read_policy_file(path, listed, quiet, known, max_bytes)
    });
    DirContent::Files(files.into_iter().flatten().collect())
}

/// One policy file's text, or why it could not be read; `None` when it was removed meanwhile.
/// `known`: the fingerprint and stamp of what the loader holds for it; `quiet`: inotify proves it
/// unchanged since. A file proven unchanged is not read again.
fn read_policy_file(
    path: PathBuf,
    listed: Listed,
    quiet: bool,
    known: Option<(TextFingerprint, ReadStamp)>,
    max_bytes: u64,
) -> Option<(PathBuf, Result<FileText, FileError>)> {
    if let Some((fingerprint, stamp)) = known {
        if quiet || FileStat::of(&path).is_some_and(|now| stamp.unchanged(&now)) {
            return Some((path, Ok(FileText::unchanged(fingerprint, stamp))));
        }
    }
    // The clock before the metadata, the metadata (of the opened file) before the read.
    let read_at = std::time::SystemTime::now();
    match read_checked(&path, max_bytes, listed) {
        Ok((FileRead::Text(text), meta)) => {
            let mut file = FileText::new(text);
            file.stamp = meta.map(|m| ReadStamp::new(read_at, FileStat::from_metadata(&m)));
            Some((path, Ok(file)))
        }
        // Removed meanwhile: simply gone.
        Ok((FileRead::Missing, _)) => None,
        Ok((FileRead::NotRegular(what), _)) => Some((path, Err(FileError::NotRegular(what)))),
        Err(e) => Some((path, Err(e.into()))),
    }
}

/// The objects of a file: JSON (`.json`) or YAML documents; arrays and `...List` objects are
/// flattened, empty documents skipped. Parsed within `limits`.
fn parse_documents(path: &Path, text: &str, limits: &InputLimits) -> Result<Vec<Value>, InputError> {
    let docs = parse_values(text, is_json_file(path), limits)?;
    let mut out = Vec::new();
    for doc in docs {
        flatten(doc, &mut out);
    }
    Ok(out)
}

/// An object of a file, decoded as far as its kind: an Antrea-native one (for the local
/// controller), or a control-plane one with the key it tells (to keep its last good version).
// One exists at a time, and is taken apart at once: boxing the larger variant would only add an
// allocation per object.
#[allow(clippy::large_enum_variant)]
enum Decoded {
    Native(Value),
    Controlplane {
        key: Option<ObjectKey>,
        object: Result<ControlplaneObject, String>,
    },
}

/// Decodes `doc`: an Antrea-native object is left to the local controller, anything else is
/// decoded as a control-plane object (which also gives the errors).
fn decode_object(doc: Value) -> Decoded {
    if is_native(&doc) {
        return Decoded::Native(doc);
    }
    Decoded::Controlplane {
        key: raw_key(&doc),
        object: ControlplaneObject::from_value(doc).map_err(|e| e.to_string()),
    }
}

/// Arrays and `...List` objects flattened into their items; empty documents dropped.
pub(crate) fn flatten(doc: Value, out: &mut Vec<Value>) {
    match doc {
        Value::Null => {}
        Value::Array(items) => items.into_iter().for_each(|i| flatten(i, out)),
        Value::Object(mut map)
            if map
                .get("kind")
                .and_then(Value::as_str)
                .is_some_and(|k| k.ends_with("List"))
                && map.get("items").is_some_and(Value::is_array) =>
        {
            if let Some(items) = map.remove("items") {
                flatten(items, out);
            }
        }
        other => out.push(other),
    }
}

type ObjectKey = (Kind, String);

fn key_of(o: &ValidObject) -> ObjectKey {
    match o {
        ValidObject::NetworkPolicy(p) => (Kind::NetworkPolicy, p.name.clone()),
        ValidObject::AddressGroup(g) => (Kind::AddressGroup, g.name.clone()),
        ValidObject::AppliedToGroup(g) => (Kind::AppliedToGroup, g.name.clone()),
        ValidObject::AddressGroupPatch(p) => (Kind::AddressGroupPatch, p.name.clone()),
        ValidObject::AppliedToGroupPatch(p) => (Kind::AppliedToGroupPatch, p.name.clone()),
    }
}

/// Kind and name as far as a raw (possibly invalid) object tells them.
fn raw_key(v: &Value) -> Option<ObjectKey> {
    let kind = Kind::parse(v.get("kind")?.as_str()?)?;
    let name = v.get("metadata")?.get("name")?.as_str()?;
    (!name.is_empty()).then(|| (kind, name.to_owned()))
}

/// What was last loaded from one file.
#[derive(Debug, Default)]
struct LoadedFile {
    /// The text it was loaded from (`None`: the file could not be read).
    text: Option<TextFingerprint>,
    /// The file's metadata before the last read of that text: what proves it unchanged.
    stamp: Option<ReadStamp>,
    objects: Vec<ValidObject>,
    /// Its Antrea-native objects, shared with the local controller (which keeps no copy).
    native: Vec<Arc<NativeObject>>,
    /// The problems found in it, reported again as long as the text stays the same.
    errors: Vec<String>,
    /// Its YAML documents that loaded cleanly into one object each, by their text: a document
    /// whose text is the same in the next version of the file is not parsed again.
    pieces: Pieces,
}

/// A YAML document's text, reduced as a file's is.
type PieceKey = TextFingerprint;

/// The documents of a file that a next load may take over, by text.
type Pieces = std::collections::HashMap<PieceKey, Piece>;

/// The object one YAML document gave, and the elements its parse spent.
#[derive(Clone, Copy, Debug)]
struct Piece {
    elements: usize,
    slot: Slot,
}

/// Where a document's object sits in its file's lists.
#[derive(Clone, Copy, Debug)]
enum Slot {
    Native(usize),
    Controlplane(usize),
}

/// A text reduced to its length and a hash: what tells a file's or a document's change.
fn text_fingerprint(text: &str) -> TextFingerprint {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut hasher);
    (text.len(), hasher.finish())
}

/// One object of a file, as its load sees it.
enum Doc {
    /// Parsed now; `piece` when it is its YAML document's only object (what a later load may
    /// take over), with the elements the document spent.
    Parsed {
        value: Value,
        piece: Option<(PieceKey, usize)>,
    },
    /// Its document's text is the one that gave the object at `slot` last time.
    Unchanged { key: PieceKey, piece: Piece },
}

/// The objects of a file's text, each parsed, or taken over from the last load when its YAML
/// document did not change (`previous`, with the lengths of the lists its slots index). Parsed
/// whole, as before, whenever the text cannot be cut into documents exactly or a piece fails:
/// errors read the same either way. `text` comes with its fingerprint when the read took it,
/// which is then the key of a document that is the whole text (most files hold one).
fn documents(
    path: &Path,
    (text, fingerprint): (&str, Option<TextFingerprint>),
    limits: &InputLimits,
    previous: (&Pieces, usize, usize),
) -> Result<Vec<Doc>, InputError> {
    let whole = || {
        parse_documents(path, text, limits).map(|docs| {
            docs.into_iter()
                .map(|value| Doc::Parsed { value, piece: None })
                .collect()
        })
    };
    let (old_pieces, old_objects, old_native) = previous;
    let cut = if is_json_file(path) {
        None
    } else {
        split_yaml_documents(text)
    };
    let Some(cut) = cut else { return whole() };
    if prescan(text, limits).is_err() {
        return whole();
    }
    let mut out = Vec::new();
    let mut spent = 0usize;
    for piece_text in cut {
        let key = match fingerprint {
            Some(whole) if piece_text.len() == text.len() => {
                debug_assert_eq!(
                    whole,
                    text_fingerprint(text),
                    "the read's fingerprint is the text's"
                );
                whole
            }
            _ => text_fingerprint(piece_text),
        };
        let held = old_pieces.get(&key).filter(|p| match p.slot {
            Slot::Native(at) => at < old_native,
            Slot::Controlplane(at) => at < old_objects,
        });
        if let Some(piece) = held {
            spent += piece.elements;
            if spent > limits.max_elements {
                return whole();
            }
            out.push(Doc::Unchanged { key, piece: *piece });
            continue;
        }
        let Ok((values, used)) =
            parse_yaml_piece(piece_text, limits.max_elements.saturating_sub(spent), limits)
        else {
            return whole();
        };
        spent += used;
        let mut items = Vec::new();
        for value in values {
            flatten(value, &mut items);
        }
        let single = items.len() == 1;
        out.extend(items.into_iter().map(|value| Doc::Parsed {
            value,
            piece: single.then_some((key, used)),
        }));
    }
    Ok(out)
}

fn is_json_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// Builds snapshots, remembering per file the objects last loaded from it.
#[derive(Debug, Default)]
struct Loader {
    files: BTreeMap<PathBuf, LoadedFile>,
    /// How many controlplane objects the last snapshot held (for the message when the
    /// directory goes missing and they stay in force).
    enforced: usize,
    /// The local controller, holding the Antrea-native definitions last translated.
    native: LocalController,
    /// The local ExternalNode's ExternalEntities, for the local controller.
    node: LocalNode,
    /// How much text the last pass parsed (the files that changed).
    parsed_bytes: usize,
}

impl Loader {
    #[cfg(test)]
    fn build(&mut self, dir: &Path, content: &DirContent) -> PolicySnapshot {
        self.build_within(dir, content, &InputLimits::default())
    }

    fn build_within(&mut self, dir: &Path, content: &DirContent, limits: &InputLimits) -> PolicySnapshot {
        let mut errors = Vec::new();
        // The files whose Antrea-native objects may have changed: re-read, added or removed.
        let mut changed: Vec<ChangedFile> = Vec::new();
        let mut parsed_bytes = 0usize;
        match content {
            // A directory that vanished (unmounted, replaced, removed by mistake) is an outage of
            // the source, not an instruction to open the host: what it held stays in force.
            DirContent::Missing if self.files.is_empty() => errors.push(format!(
                "policy directory {} does not exist: no policies loaded",
                dir.display()
            )),
            DirContent::Missing => errors.push(format!(
                "policy directory {} does not exist (removed or not mounted); keeping the {} \
                 objects last loaded from it until it is back",
                dir.display(),
                self.enforced
            )),
            DirContent::Unreadable(e) => errors.push(format!(
                "policy directory {}: cannot read: {e}; keeping the policies last loaded from it",
                dir.display()
            )),
            DirContent::Files(files) => {
                debug_assert!(files.windows(2).all(|w| w[0].0 < w[1].0), "files sorted by path");
                // Both sides are sorted by path: one walk, no lookups (thousands of files are
                // walked on every pass, most of them unchanged).
                let mut held = std::mem::take(&mut self.files).into_iter().peekable();
                let mut next: Vec<(PathBuf, Option<LoadedFile>)> = Vec::with_capacity(files.len());
                // The files to parse again, each with where its result goes in `next`.
                let mut loads: Vec<(usize, LoadJob<'_>)> = Vec::new();
                for (path, text) in files {
                    while let Some((gone_path, gone)) = held.next_if(|(p, _)| p < path) {
                        changed.push(ChangedFile {
                            path: gone_path,
                            before: gone.native.iter().map(|o| native_key(o)).collect(),
                        });
                    }
                    let (key, old) = held
                        .next_if(|(p, _)| p == path)
                        .unwrap_or_else(|| (path.clone(), LoadedFile::default()));
                    let fingerprint = text.as_ref().ok().map(|f| f.fingerprint);
                    let stamp = text.as_ref().ok().and_then(|f| f.stamp);
                    let loaded = if fingerprint.is_some() && fingerprint == old.text {
                        Some(LoadedFile { stamp, ..old })
                    } else if text.as_ref().is_ok_and(|f| !f.read) {
                        // Not read, yet not what is held: cannot happen (the reader skips only
                        // files held with that fingerprint). Keep what is held and read the
                        // file next time.
                        Some(LoadedFile { stamp: None, ..old })
                    } else {
                        changed.push(ChangedFile {
                            path: path.clone(),
                            before: old.native.iter().map(|o| native_key(o)).collect(),
                        });
                        parsed_bytes += text.as_ref().map_or(0, |f| f.text.len());
                        loads.push((next.len(), LoadJob { path, text, old }));
                        None
                    };
                    next.push((key, loaded));
                }
                // What is left was removed.
                for (path, gone) in held {
                    changed.push(ChangedFile {
                        path,
                        before: gone.native.iter().map(|o| native_key(o)).collect(),
                    });
                }
                let parsed = parallel::map_loads(
                    loads,
                    |(_, job)| job.text.as_ref().map_or(0, |f| f.text.len()),
                    |(at, job)| (at, job.load(limits)),
                );
                for (at, loaded) in parsed {
                    next[at].1 = Some(loaded);
                }
                // Every slot is filled: a file either kept what it held or was loaded above.
                let next: Vec<(PathBuf, LoadedFile)> = next
                    .into_iter()
                    .filter_map(|(path, loaded)| loaded.map(|l| (path, l)))
                    .collect();
                for (_, loaded) in &next {
                    errors.extend(loaded.errors.iter().cloned());
                }
                self.files = next.into_iter().collect();
            }
        }

        let mut snapshot = PolicySnapshot::default();
        let mut enforced = 0;
        for (key, definitions) in self.definitions() {
            // Defined more than once (in several files, or twice in one): the last definition
            // in path order, then file order, is used, as for Antrea-native objects
            // (`native_policies::conflict_warning`): a function of the directory alone, so a
            // restarted agent enforces what the running one did, and never neither.
            let Some((last_path, object)) = definitions.last() else {
                continue;
            };
            if definitions.len() > 1 {
                let mut files: Vec<String> = Vec::new();
                for (path, _) in &definitions {
                    let shown = path.display().to_string();
                    if files.last() != Some(&shown) {
                        files.push(shown);
                    }
                }
                let place = if files.len() == 1 {
                    format!(
                        "policy file {}: {} {} is defined more than once in the file",
                        files[0], key.0, key.1
                    )
                } else {
                    format!(
                        "policy files {}: {} {} is defined in more than one file",
                        files.join(", "),
                        key.0,
                        key.1
                    )
                };
                errors.push(format!(
                    "{place}: the last definition, in {} (the last file in path order), is used",
                    last_path.display()
                ));
            }
            match object {
                ValidObject::NetworkPolicy(p) => snapshot.network_policies.push(Arc::clone(p)),
                ValidObject::AddressGroup(g) => snapshot.address_groups.push(Arc::clone(g)),
                ValidObject::AppliedToGroup(g) => snapshot.applied_to_groups.push(Arc::clone(g)),
                // Never stored: load_file rejects patches.
                ValidObject::AddressGroupPatch(_) | ValidObject::AppliedToGroupPatch(_) => {}
            }
            enforced += 1;
        }
        self.enforced = enforced;
        // The files holding Antrea-native objects, hashed: a lookup in `files` by path compares
        // paths component by component, which cost milliseconds over thousands of changed files.
        let natives: HashMap<&Path, &[Arc<NativeObject>]> = self
            .files
            .iter()
            .filter(|(_, f)| !f.native.is_empty())
            .map(|(path, f)| (path.as_path(), f.native.as_slice()))
            .collect();
        let current = |path: &Path| natives.get(path).copied().unwrap_or(&[]);
        self.native.translate_into(
            &changed,
            &current,
            self.node.entities(),
            &mut snapshot,
            &mut errors,
        );
        snapshot.network_policies.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.address_groups.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.applied_to_groups.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.errors = errors;
        self.parsed_bytes = parsed_bytes;
        snapshot
    }

    /// Every object name with the files (and versions) that define it, in path order.
    fn definitions(&self) -> BTreeMap<ObjectKey, Vec<(&Path, &ValidObject)>> {
        let mut definitions: BTreeMap<ObjectKey, Vec<(&Path, &ValidObject)>> = BTreeMap::new();
        for (path, loaded) in &self.files {
            for object in &loaded.objects {
                definitions
                    .entry(key_of(object))
                    .or_default()
                    .push((path.as_path(), object));
            }
        }
        definitions
    }
}

/// Reports the `index`th object of a file as rejected (saying whether its last valid version
/// stays), up to [`MAX_OBJECT_ERRORS_PER_FILE`]: a file of 100,000 bad objects is one problem,
/// not 100,000 log lines; the rest are only counted in `unreported`.
fn report_bad_object(
    errors: &mut Vec<String>,
    unreported: &mut usize,
    path: &Path,
    index: usize,
    msg: &str,
    kept_previous: bool,
) {
    if errors.len() >= MAX_OBJECT_ERRORS_PER_FILE {
        *unreported += 1;
        return;
    }
    let kept = if kept_previous {
        "; keeping its last valid version"
    } else {
        ""
    };
    errors.push(format!(
        "policy file {}: object {}: {msg}{kept}",
        path.display(),
        index + 1
    ));
}

/// A file to parse again in this pass: its text and what it gave last time.
struct LoadJob<'a> {
    path: &'a Path,
    text: &'a Result<FileText, FileError>,
    old: LoadedFile,
}

impl LoadJob<'_> {
    /// What the file gives now (independent of every other file: loads may run in parallel).
    fn load(self, limits: &InputLimits) -> LoadedFile {
        let LoadJob { path, text, old } = self;
        let mut errors = Vec::new();
        let (objects, native, pieces) = load_file(
            path,
            text,
            (old.objects, old.native, old.pieces),
            limits,
            &mut errors,
        );
        LoadedFile {
            text: text.as_ref().ok().map(|f| f.fingerprint),
            stamp: text.as_ref().ok().and_then(|f| f.stamp),
            objects,
            native,
            errors,
            pieces,
        }
    }
}

/// What a file's load takes from the last one and gives to the next: its objects, its
/// Antrea-native objects, and the documents that gave them ([`Pieces`]).
type FileObjects = (Vec<ValidObject>, Vec<Arc<NativeObject>>, Pieces);

/// The objects of one file; `old` is what was last loaded from it.
fn load_file(
    path: &Path,
    text: &Result<FileText, FileError>,
    old: FileObjects,
    limits: &InputLimits,
    errors: &mut Vec<String>,
) -> FileObjects {
    let keep_all = |why: String, errors: &mut Vec<String>, old: FileObjects| {
        let kept = match old.0.len() + old.1.len() {
            0 => String::new(),
            1 => "; keeping the object last loaded from it".to_owned(),
            n => format!("; keeping the {n} objects last loaded from it"),
        };
        errors.push(format!("policy file {}: {why}{kept}", path.display()));
        old
    };
    let (text, fingerprint) = match text {
        Ok(file) => (&file.text, file.read.then_some(file.fingerprint)),
        Err(e) => return keep_all(e.to_string(), errors, old),
    };
    let previous = (&old.2, old.0.len(), old.1.len());
    let docs = match documents(path, (text, fingerprint), limits, previous) {
        Ok(docs) => docs,
        Err(e) => return keep_all(e.to_string(), errors, old),
    };
    // A file emptied (truncated, half-saved, a failed copy) never means "no policies": only
    // deleting it, or removing some objects from a file that still holds others, removes them.
    if docs.is_empty() && !(old.0.is_empty() && old.1.is_empty()) {
        return keep_all(
            "holds no objects (delete the file to remove its objects)".to_string(),
            errors,
            old,
        );
    }
    let (old, old_native, _) = old;
    let mut out = Vec::with_capacity(docs.len());
    let mut native_out = Vec::new();
    // Each Antrea-native object's key and position in the file, for `duplicates_in_file`.
    let mut native_at: Vec<(usize, NativeKey)> = Vec::new();
    let mut pieces = Pieces::new();
    let mut unreported = 0usize;
    for (i, doc) in docs.into_iter().enumerate() {
        let (doc, piece) = match doc {
            Doc::Unchanged { key, piece } => {
                // In range: `documents` checked it.
                let slot = match piece.slot {
                    Slot::Native(at) => {
                        native_out.extend(old_native.get(at).cloned());
                        native_at.extend(old_native.get(at).map(|o| (i, native_key(o))));
                        Slot::Native(native_out.len() - 1)
                    }
                    Slot::Controlplane(at) => {
                        out.extend(old.get(at).cloned());
                        Slot::Controlplane(out.len() - 1)
                    }
                };
                pieces.insert(key, Piece { slot, ..piece });
                continue;
            }
            Doc::Parsed { value, piece } => (value, piece),
        };
        let (key, decoded) = match decode_object(doc) {
            Decoded::Controlplane { key, object } => (key, object),
            Decoded::Native(doc) => {
                let key = native_raw_key(&doc);
                // What a cluster would refuse but the agent enforces (a field the CRD schema
                // lacks, a name that is not a DNS name): logged once per read of the file, as
                // `translate` prints it; not an error, since the object is enforced.
                let cluster_warnings = crate::policy::native::cluster_warnings(&doc);
                match decode_native(doc) {
                    Ok(object) => {
                        for warning in cluster_warnings {
                            tracing::warn!("policy file {}: object {}: {warning}", path.display(), i + 1);
                        }
                        if let Some((key, elements)) = piece {
                            let slot = Slot::Native(native_out.len());
                            pieces.insert(key, Piece { elements, slot });
                        }
                        native_at.push((i, native_key(&object)));
                        native_out.push(Arc::new(object))
                    }
                    Err(msg) => {
                        let previous = key.and_then(|k| old_native.iter().find(|o| native_key(o) == k));
                        report_bad_object(
                            errors,
                            &mut unreported,
                            path,
                            i,
                            &msg.to_string(),
                            previous.is_some(),
                        );
                        native_at.extend(previous.map(|o| (i, native_key(o))));
                        native_out.extend(previous.cloned());
                    }
                }
                continue;
            }
        };
        let clean_before = errors.len();
        let loaded = decoded.and_then(|obj| match obj.kind() {
            Kind::AddressGroupPatch | Kind::AppliedToGroupPatch => Err(format!(
                "{} {:?}: patches cannot be loaded from files (write the whole group)",
                obj.kind(),
                obj.metadata().name
            )),
            _ => {
                // A member left out of its group is reported; the group still loads.
                for note in crate::policy::controlplane::validate::dropped_members(&obj) {
                    errors.push(format!(
                        "policy file {}: object {}: {note}",
                        path.display(),
                        i + 1
                    ));
                }
                obj.validate().map_err(|e| e.to_string())
            }
        });
        match loaded {
            Ok(object) => {
                // Without a note on a dropped member: taking it over later reports nothing.
                if let Some((key, elements)) = piece.filter(|_| errors.len() == clean_before) {
                    let slot = Slot::Controlplane(out.len());
                    pieces.insert(key, Piece { elements, slot });
                }
                out.push(object)
            }
            Err(msg) => {
                let previous = key.and_then(|k| old.iter().find(|o| key_of(o) == k));
                report_bad_object(errors, &mut unreported, path, i, &msg, previous.is_some());
                out.extend(previous.cloned());
            }
        }
    }
    if unreported > 0 {
        errors.push(format!(
            "policy file {}: {unreported} more objects are invalid (only the first \
             {MAX_OBJECT_ERRORS_PER_FILE} are listed)",
            path.display()
        ));
    }
    // 100,000 invalid objects must not leave a 100,000-slot vector behind.
    out.shrink_to_fit();
    // Only a file that loads without errors removes objects: an object whose kind or name was
    // garbled, or that vanished from a half-broken file, stays in force as last loaded.
    if !errors.is_empty() {
        let present: std::collections::BTreeSet<ObjectKey> = out.iter().map(key_of).collect();
        let missing: Vec<ValidObject> = old
            .into_iter()
            .filter(|o| !present.contains(&key_of(o)))
            .collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing
                .iter()
                .map(|o| {
                    let (kind, name) = key_of(o);
                    format!("{kind} {name}")
                })
                .collect();
            errors.push(format!(
                "policy file {}: keeping {} as last loaded until the file loads without errors",
                path.display(),
                names.join(", ")
            ));
            out.extend(missing);
        }
        let present: std::collections::BTreeSet<NativeKey> =
            native_out.iter().map(|o| native_key(o)).collect();
        let missing: Vec<Arc<NativeObject>> = old_native
            .into_iter()
            .filter(|o| !present.contains(&native_key(o)))
            .collect();
        if !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|o| o.describe()).collect();
            errors.push(format!(
                "policy file {}: keeping {} as last loaded until the file loads without errors",
                path.display(),
                names.join(", ")
            ));
            native_out.extend(missing);
        }
    }
    // A warning, not an error: the last definition is used (and the file's other objects
    // removed as usual).
    errors.extend(super::native_policies::duplicates_in_file(path, &native_at));
    (out, native_out, pieces)
}

#[cfg(test)]
mod tests;
