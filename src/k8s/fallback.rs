//! The on-disk fallback store of controlplane policy objects (antrea-apis.md §3.6): the last
//! NetworkPolicies, AppliedToGroups and AddressGroups received from antrea-controller (after
//! patches), so that an agent restarted while the controller is unreachable still enforces them.
//!
//! Layout: `<root>/{network-policies,applied-to-groups,address-groups}/<encoded name>.json`, one
//! object per file, in the controller's JSON. `<root>` is normally `<stateDir>/networkpolicy`.
//! Names are opaque and may contain `/` or any byte, so file names encode them (see
//! [`file_name`]); the object's own name, not its file name, is authoritative when loading.
//!
//! Every write is a temporary file renamed into place, so a crash leaves either the old or the
//! new version of each file, never a torn one. A kind's directory exists once a snapshot of that
//! kind was saved: a missing directory means "nothing saved", which is not the same as "saved,
//! empty". Unlike the Go agent, a deleted NetworkPolicy's file is removed (runtime spec §10 D6),
//! so a deleted policy cannot come back from the fallback.

use crate::policy::controlplane::Validate as _;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::policy::controlplane::{ControlplaneObject, Kind, ValidObject};

/// Longest encoded name used as is; longer ones are shortened with a hash (NAME_MAX is 255).
const MAX_PLAIN_NAME: usize = 200;

/// Why the fallback store could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FallbackError {
    #[error("fallback store {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("fallback store: {kind} is not a kind the store keeps")]
    Kind { kind: Kind },
    #[error("fallback store: cannot encode {kind} {name:?}: {message}")]
    Encode {
        kind: Kind,
        name: String,
        message: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> FallbackError + '_ {
    move |source| FallbackError::Io {
        path: path.to_owned(),
        source,
    }
}

/// One object read back from the store.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadedObject {
    pub path: PathBuf,
    /// As stored (the controller's JSON).
    pub wire: Value,
    pub valid: ValidObject,
}

/// What one kind's directory holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadedKind {
    /// Sorted by file name.
    pub objects: Vec<LoadedObject>,
    /// One line per file that could not be used, naming the file and the problem.
    pub errors: Vec<String>,
}

/// The fallback store rooted at one directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FallbackStore {
    root: PathBuf,
}

