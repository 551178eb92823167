//! `antrea-vm-agent translate DIR|FILE… [--external-node FILE]`: runs the local controller on
//! Antrea-native policy files (the same files `standalone.policyDir` accepts) and prints the
//! controlplane objects it produces, as YAML documents, for review in CI; `compile --policies`
//! uses the same reading. Controlplane objects in the input are not translated and are left
//! out of the output (they are already in that form).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::InputLimits;
use crate::k8s::external_node::{local_entities, ExternalNodeObject};
use crate::policy::controlplane::{ControlplaneObject, API_VERSION};
use crate::policy::native::{self, Inputs, Translation};
use crate::sources::bounded::parse_values;
use crate::sources::policy_dir::{flatten, is_policy_file};

/// What the input files hold, translated, with every problem naming its file.
#[derive(Debug, Default)]
pub struct TranslatedFiles {
    pub translation: Translation,
    /// Problems reading or decoding (the translation's own are in `translation.errors`).
    pub errors: Vec<String>,
    /// How many controlplane objects the input held (not translated).
    pub controlplane_objects: usize,
}

impl TranslatedFiles {
    pub fn all_errors(&self) -> Vec<String> {
        self.errors
            .iter()
            .chain(&self.translation.errors)
            .cloned()
            .collect()
    }
}

/// The policy files of `path`: the file itself, or the directory's `*.yaml`, `*.yml`, `*.json`
/// (hidden files ignored), sorted.
fn policy_files(path: &Path) -> Result<Vec<PathBuf>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", path.display()))?;
        if entry.file_name().to_str().is_some_and(is_policy_file) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Reads `paths` (files or directories) and the optional ExternalNode file, and translates.
pub fn translate_paths(paths: &[PathBuf], external_node: Option<&Path>) -> TranslatedFiles {
    let limits = InputLimits::default();
    let mut out = TranslatedFiles::default();
    let mut inputs = Inputs::default();
    if let Some(path) = external_node {
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_norway::from_str::<ExternalNodeObject>(&t).map_err(|e| e.to_string()))
        {
            Ok(node) => inputs.local_entities = local_entities(&node),
            Err(e) => out
                .errors
                .push(format!("ExternalNode file {}: {e}", path.display())),
        }
    }
    for path in paths {
        let files = match policy_files(path) {
            Ok(f) => f,
            Err(e) => {
                out.errors.push(e);
                continue;
            }
        };
        for file in files {
            let text = match std::fs::read_to_string(&file) {
                Ok(t) => t,
                Err(e) => {
                    out.errors.push(format!("policy file {}: {e}", file.display()));
                    continue;
                }
            };
            let json = file.extension().is_some_and(|e| e.eq_ignore_ascii_case("json"));
            let docs = match parse_values(&text, json, &limits) {
                Ok(d) => d,
                Err(e) => {
                    out.errors.push(format!("policy file {}: {e}", file.display()));
                    continue;
                }
            };
            let mut values = Vec::new();
            docs.into_iter().for_each(|d| flatten(d, &mut values));
            for (i, value) in values.into_iter().enumerate() {
                if !native::is_native(&value) {
                    out.controlplane_objects += 1;
                    continue;
                }
                match native::decode(value) {
                    Ok(object) => inputs
                        .objects
                        .push((format!("policy file {}", file.display()), object)),
                    Err(e) => {
                        out.errors
                            .push(format!("policy file {}: object {}: {e}", file.display(), i + 1))
                    }
                }
            }
        }
    }
    out.translation = native::translate(&inputs);
    out
}

/// The objects as YAML documents, each with its `apiVersion` and `kind`.
pub fn to_yaml(objects: &[ControlplaneObject]) -> Result<String, String> {
    let mut text = String::new();
    for object in objects {
        let mut value = object.to_value().map_err(|e| e.to_string())?;
        if let Value::Object(map) = &mut value {
            map.insert("apiVersion".into(), API_VERSION.into());
            map.insert("kind".into(), object.kind().as_str().into());
        }
        text.push_str("---\n");
        text.push_str(&serde_norway::to_string(&value).map_err(|e| e.to_string())?);
    }
    Ok(text)
}
