//! `antrea-vm-agent translate DIR|FILE… [--external-node FILE]`: runs the local controller on
//! Antrea-native policy files (the same files `standalone.policyDir` accepts) and prints the
//! controlplane objects it produces, as YAML documents, for review in CI; `compile --policies`
//! uses the same reading. The objects are told apart, decoded and checked as the agent does
//! (`native::is_native`, `native::decode`), and translated by the agent's own local controller
//! (`sources::native_policies::translate_files`: the same duplicates, conflicts and uid names),
//! so that what passes here is what the agent enforces. Valid controlplane objects in the input
//! are not translated and are left out of the output (they are already in that form); invalid
//! ones are errors, as they are for the agent.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::InputLimits;
use crate::k8s::external_node::{local_entities, ExternalNodeObject};
use crate::policy::controlplane::{ControlplaneObject, Kind, Validate as _, API_VERSION};
use crate::policy::native::{self, NativeObject, Translation};
use crate::sources::bounded::parse_values;
use crate::sources::native_policies::{duplicates_in_file, translate_files};
use crate::sources::policy_dir::{flatten, is_policy_file};

/// What the input files hold, translated, with every problem naming its file.
#[derive(Debug, Default)]
pub struct TranslatedFiles {
    pub translation: Translation,
    /// Problems reading or decoding (the translation's own are in `translation.errors`).
    pub errors: Vec<String>,
    /// What the agent reports too but still enforces as a cluster would: an object defined
    /// twice in one file (the last definition is used) or in several files (the last file's, in
    /// path order), policies sharing a `metadata.uid` (all enforced, under distinct names).
    pub warnings: Vec<String>,
    /// What the agent enforces although a cluster would refuse the object as written
    /// (`native::cluster_warnings`: a field the Go type has and the CRD schema lacks, a name
    /// the apiserver refuses): said by `translate` and `compile` only, for review in CI.
    pub cluster_warnings: Vec<String>,
    /// How many valid controlplane objects the input held (not translated).
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
    let mut local = Vec::new();
    if let Some(path) = external_node {
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_norway::from_str::<ExternalNodeObject>(&t).map_err(|e| e.to_string()))
        {
            Ok(node) => local = local_entities(&node),
            Err(e) => out
                .errors
                .push(format!("ExternalNode file {}: {e}", path.display())),
        }
    }
    let mut native_files: Vec<(PathBuf, Vec<NativeObject>)> = Vec::new();
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
            let mut objects = Vec::new();
            let mut positions = Vec::new();
            for (i, value) in values.into_iter().enumerate() {
                // Told apart as the agent tells them (`is_native`): an object of another Antrea
                // API group is refused by `decode`, never counted as controlplane.
                let decoded = if native::is_native(&value) {
                    let warnings = native::cluster_warnings(&value);
                    let decoded = native::decode(value);
                    if decoded.is_ok() {
                        out.cluster_warnings.extend(
                            warnings
                                .into_iter()
                                .map(|w| format!("policy file {}: object {}: {w}", file.display(), i + 1)),
                        );
                    }
                    decoded.map(Some).map_err(|e| e.to_string())
                } else {
                    controlplane_object(value).map(|()| None)
                };
                match decoded {
                    Ok(Some(object)) => {
                        positions.push((i, native::native_key(&object)));
                        objects.push(object);
                    }
                    Ok(None) => out.controlplane_objects += 1,
                    Err(e) => {
                        out.errors
                            .push(format!("policy file {}: object {}: {e}", file.display(), i + 1))
                    }
                }
            }
            out.warnings.extend(duplicates_in_file(&file, &positions));
            if !objects.is_empty() {
                native_files.push((file, objects));
            }
        }
    }
    let (translation, errors, warnings) = translate_files(native_files, &local);
    out.translation = translation;
    out.translation.errors = errors;
    out.warnings.extend(warnings);
    out
}

/// Checks a controlplane object as the agent loads one from a policy file: decoded, not a
/// patch, valid.
fn controlplane_object(value: Value) -> Result<(), String> {
    let object = ControlplaneObject::from_value(value).map_err(|e| e.to_string())?;
    if matches!(object.kind(), Kind::AddressGroupPatch | Kind::AppliedToGroupPatch) {
        return Err(format!(
            "{} {:?}: patches cannot be loaded from files (write the whole group)",
            object.kind(),
            object.metadata().name
        ));
    }
    object.validate().map(|_| ()).map_err(|e| e.to_string())
}