/// The file name (without directory) that holds the object named `name`.
///
/// Bytes `A-Z a-z 0-9 - _ .` are kept, except a leading `.` (so no name maps to `.`, `..` or a
/// hidden file, which this store uses for temporary files); every other byte is `%XX`. An
/// encoding longer than 200 bytes is cut and suffixed with `~` and the SHA-1 of the name (`~`
/// never appears in an encoding, so this cannot collide with a short name). Then `.json`.
pub fn file_name(name: &str) -> String {
    let mut encoded = String::with_capacity(name.len());
    for (i, b) in name.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if plain {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    if encoded.len() > MAX_PLAIN_NAME {
        // The encoding is ASCII, so any byte index is a char boundary.
        encoded.truncate(MAX_PLAIN_NAME - 41);
        encoded.push('~');
        encoded.push_str(&sha1_smol::Sha1::from(name.as_bytes()).hexdigest());
    }
    encoded.push_str(".json");
    encoded
}

impl FallbackStore {
    /// A store whose kind directories are directly under `root` (e.g.
    /// `/var/lib/antrea-vm-agent/networkpolicy`). Nothing is created until the first write.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        FallbackStore { root: root.into() }
    }

    /// The store under `<state_dir>/networkpolicy`.
    pub fn in_state_dir(state_dir: &Path) -> Self {
        FallbackStore::new(state_dir.join("networkpolicy"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The directory of `kind` (NetworkPolicy, AppliedToGroup or AddressGroup).
    pub fn kind_dir(&self, kind: Kind) -> Result<PathBuf, FallbackError> {
        let sub = match kind {
            Kind::NetworkPolicy => "network-policies",
            Kind::AppliedToGroup => "applied-to-groups",
            Kind::AddressGroup => "address-groups",
            other => return Err(FallbackError::Kind { kind: other }),
        };
        Ok(self.root.join(sub))
    }

    fn ensure_dir(&self, kind: Kind) -> Result<PathBuf, FallbackError> {
        let dir = self.kind_dir(kind)?;
        // Policies describe the node's defences: readable by root only.
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .map_err(io_err(&dir))?;
        Ok(dir)
    }

    fn write_file(dir: &Path, kind: Kind, name: &str, object: &Value) -> Result<String, FallbackError> {
        let file = file_name(name);
        let text = serde_json::to_vec(object).map_err(|e| FallbackError::Encode {
            kind,
            name: name.to_owned(),
            message: e.to_string(),
        })?;
        let tmp = dir.join(format!(".{file}.tmp"));
        let target = dir.join(&file);
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        f.write_all(&text).map_err(io_err(&tmp))?;
        drop(f);
        fs::rename(&tmp, &target).map_err(io_err(&target))?;
        Ok(file)
    }

    /// Saves (adds or replaces) one object of `kind`.
    pub fn save(&self, kind: Kind, name: &str, object: &Value) -> Result<(), FallbackError> {
        let dir = self.ensure_dir(kind)?;
        Self::write_file(&dir, kind, name, object).map(|_| ())
    }

    /// Removes the object `name` of `kind` (absent is fine).
    pub fn remove(&self, kind: Kind, name: &str) -> Result<(), FallbackError> {
        let path = self.kind_dir(kind)?.join(file_name(name));
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_err(&path)(e)),
            _ => Ok(()),
        }
    }

    /// Makes `kind`'s directory hold exactly `objects` (name, JSON): writes each, then removes
    /// every other file. Each file is replaced atomically; the set as a whole is not (a crash
    /// midway leaves some old files next to the new ones, fixed by the next snapshot).
    pub fn replace<'a>(
        &self,
        kind: Kind,
        objects: impl IntoIterator<Item = (&'a str, &'a Value)>,
    ) -> Result<(), FallbackError> {
        let dir = self.ensure_dir(kind)?;
        let mut keep = std::collections::BTreeSet::new();
        for (name, object) in objects {
            keep.insert(Self::write_file(&dir, kind, name, object)?);
        }
        for entry in fs::read_dir(&dir).map_err(io_err(&dir))? {
            let entry = entry.map_err(io_err(&dir))?;
            let file = entry.file_name();
            if file.to_str().is_some_and(|f| keep.contains(f)) {
                continue;
            }
            let path = entry.path();
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io_err(&path)(e)),
                _ => {}
            }
        }
        Ok(())
    }

    /// Reads `kind`'s directory: `Ok(None)` if nothing was ever saved for it. A file that cannot
    /// be read, parsed or validated, or holds another kind, is reported in `errors` and skipped.
    pub fn load(&self, kind: Kind) -> Result<Option<LoadedKind>, FallbackError> {
        let dir = self.kind_dir(kind)?;
        let entries = match fs::read_dir(&dir) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            other => other.map_err(io_err(&dir))?,
        };
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(io_err(&dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            // Hidden files are this store's temporaries (left by a crash).
            if !name.starts_with('.') && name.ends_with(".json") {
                paths.push(entry.path());
            }
        }
        paths.sort();
        let mut loaded = LoadedKind::default();
        for path in paths {
            match load_file(&path, kind) {
                Ok((object, notes)) => {
                    loaded.objects.push(object);
                    loaded.errors.extend(
                        notes
                            .into_iter()
                            .map(|note| format!("fallback file {}: {note}", path.display())),
                    );
                }
                Err(problem) => loaded
                    .errors
                    .push(format!("fallback file {}: {problem}", path.display())),
            }
        }
        Ok(Some(loaded))
    }
}

/// The object in `path`, and what lenient validation left out of it.
fn load_file(path: &Path, kind: Kind) -> Result<(LoadedObject, Vec<String>), String> {
    let text = fs::read(path).map_err(|e| format!("cannot read: {e}"))?;
    let wire: Value = serde_json::from_slice(&text).map_err(|e| format!("not JSON: {e}"))?;
    let object = ControlplaneObject::from_value(wire.clone()).map_err(|e| e.to_string())?;
    if object.kind() != kind {
        return Err(format!("holds a {}, expected a {kind}", object.kind()));
    }
    let valid = object.validate().map_err(|e| e.to_string())?;
    let notes = crate::policy::controlplane::validate::dropped_members(&object);
    Ok((
        LoadedObject {
            path: path.to_owned(),
            wire,
            valid,
        },
        notes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use antrea_controlplane::testdata;
    use serde_json::json;

    const NP: &str = testdata::NP_ANNP1;
    const AG: &str = testdata::AG;

    fn ag(name: &str) -> Value {
        let mut v: Value = serde_json::from_str(AG).unwrap();
        v["metadata"]["name"] = json!(name);
        v
    }

    fn names(loaded: &LoadedKind) -> Vec<String> {
        loaded
            .objects
            .iter()
            .map(|o| match &o.valid {
                ValidObject::AddressGroup(g) | ValidObject::AppliedToGroup(g) => g.name.clone(),
                ValidObject::NetworkPolicy(p) => p.name.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect()
    }

    #[test]
    fn file_names_encode_any_name_and_stay_short() {
        assert_eq!(file_name("9a47b91d-76f1"), "9a47b91d-76f1.json");
        assert_eq!(file_name("vm-ns/web.db"), "vm-ns%2Fweb.db.json");
        assert_eq!(file_name(".."), "%2E..json");
        assert_eq!(file_name("a b%~é"), "a%20b%25%7E%C3%A9.json");
        assert_eq!(file_name(""), ".json");
        let long = "x/".repeat(200);
        let f = file_name(&long);
        assert!(f.len() <= 255 && f.contains('~'), "{f}");
        assert_ne!(f, file_name(&"x/".repeat(199)));
    }

    #[test]
    fn save_replace_remove_and_load_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FallbackStore::in_state_dir(tmp.path());
        assert_eq!(store.root(), tmp.path().join("networkpolicy"));
        assert_eq!(store.load(Kind::AddressGroup).unwrap(), None);

        store
            .replace(Kind::AddressGroup, [("ns/g1", &ag("ns/g1")), ("g2", &ag("g2"))])
            .unwrap();
        let loaded = store.load(Kind::AddressGroup).unwrap().unwrap();
        assert_eq!(names(&loaded), ["g2", "ns/g1"]);
        assert!(loaded.errors.is_empty());
        assert_eq!(loaded.objects[1].wire, ag("ns/g1"));
        assert_eq!(
            loaded.objects[1].path,
            store.kind_dir(Kind::AddressGroup).unwrap().join("ns%2Fg1.json")
        );

        store.save(Kind::AddressGroup, "g3", &ag("g3")).unwrap();
        store.remove(Kind::AddressGroup, "ns/g1").unwrap();
        store.remove(Kind::AddressGroup, "never-saved").unwrap();
        assert_eq!(
            names(&store.load(Kind::AddressGroup).unwrap().unwrap()),
            ["g2", "g3"]
        );

        // Replace drops what is not in the new set; an empty replace leaves an empty, existing dir.
        store.replace(Kind::AddressGroup, [("g3", &ag("g3"))]).unwrap();
        assert_eq!(names(&store.load(Kind::AddressGroup).unwrap().unwrap()), ["g3"]);
        store.replace(Kind::AddressGroup, []).unwrap();
        assert_eq!(
            store.load(Kind::AddressGroup).unwrap(),
            Some(LoadedKind::default())
        );

        let np: Value = serde_json::from_str(NP).unwrap();
        let np_name = np["metadata"]["name"].as_str().unwrap().to_owned();
        store.save(Kind::NetworkPolicy, &np_name, &np).unwrap();
        assert_eq!(
            names(&store.load(Kind::NetworkPolicy).unwrap().unwrap()),
            [np_name]
        );
        // Kinds are separate.
        assert_eq!(store.load(Kind::AppliedToGroup).unwrap(), None);
        assert!(matches!(
            store.save(Kind::AddressGroupPatch, "x", &json!({})),
            Err(FallbackError::Kind { .. })
        ));

        use std::os::unix::fs::PermissionsExt;
        let dir = store.kind_dir(Kind::NetworkPolicy).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        let file = dir.join(file_name(&np_name_of(&np)));
        assert_eq!(fs::metadata(file).unwrap().permissions().mode() & 0o777, 0o600);
    }

    fn np_name_of(v: &Value) -> String {
        v["metadata"]["name"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_corrupt_file_is_reported_by_name_and_the_rest_loads() {
        let tmp = tempfile::tempdir().unwrap();
        let store = FallbackStore::new(tmp.path());
        store
            .replace(Kind::AddressGroup, [("good", &ag("good"))])
            .unwrap();
        let dir = store.kind_dir(Kind::AddressGroup).unwrap();
        fs::write(dir.join("torn.json"), "{\"kind\": \"AddressGr").unwrap();
        fs::write(dir.join("wrong.json"), NP).unwrap();
        let mut bad_member = ag("bad");
        bad_member["groupMembers"][0]["ips"] = json!(["AAE="]);
        fs::write(dir.join("bad.json"), bad_member.to_string()).unwrap();
        // Leftover temporaries and other files are ignored.
        fs::write(dir.join(".x.json.tmp"), "garbage").unwrap();
        fs::write(dir.join("README"), "garbage").unwrap();

        let loaded = store.load(Kind::AddressGroup).unwrap().unwrap();
        // A bad member is left out of its group, which still loads (the controller is lenient).
        assert_eq!(names(&loaded), ["bad", "good"]);
        assert_eq!(loaded.errors.len(), 3, "{:?}", loaded.errors);
        let torn = dir.join("torn.json");
        assert!(loaded
            .errors
            .iter()
            .any(|e| e.starts_with(&format!("fallback file {}: not JSON", torn.display()))));
        assert!(loaded
            .errors
            .iter()
            .any(|e| e.contains("wrong.json: holds a NetworkPolicy, expected a AddressGroup")));
        assert!(
            loaded.errors.iter().any(|e| e
                .contains("bad.json: AddressGroup bad: groupMembers[0] (externalEntity")
                && e.contains("dropped: groupMembers[0].ips[0]")),
            "{:?}",
            loaded.errors
        );

        // The next replace cleans up everything that is not in the set.
        store
            .replace(Kind::AddressGroup, [("good", &ag("good"))])
            .unwrap();
        let mut left: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["good.json"]);
    }
}