/// An object that cannot be printed as YAML.
#[derive(Debug, thiserror::Error)]
pub enum ToYamlError {
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    #[error(transparent)]
    Yaml(#[from] serde_norway::Error),
}

/// The objects as YAML documents, each with its `apiVersion` and `kind`.
pub fn to_yaml(objects: &[ControlplaneObject]) -> Result<String, ToYamlError> {
    let mut text = String::new();
    for object in objects {
        let mut value = object.to_value()?;
        if let Value::Object(map) = &mut value {
            map.insert("apiVersion".into(), API_VERSION.into());
            map.insert("kind".into(), object.kind().as_str().into());
        }
        text.push_str("---\n");
        text.push_str(&serde_norway::to_string(&value)?);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    //! `translate` against the running agent's reading of the same directory (the policy
    //! directory source's first snapshot): the same controlplane objects, the same problems.

    use std::path::Path;
    use std::sync::Arc;
    use std::time::Duration;

    use proptest::prelude::*;

    use super::*;
    use crate::policy::controlplane::{Group, Policy, ValidObject};
    use crate::sources::policy_dir::{PolicyDirSource, PolicySnapshot};

    const NODE: &str = "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
                        metadata: {name: vm1, namespace: vm-ns, labels: {role: db}}\n\
                        spec: {interfaces: [{name: eth0, ips: [10.99.0.2]}]}\n";

    /// A hand-written controlplane object, in every generated directory.
    const CONTROLPLANE: &str = "apiVersion: controlplane.antrea.io/v1beta2\nkind: AppliedToGroup\n\
                                metadata: {name: cp-atg}\n\
                                groupMembers: [{externalEntity: {name: vm9, namespace: vm-ns}}]\n";

    /// The documents a generated file picks from: the corners of issue's items 3 to 6 (copies,
    /// uid clashes, `toServices: []`, an old API group) among ordinary objects.
    const POOL: [&str; 12] = [
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p1, uid: u1}\n\
         spec: {priority: 5, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         ingress: [{action: Drop, from: [{externalEntitySelector: {matchLabels: {app: web}}}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p1, uid: u1}\n\
         spec: {priority: 6, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         ingress: [{action: Drop, from: [{externalEntitySelector: {matchLabels: {app: api}}}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p2, uid: u1}\n\
         spec: {priority: 7, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         egress: [{action: Drop, to: [{ipBlock: {cidr: 10.1.0.0/16}}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: p3, namespace: vm-ns}\n\
         spec: {priority: 5, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         egress: [{action: Drop, toServices: []}]}\n",
        "apiVersion: security.antrea.io/v1alpha1\nkind: ClusterNetworkPolicy\nmetadata: {name: old}\n\
         spec: {priority: 5, appliedTo: [{podSelector: {}}], ingress: [{action: Drop}]}\n",
        "apiVersion: crd.antrea.io/v1alpha2\nkind: ExternalEntity\n\
         metadata: {name: h1, namespace: vm-ns, labels: {app: web}}\nspec: {endpoints: [{ip: 10.0.0.1}]}\n",
        "apiVersion: crd.antrea.io/v1alpha2\nkind: ExternalEntity\n\
         metadata: {name: h1, namespace: vm-ns, labels: {app: api}}\nspec: {endpoints: [{ip: 10.0.0.1}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: NetworkPolicy\nmetadata: {name: p4, namespace: vm-ns}\n\
         spec: {priority: 5, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         egress: [{action: Drop, toServices: [], ports: [{port: 53}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p5}\n\
         spec: {priority: 5, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         ingress: [{action: Allow, from: [{group: cg1}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterGroup\nmetadata: {name: cg1}\n\
         spec: {externalEntitySelector: {matchLabels: {app: web}}}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: ClusterNetworkPolicy\nmetadata: {name: p6}\n\
         spec: {priority: 5, tier: t1, appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}],\n\
         ingress: [{action: Drop, from: [{externalEntitySelector: {matchLabels: {app: db}}}]}]}\n",
        "apiVersion: crd.antrea.io/v1beta1\nkind: Tier\nmetadata: {name: t1}\nspec: {priority: 100}\n",
    ];

    /// The agent's first snapshot of `dir`, as the running agent reads it.
    fn agent(dir: &Path, node: &Path) -> PolicySnapshot {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let source = PolicyDirSource::new(dir, Duration::from_secs(60)).with_external_node_file(node);
            let mut events = source.subscribe();
            futures::StreamExt::next(&mut events)
                .await
                .expect("a first snapshot")
        })
    }

    /// A directory of `files` (name, documents) and the ExternalNode file next to it.
    fn directory(files: &[(&str, Vec<&str>)]) -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("policies");
        std::fs::create_dir(&dir).expect("mkdir");
        for (name, docs) in files {
            std::fs::write(dir.join(name), docs.join("---\n")).expect("write");
        }
        let node = tmp.path().join("node.yaml");
        std::fs::write(&node, NODE).expect("write");
        (tmp, dir, node)
    }

    type Objects = (Vec<Arc<Policy>>, Vec<Arc<Group>>, Vec<Arc<Group>>);

    /// What `translate` gives, validated as the agent validates it, and every line it reports
    /// (errors and warnings), sorted.
    fn translated(dir: &Path, node: &Path) -> (Objects, Vec<String>) {
        let out = translate_paths(&[dir.to_path_buf()], Some(node));
        let mut lines = out.all_errors();
        lines.extend(out.warnings.iter().cloned());
        lines.sort();
        let (mut policies, mut ags, mut atgs) = (Vec::new(), Vec::new(), Vec::new());
        for object in out.translation.objects() {
            match object.validate().expect("translate's output validates") {
                ValidObject::NetworkPolicy(p) => policies.push(p),
                ValidObject::AddressGroup(g) => ags.push(g),
                ValidObject::AppliedToGroup(g) => atgs.push(g),
                other => panic!("unexpected {other:?}"),
            }
        }
        ((policies, ags, atgs), lines)
    }

    /// The agent's snapshot without the hand-written controlplane object, and its lines sorted.
    /// The rule notes (carried to the policies' status) are left out: `translate` says them as
    /// lines, which are compared.
    fn enforced(mut s: PolicySnapshot) -> (Objects, Vec<String>) {
        for p in &mut s.network_policies {
            std::sync::Arc::make_mut(p).rule_notes.clear();
        }
        let mut lines = s.errors;
        lines.sort();
        let atgs = s
            .applied_to_groups
            .into_iter()
            .filter(|g| g.name != "cp-atg")
            .collect();
        ((s.network_policies, s.address_groups, atgs), lines)
    }

    #[test]
    fn an_old_api_group_fails_translate_as_it_fails_the_agent() {
        let (_tmp, dir, node) = directory(&[("old.yaml", vec![POOL[4]]), ("z.yaml", vec![CONTROLPLANE])]);
        let out = translate_paths(std::slice::from_ref(&dir), Some(&node));
        assert_eq!(out.controlplane_objects, 1, "only the real controlplane object");
        assert_eq!(
            out.all_errors(),
            [format!(
                "policy file {}: object 1: ClusterNetworkPolicy old: apiVersion: \
                 \"security.antrea.io/v1alpha1\" is not served by Antrea (Antrea-native policies are \
                 crd.antrea.io/v1beta1, ExternalEntities crd.antrea.io/v1alpha2); refused, not enforced",
                dir.join("old.yaml").display()
            )]
        );
        assert_eq!(agent(&dir, &node).errors, out.all_errors());
    }

    #[test]
    fn an_object_twice_in_one_file_is_its_last_definition_with_a_warning() {
        let (_tmp, dir, node) = directory(&[("a.yaml", vec![POOL[0], POOL[5], POOL[1]])]);
        let out = translate_paths(std::slice::from_ref(&dir), Some(&node));
        assert_eq!(out.all_errors(), Vec::<String>::new());
        assert_eq!(
            out.warnings,
            [format!(
                "policy file {}: objects 1 and 3 both define ClusterNetworkPolicy p1: the last \
                 (object 3) is used, as `kubectl apply -f` leaves it",
                dir.join("a.yaml").display()
            )]
        );
        assert_eq!(out.translation.network_policies.len(), 1);
        assert_eq!(out.translation.network_policies[0].priority, Some(6.0));
        let s = agent(&dir, &node);
        assert_eq!(s.errors, out.warnings);
        assert_eq!(s.network_policies.len(), 1);
        assert_eq!(s.network_policies[0].priority, Some(6.0));
    }

    /// An ACNP's `externalEntitySelector` is in its Go type but not in its CRD schema: the agent
    /// enforces it, `translate` says a cluster would refuse it (strict field validation), and
    /// the agent's own reading reports nothing, so the two still agree on errors.
    #[test]
    fn a_field_the_crd_schema_lacks_is_translated_with_a_cluster_warning() {
        let (_tmp, dir, node) = directory(&[("a.yaml", vec![POOL[0]])]);
        let out = translate_paths(std::slice::from_ref(&dir), Some(&node));
        assert_eq!(out.all_errors(), Vec::<String>::new());
        assert!(out.warnings.is_empty());
        assert_eq!(out.translation.network_policies.len(), 1);
        let prefix = format!(
            "policy file {}: object 1: ClusterNetworkPolicy p1: a cluster would refuse this object: \
             strict decoding error: unknown field",
            dir.join("a.yaml").display()
        );
        assert_eq!(out.cluster_warnings.len(), 2, "{:#?}", out.cluster_warnings);
        assert!(out.cluster_warnings[0]
            .starts_with(&format!("{prefix} \"spec.appliedTo[0].externalEntitySelector\"")));
        assert!(out.cluster_warnings[1].starts_with(&format!(
            "{prefix} \"spec.ingress[0].from[0].externalEntitySelector\""
        )));
        assert!(agent(&dir, &node).errors.is_empty());
    }

    fn file() -> impl Strategy<Value = Vec<usize>> {
        proptest::collection::vec(0..POOL.len(), 0..4)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// One translator: over generated directories, `translate` and the agent give the same
        /// controlplane objects and report the same problems.
        #[test]
        fn translate_and_the_agent_agree_on_every_directory(a in file(), b in file(), c in file()) {
            let pick = |docs: &Vec<usize>| docs.iter().map(|i| POOL[*i]).collect::<Vec<_>>();
            let (_tmp, dir, node) = directory(&[
                ("a.yaml", pick(&a)),
                ("b.yaml", pick(&b)),
                ("c.yaml", pick(&c)),
                ("z.yaml", vec![CONTROLPLANE]),
            ]);
            let from_translate = translated(&dir, &node);
            let from_agent = enforced(agent(&dir, &node));
            prop_assert_eq!(from_translate, from_agent);
        }
    }
}
