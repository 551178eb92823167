//! Tests of the policy directory source: the loader on in-memory directories (last good
//! versions, conflicts, Antrea-native objects) and the stream on real directories.

use super::*;

const NP: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: web}
appliedToGroups: [vm1]
priority: 5
tierPriority: 250
rules:
- direction: In
  from: {addressGroups: [front], ipBlocks: [{cidr: 10.0.0.0/8}]}
  services: [{protocol: TCP, port: 80}]
  action: Allow
";
const ATG: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: vm1}
groupMembers: [{externalEntity: {name: vm1, namespace: vm-ns}}]
";
const AG_JSON: &str = r#"[
  {"apiVersion": "controlplane.antrea.io/v1beta2", "kind": "AddressGroup",
   "metadata": {"name": "front"},
   "groupMembers": [{"externalEntity": {"name": "vm2", "namespace": "vm-ns"},
                     "ips": ["AAAAAAAAAAAAAP//rBBkBA=="]}]}
]"#;

/// The directory `/p` holding `list`, sorted by path as it is read.
fn files(list: &[(&str, &str)]) -> DirContent {
    let mut files: Vec<(PathBuf, Result<FileText, FileError>)> = list
        .iter()
        .map(|(n, t)| {
            (
                PathBuf::from(format!("/p/{n}")),
                Ok(FileText::new((*t).to_owned())),
            )
        })
        .collect();
    files.sort_by(|a, b| a.0.cmp(&b.0));
    DirContent::Files(files)
}

fn names(s: &PolicySnapshot) -> (Vec<&str>, Vec<&str>, Vec<&str>) {
    (
        s.network_policies.iter().map(|p| p.name.as_str()).collect(),
        s.address_groups.iter().map(|g| g.name.as_str()).collect(),
        s.applied_to_groups.iter().map(|g| g.name.as_str()).collect(),
    )
}

fn build(loader: &mut Loader, list: &[(&str, &str)]) -> PolicySnapshot {
    loader.build(Path::new("/p"), &files(list))
}

#[test]
fn yaml_documents_json_arrays_and_lists_load() {
    let mut l = Loader::default();
    let list = r#"{"kind": "AddressGroupList", "items": [
            {"kind": "AddressGroup", "metadata": {"name": "g2"}},
            {"kind": "AddressGroup", "metadata": {"name": "g3"}}]}"#;
    let s = build(
        &mut l,
        &[
            ("a.yaml", &format!("---\n{NP}---\n{ATG}---\n")),
            ("b.json", AG_JSON),
            ("c.json", list),
            ("empty.yml", ""),
        ],
    );
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(names(&s), (vec!["web"], vec!["front", "g2", "g3"], vec!["vm1"]));
    let rule = &s.network_policies[0].rules[0];
    assert_eq!(rule.peer.ip_blocks[0].cidr.to_string(), "10.0.0.0/8");
    assert_eq!(
        s.address_groups[0].members.values().next().unwrap().ips,
        ["172.16.100.4".parse::<std::net::IpAddr>().unwrap()]
    );
}

#[test]
fn a_bad_file_and_a_bad_object_do_not_block_the_others() {
    let mut l = Loader::default();
    let bad_object = format!(
        "{ATG}---\nkind: NetworkPolicy\nmetadata: {{name: broken}}\n\
             rules: [{{direction: In, services: [{{port: 90, endPort: 80}}]}}]\n"
    );
    let s = build(
        &mut l,
        &[
            ("a.yaml", NP),
            ("b.yaml", &bad_object),
            ("c.yaml", "kind: [unclosed\n"),
            ("d.yaml", "kind: Pod\nmetadata: {name: p}\n"),
            ("e.yaml", "kind: AddressGroupPatch\nmetadata: {name: front}\n"),
            (
                "f.json",
                "{\"kind\": \"AddressGroup\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"x\"}}",
            ),
        ],
    );
    assert_eq!(names(&s), (vec!["web"], vec![], vec!["vm1"]));
    assert_eq!(s.errors.len(), 5, "{:#?}", s.errors);
    assert_eq!(
        s.errors[0],
        "policy file /p/b.yaml: object 2: NetworkPolicy broken: \
             rules[0].services[0].endPort: 80 is less than port 90"
    );
    assert!(
        s.errors[1].starts_with("policy file /p/c.yaml: cannot parse: "),
        "{}",
        s.errors[1]
    );
    assert!(
        s.errors[2].starts_with("policy file /p/d.yaml: object 1: kind \"Pod\""),
        "{}",
        s.errors[2]
    );
    assert!(
        s.errors[3]
            .starts_with("policy file /p/e.yaml: object 1: AddressGroupPatch \"front\": patches cannot"),
        "{}",
        s.errors[3]
    );
    assert!(
        s.errors[4].starts_with("policy file /p/f.json: object 1: AddressGroup \"x\": apiVersion \"v1\""),
        "{}",
        s.errors[4]
    );
}

/// Enough files for a pass to parse them on several threads ([`parallel::PARALLEL_FROM_BYTES`]).
fn fleet(bad_every: usize) -> Vec<(String, String)> {
    (0..600)
        .map(|i| {
            let text = if bad_every > 0 && i % bad_every == 3 {
                format!("kind: [unclosed {i}\n")
            } else {
                NP.replace("name: web", &format!("name: p{i:04}"))
            };
            (format!("f{i:04}.yaml"), text)
        })
        .collect()
}

#[test]
fn a_large_pass_parsed_in_parallel_reads_as_one_parsed_in_order() {
    let mut l = Loader::default();
    let first = fleet(50);
    let list: Vec<(&str, &str)> = first.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let bytes: usize = list.iter().map(|(_, t)| t.len()).sum();
    assert!(
        bytes >= parallel::PARALLEL_FROM_BYTES,
        "{bytes} bytes: too few to parse in parallel"
    );
    let s = build(&mut l, &list);
    let bad: Vec<usize> = (0..600).filter(|i| i % 50 == 3).collect();
    let want: Vec<String> = (0..600)
        .filter(|i| !bad.contains(i))
        .map(|i| format!("p{i:04}"))
        .collect();
    assert_eq!(names(&s).0, want);
    // One error per bad file, in the files' order.
    let erred: Vec<String> = s
        .errors
        .iter()
        .map(|e| e.split(':').next().unwrap_or_default().to_string())
        .collect();
    let want: Vec<String> = bad
        .iter()
        .map(|i| format!("policy file /p/f{i:04}.yaml"))
        .collect();
    assert_eq!(erred, want, "{:#?}", s.errors);
    assert_eq!(l.parsed_bytes, bytes);
    // The next pass: the bad files fixed, every other file changed too (and in parallel again).
    let second: Vec<(String, String)> = fleet(0)
        .into_iter()
        .map(|(n, t)| (n, t.replace("priority: 5", "priority: 6")))
        .collect();
    let list: Vec<(&str, &str)> = second.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect();
    let s = build(&mut l, &list);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(s.network_policies.len(), 600);
    assert!(s.network_policies.iter().all(|p| p.priority == Some(6.0)));
}

#[test]
fn last_good_versions_are_kept_until_fixed_or_removed() {
    let mut l = Loader::default();
    let s = build(&mut l, &[("a.yaml", NP), ("b.yaml", ATG)]);
    assert!(s.errors.is_empty());
    let good = s.clone();

    // The policy becomes invalid: its last good version stays, with an error.
    let s = build(
        &mut l,
        &[("a.yaml", &NP.replace("port: 80", "port: 0")), ("b.yaml", ATG)],
    );
    assert_eq!(names(&s), names(&good));
    assert_eq!(s.network_policies, good.network_policies);
    assert_eq!(
        s.errors,
        [
            "policy file /p/a.yaml: object 1: NetworkPolicy web: rules[0].services[0].port: \
              0 is out of range (1-65535); keeping its last valid version"
        ]
    );
    // A half-written file keeps everything it held.
    let half = &NP[..NP.find("ipBlocks").unwrap()];
    let s = build(&mut l, &[("a.yaml", half), ("b.yaml", ATG)]);
    assert_eq!(s.network_policies, good.network_policies);
    assert!(
        s.errors[0].ends_with("; keeping the object last loaded from it"),
        "{:?}",
        s.errors
    );
    // Fixed: the new version loads.
    let s = build(
        &mut l,
        &[("a.yaml", &NP.replace("port: 80", "port: 8080")), ("b.yaml", ATG)],
    );
    assert!(s.errors.is_empty());
    assert_ne!(s.network_policies, good.network_policies);
    // Removed file: its objects go.
    let s = build(&mut l, &[("b.yaml", ATG)]);
    assert_eq!(names(&s), (vec![], vec![], vec!["vm1"]));
    // A file that was never good keeps nothing.
    let s = build(&mut l, &[("a.yaml", "kind: [\n"), ("b.yaml", ATG)]);
    assert!(s.network_policies.is_empty());
    assert!(!s.errors[0].contains("keeping"), "{:?}", s.errors);
}

#[test]
fn only_changed_files_are_parsed_again_and_their_errors_stay_reported() {
    let mut l = Loader::default();
    let other = NP.replace("name: web", "name: api");
    let bad = "kind: [\n";
    let s1 = build(&mut l, &[("a.yaml", NP), ("b.yaml", &other), ("c.yaml", bad)]);
    assert_eq!(s1.errors.len(), 1, "{:?}", s1.errors);

    // b.yaml changes: a.yaml's policy is the very same allocation (not parsed again), the
    // unchanged bad file is still reported, and the snapshot shares the loader's objects.
    let changed = other.replace("port: 80", "port: 81");
    let s2 = build(&mut l, &[("a.yaml", NP), ("b.yaml", &changed), ("c.yaml", bad)]);
    let by_name = |s: &PolicySnapshot, n: &str| {
        s.network_policies
            .iter()
            .find(|p| p.name == n)
            .cloned()
            .expect("policy present")
    };
    assert!(Arc::ptr_eq(&by_name(&s1, "web"), &by_name(&s2, "web")));
    assert!(!Arc::ptr_eq(&by_name(&s1, "api"), &by_name(&s2, "api")));
    assert_eq!(s2.errors, s1.errors);

    // Reading fails for a file that loaded before: its objects are kept and it is parsed
    // again once readable, even with the same text.
    let read_error = DirContent::Files(vec![
        (
            PathBuf::from("/p/a.yaml"),
            Err(FileError::Input(InputError::Io("permission denied".to_owned()))),
        ),
        (PathBuf::from("/p/b.yaml"), Ok(FileText::new(changed.clone()))),
    ]);
    let s3 = l.build(Path::new("/p"), &read_error);
    assert_eq!(names(&s3).0, ["api", "web"]);
    assert!(
        s3.errors[0].contains("cannot read: permission denied"),
        "{:?}",
        s3.errors
    );
    let s4 = build(&mut l, &[("a.yaml", NP), ("b.yaml", &changed)]);
    assert!(s4.errors.is_empty(), "{:?}", s4.errors);
    assert_eq!(names(&s4).0, ["api", "web"]);
}

#[test]
fn fingerprints_tell_text_changes_without_keeping_the_text() {
    let a = files(&[("a.yaml", NP)]).fingerprint();
    assert_eq!(a, files(&[("a.yaml", NP)]).fingerprint());
    assert_ne!(a, files(&[("a.yaml", &NP.replace("80", "81"))]).fingerprint());
    assert_ne!(a, files(&[("b.yaml", NP)]).fingerprint());
    assert_ne!(a, DirContent::Missing.fingerprint());
}

#[test]
fn a_name_defined_twice_is_the_last_definition_in_path_order_running_or_restarted() {
    let mut l = Loader::default();
    // Only z.yaml defines `web`: it is enforced.
    let s = build(&mut l, &[("z.yaml", NP)]);
    let z_version = s.network_policies.clone();
    // a.yaml (earlier in path order) defines it too, differently: z.yaml's version is used, with
    // one line naming both files.
    let other = NP.replace("action: Allow", "action: Drop");
    let s = build(&mut l, &[("a.yaml", &other), ("z.yaml", NP)]);
    assert_eq!(s.network_policies, z_version);
    assert_eq!(
        s.errors,
        [
            "policy files /p/a.yaml, /p/z.yaml: NetworkPolicy web is defined in more than one file: \
          the last definition, in /p/z.yaml (the last file in path order), is used"
        ]
    );
    // A restarted agent makes the same of the same directory.
    let fresh = build(&mut Loader::default(), &[("a.yaml", &other), ("z.yaml", NP)]);
    assert_eq!(fresh.network_policies, z_version);
    assert_eq!(fresh.errors, s.errors);
    // z.yaml changes its version during the conflict: the new one is used.
    let changed = NP.replace("priority: 5", "priority: 6");
    let s = build(&mut l, &[("a.yaml", &other), ("z.yaml", &changed)]);
    let alone = build(&mut Loader::default(), &[("x.yaml", &changed)]);
    assert_eq!(s.network_policies, alone.network_policies);
    // Resolved by removing it from z.yaml: a.yaml's version is the only one, enforced.
    let s = build(&mut l, &[("a.yaml", &other), ("z.yaml", ATG)]);
    assert!(s.errors.is_empty(), "{:?}", s.errors);
    let alone = build(&mut Loader::default(), &[("x.yaml", &other)]);
    assert_eq!(s.network_policies, alone.network_policies);
    // Both new, or twice in one file: never neither.
    let s = build(&mut Loader::default(), &[("a.yaml", ATG), ("b.yaml", ATG)]);
    assert_eq!(s.applied_to_groups.len(), 1);
    let s = build(&mut Loader::default(), &[("a.yaml", &format!("{ATG}---\n{ATG}"))]);
    assert_eq!(s.applied_to_groups.len(), 1);
    assert_eq!(
        s.errors,
        [
            "policy file /p/a.yaml: AppliedToGroup vm1 is defined more than once in the file: the last \
          definition, in /p/a.yaml (the last file in path order), is used"
        ]
    );
}

#[test]
fn a_file_of_many_bad_objects_is_a_few_lines() {
    let mut l = Loader::default();
    let many = format!("[{}]", vec!["1"; 1000].join(","));
    let s = build(&mut l, &[("a.json", &many)]);
    assert_eq!(s.errors.len(), MAX_OBJECT_ERRORS_PER_FILE + 1);
    assert_eq!(
        s.errors.last().map(String::as_str),
        Some("policy file /p/a.json: 990 more objects are invalid (only the first 10 are listed)")
    );
}

#[test]
fn an_emptied_file_keeps_its_objects_until_deleted() {
    let mut l = Loader::default();
    let s = build(&mut l, &[("a.yaml", NP), ("b.yaml", ATG)]);
    let good = s.network_policies.clone();
    for empty in ["", "\n", "# just a comment\n", "---\n", "null\n"] {
        let s = build(&mut l, &[("a.yaml", empty), ("b.yaml", ATG)]);
        assert_eq!(s.network_policies, good, "{empty:?}");
        assert_eq!(
            s.errors,
            [
                "policy file /p/a.yaml: holds no objects (delete the file to remove its objects); \
                  keeping the object last loaded from it"
            ],
            "{empty:?}"
        );
    }
    // Deleting the file removes them.
    let s = build(&mut l, &[("b.yaml", ATG)]);
    assert!(s.network_policies.is_empty());
    assert!(s.errors.is_empty());
}

#[test]
fn missing_and_unreadable_directories() {
    let mut l = Loader::default();
    build(&mut l, &[("a.yaml", NP)]);
    let s = l.build(
        Path::new("/p"),
        &DirContent::Unreadable("permission denied".into()),
    );
    assert_eq!(names(&s).0, ["web"]);
    assert_eq!(
        s.errors,
        ["policy directory /p: cannot read: permission denied; keeping the policies last loaded from it"]
    );
    // Gone (removed, unmounted): what it held stays enforced until it is back.
    let s = l.build(Path::new("/p"), &DirContent::Missing);
    assert_eq!(names(&s).0, ["web"]);
    assert_eq!(
        s.errors,
        [
            "policy directory /p does not exist (removed or not mounted); keeping the 1 objects \
              last loaded from it until it is back"
        ]
    );
    // Back, now empty: an explicit change, the policies go.
    let s = l.build(Path::new("/p"), &files(&[]));
    assert_eq!(names(&s), (vec![], vec![], vec![]));
    assert!(s.errors.is_empty());
    // Never there: nothing loaded, said so.
    let s = Loader::default().build(Path::new("/p"), &DirContent::Missing);
    assert_eq!(
        s.errors,
        ["policy directory /p does not exist: no policies loaded"]
    );
}

/// The issue's seed example and its inventory host, verbatim.
const ANNP: &str = include_str!("../../../tests/fixtures/seed-annp.yaml");
const FRONT: &str = include_str!("../../../tests/fixtures/seed-inventory.yaml");

/// The local controller's name for the seed ANNP (it has no uid: derived from kind,
/// namespace and name, as antrea-controller does).
fn annp1() -> String {
    crate::policy::native::controller::uuid_v5("NetworkPolicy/vm-ns/annp1")
}

/// The policies of a snapshot by the name their author gave them (`sourceRef`), else by
/// their own; sorted.
fn authored(s: &PolicySnapshot) -> Vec<String> {
    let mut names: Vec<String> = s
        .network_policies
        .iter()
        .map(|p| p.source_ref.as_ref().map_or(p.name.clone(), |r| r.name.clone()))
        .collect();
    names.sort();
    names
}

/// The lab's ExternalNode `vm1`, labelled `role: db`.
fn db_node(l: &mut Loader) {
    l.node.update(
        Some(Ok("apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
                     metadata: {name: vm1, namespace: vm-ns, labels: {role: db}}\n\
                     spec: {interfaces: [{name: eth0, ips: [10.99.0.2]}]}\n"
            .into())),
        &InputLimits::default(),
    );
}

#[test]
fn antrea_native_objects_are_translated_next_to_controlplane_ones() {
    let mut l = Loader::default();
    db_node(&mut l);
    let s = build(
        &mut l,
        &[("a.yaml", NP), ("annp.yaml", ANNP), ("inventory.yaml", FRONT)],
    );
    assert_eq!(s.errors, Vec::<String>::new());
    let (policies, ags, atgs) = names(&s);
    let mut want = [annp1(), "web".to_string()];
    want.sort();
    assert_eq!(policies, want.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(ags.len(), 1);
    assert_eq!(atgs.len(), 1);
    let atg = &s.applied_to_groups[0];
    let member = atg.members.values().next().unwrap();
    assert_eq!(
        member.entity,
        crate::policy::controlplane::MemberRef::ExternalEntity {
            namespace: "vm-ns".into(),
            name: crate::k8s::external_node::external_entity_name("vm1", "eth0"),
        }
    );

    // A broken edit keeps the last valid version, naming the field; a label change in the
    // inventory takes the host out of the group.
    let broken = ANNP.replace("action: Reject", "action: Deny");
    let moved = FRONT.replace("role: front", "role: other");
    let s = build(
        &mut l,
        &[("a.yaml", NP), ("annp.yaml", &broken), ("inventory.yaml", &moved)],
    );
    assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
    assert!(
        s.errors[0].starts_with(
            "policy file /p/annp.yaml: object 1: NetworkPolicy vm-ns/annp1: spec.ingress[0].action: \
                 Unsupported value: \"Deny\""
        ) && s.errors[0].ends_with("; keeping its last valid version"),
        "{}",
        s.errors[0]
    );
    assert_eq!(s.network_policies.len(), 2);
    assert!(s.address_groups[0].members.is_empty());

    // Deleting the file deletes the policy.
    let s = build(&mut l, &[("a.yaml", NP), ("inventory.yaml", &moved)]);
    assert_eq!(names(&s).0, vec!["web"]);
}

/// An Antrea-native object defined in two files is the definition of the file last in path
/// order, as `kubectl apply -f DIR` (files applied in lexical order, the last apply winning)
/// leaves it, with a warning: a function of the directory alone, so a restart keeps it.
#[test]
fn an_antrea_native_policy_defined_twice_is_the_last_files_definition() {
    let mut l = Loader::default();
    db_node(&mut l);
    let s = build(&mut l, &[("annp.yaml", ANNP), ("inventory.yaml", FRONT)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(names(&s).0, vec![annp1().as_str()]);
    let ports = |s: &PolicySnapshot| format!("{:?}", s.network_policies[0].rules);

    // A copy with another port lands in a second file, after annp.yaml: the copy is used.
    let copy = ANNP.replace("port: 22", "port: 2222");
    let both = [
        ("annp.yaml", ANNP),
        ("copy.yaml", copy.as_str()),
        ("inventory.yaml", FRONT),
    ];
    let s = build(&mut l, &both);
    assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
    assert!(
        s.errors[0].contains(
            "is defined in more than one file: the definition in /p/copy.yaml (the last file in path \
             order) is used"
        ),
        "{}",
        s.errors[0]
    );
    assert_eq!(s.network_policies.len(), 1);
    assert!(ports(&s).contains("2222"), "{}", ports(&s));

    // A fresh start (a restarted agent) makes the same of the same directory.
    let mut fresh = Loader::default();
    db_node(&mut fresh);
    assert_eq!(build(&mut fresh, &both), s);

    // Editing the earlier file changes nothing; editing the later one is used.
    let edited = ANNP.replace("port: 22", "port: 2200");
    let s = build(
        &mut l,
        &[
            ("annp.yaml", &edited),
            ("copy.yaml", &copy),
            ("inventory.yaml", FRONT),
        ],
    );
    assert!(ports(&s).contains("2222"), "{}", ports(&s));
    let s = build(
        &mut l,
        &[
            ("annp.yaml", &edited),
            ("copy.yaml", &edited),
            ("inventory.yaml", FRONT),
        ],
    );
    assert!(ports(&s).contains("2200"), "{}", ports(&s));

    // One definition left: it is used, without a warning.
    let s = build(&mut l, &[("annp.yaml", ANNP), ("inventory.yaml", FRONT)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert!(!ports(&s).contains("2222"), "{}", ports(&s));
}

#[test]
fn an_antrea_native_object_moved_between_files_stays_enforced() {
    let mut l = Loader::default();
    db_node(&mut l);
    let s = build(&mut l, &[("annp.yaml", ANNP), ("inventory.yaml", FRONT)]);
    assert_eq!(s.errors, Vec::<String>::new());
    let enforced = s.network_policies.clone();
    assert_eq!(authored(&s), ["annp1"]);

    // Moved in one step (the old file gone, the new one there): no conflict, nothing lost.
    let s = build(&mut l, &[("inventory.yaml", FRONT), ("moved.yaml", ANNP)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(s.network_policies, enforced);

    // Moved in two steps, copied first: a warning while both files hold it (the same
    // definition, so nothing changes); the copy alone once the first file is deleted.
    let s = build(
        &mut l,
        &[
            ("again.yaml", ANNP),
            ("inventory.yaml", FRONT),
            ("moved.yaml", ANNP),
        ],
    );
    assert_eq!(s.errors.len(), 1, "{:#?}", s.errors);
    assert!(
        s.errors[0].starts_with(
            "policy files /p/again.yaml, /p/moved.yaml: NetworkPolicy vm-ns/annp1 is defined in \
             more than one file: the definition in /p/moved.yaml (the last file in path order) is used"
        ),
        "{}",
        s.errors[0]
    );
    assert_eq!(s.network_policies, enforced);
    let s = build(&mut l, &[("again.yaml", ANNP), ("inventory.yaml", FRONT)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(s.network_policies, enforced);

    // The inventory moved into the policy's file: the group keeps its member.
    let both = format!("{ANNP}---\n{FRONT}");
    let s = build(&mut l, &[("again.yaml", &both)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(s.address_groups[0].members.len(), 1);
    assert_eq!(s.network_policies, enforced);
}

#[test]
fn an_invalid_antrea_native_file_is_rejected_and_the_others_keep_working() {
    let mut l = Loader::default();
    db_node(&mut l);
    build(&mut l, &[("annp.yaml", ANNP), ("inventory.yaml", FRONT)]);
    // A new policy with an action Antrea does not know, and a file that does not parse.
    let bad = ANNP
        .replace("name: annp1", "name: annp2")
        .replace("action: Reject", "action: Deny");
    let s = build(
        &mut l,
        &[
            ("annp.yaml", ANNP),
            ("bad.yaml", &bad),
            ("broken.yaml", "kind: [unclosed\n"),
            ("inventory.yaml", FRONT),
        ],
    );
    assert_eq!(s.errors.len(), 2, "{:#?}", s.errors);
    assert!(
        s.errors[0].starts_with(
            "policy file /p/bad.yaml: object 1: NetworkPolicy vm-ns/annp2: spec.ingress[0].action: \
                 Unsupported value: \"Deny\""
        ),
        "{}",
        s.errors[0]
    );
    assert!(
        s.errors[1].starts_with("policy file /p/broken.yaml: cannot parse"),
        "{}",
        s.errors[1]
    );
    assert_eq!(authored(&s), ["annp1"]);
    // The others keep following their files: the inventory host leaves the group.
    let s = build(
        &mut l,
        &[
            ("annp.yaml", ANNP),
            ("bad.yaml", &bad),
            ("broken.yaml", "kind: [unclosed\n"),
            ("inventory.yaml", &FRONT.replace("role: front", "role: other")),
        ],
    );
    assert_eq!(s.errors.len(), 2, "{:#?}", s.errors);
    assert!(s.address_groups[0].members.is_empty());
    // Fixed: used.
    let fixed = bad.replace("action: Deny", "action: Drop");
    let s = build(&mut l, &[("annp.yaml", ANNP), ("bad.yaml", &fixed)]);
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(authored(&s), ["annp1", "annp2"]);
}

#[test]
fn file_name_filter() {
    for yes in ["a.yaml", "b.YML", "c.json"] {
        assert!(is_policy_file(yes), "{yes}");
    }
    for no in [".a.yaml", "..data", "a.yaml~", "a.yaml.swp", "README", "a.txt"] {
        assert!(!is_policy_file(no), "{no}");
    }
}

const SSH: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {name: ssh}
appliedToGroups: [vm1]
priority: 1
tierPriority: 250
rules:
- direction: In
  services: [{protocol: TCP, port: 22}]
  action: Drop
";

#[test]
fn a_garbled_object_in_a_half_broken_file_stays_enforced() {
    let mut l = Loader::default();
    let two = format!("{NP}---\n{SSH}");
    build(&mut l, &[("a.yaml", &two)]);
    // `kind` garbled: neither kind nor name can be told, yet ssh stays.
    let s = build(
        &mut l,
        &[(
            "a.yaml",
            &two.replace("kind: NetworkPolicy\nmetadata: {name: ssh}", "kin: x"),
        )],
    );
    assert_eq!(names(&s).0, ["ssh", "web"]);
    assert_eq!(
            s.errors.last().map(String::as_str),
            Some("policy file /p/a.yaml: keeping NetworkPolicy ssh as last loaded until the file loads without errors")
        );
    // Removed from a file that loads cleanly: gone.
    let s = build(&mut l, &[("a.yaml", NP)]);
    assert_eq!(names(&s).0, ["web"]);
    assert!(s.errors.is_empty());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Random edits of an enforced file: no panic, a bounded time, the other file's objects
    /// untouched, nothing removed unless the edited file loads cleanly, and nothing enforced
    /// that is neither the last good version nor valid in the current text.
    #[test]
    fn random_mutations_never_weaken_enforcement(
        edits in proptest::collection::vec(crate::sources::mutations::mutation(), 1..4)
    ) {
        let mut l = Loader::default();
        let other = format!("{ATG}---\n{SSH}");
        let first = build(&mut l, &[("a.yaml", NP), ("b.yaml", &other)]);
        proptest::prop_assert!(first.errors.is_empty());
        let mut last = first.clone();
        let mut text = NP.to_string();
        for edit in &edits {
            text = edit.apply(&text);
            let started = std::time::Instant::now();
            let s = build(&mut l, &[("a.yaml", &text), ("b.yaml", &other)]);
            proptest::prop_assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
            let alone = build(&mut Loader::default(), &[("a.yaml", &text)]);
            let ssh = |s: &PolicySnapshot| s.network_policies.iter().find(|p| p.name == "ssh").cloned();
            if ssh(&alone).is_none() {
                proptest::prop_assert_eq!(ssh(&s), ssh(&first));
            }
            proptest::prop_assert!(s.applied_to_groups.iter().any(|g| g == &first.applied_to_groups[0]));
            for p in &s.network_policies {
                proptest::prop_assert!(
                    last.network_policies.contains(p) || alone.network_policies.contains(p),
                    "{} appeared from nowhere", p.name
                );
            }
            if !alone.errors.is_empty() || alone.network_policies.is_empty() {
                for p in &last.network_policies {
                    proptest::prop_assert!(
                        s.network_policies.iter().any(|q| q.name == p.name),
                        "{} removed by a file that does not load cleanly: {:?}", p.name, s.errors
                    );
                }
            }
            last = s;
        }
    }
}

/// A file of several documents, controlplane and Antrea-native.
fn mixed_documents() -> Vec<String> {
    vec![
        NP.to_owned(),
        ATG.to_owned(),
        SSH.to_owned(),
        ANNP.to_owned(),
        FRONT.trim_start_matches("---\n").to_owned(),
    ]
}

#[test]
fn the_unchanged_documents_of_a_changed_file_are_taken_over_not_parsed_again() {
    let mut l = Loader::default();
    db_node(&mut l);
    let mut docs = mixed_documents();
    let first = build(&mut l, &[("a.yaml", &docs.join("---\n"))]);
    assert_eq!(first.errors, Vec::<String>::new());
    docs[1] = docs[1].replace("name: vm1, namespace", "name: vm9, namespace");
    let second = build(&mut l, &[("a.yaml", &docs.join("---\n"))]);
    assert_eq!(second.errors, Vec::<String>::new());
    // The unchanged NetworkPolicy documents gave back the very objects loaded before.
    for name in ["web", "ssh"] {
        let held = |s: &PolicySnapshot| s.network_policies.iter().find(|p| p.name == name).cloned();
        assert!(
            Arc::ptr_eq(&held(&first).expect("before"), &held(&second).expect("after")),
            "{name}"
        );
    }
    let group = |s: &PolicySnapshot| s.applied_to_groups.iter().find(|g| g.name == "vm1").cloned();
    assert_ne!(group(&first), group(&second), "the changed document was parsed");
    // The same as a loader that parses every document.
    let mut fresh = Loader::default();
    db_node(&mut fresh);
    assert_eq!(build(&mut fresh, &[("a.yaml", &docs.join("---\n"))]), second);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Random edits of the documents of a file, one at a time: the loader that takes unchanged
    /// documents over gives exactly what one with the same history that parses everything gives
    /// (objects, last good versions kept, errors).
    #[test]
    fn taking_documents_over_equals_parsing_them(
        edits in proptest::collection::vec((0usize..5, crate::sources::mutations::mutation()), 1..6)
    ) {
        let mut l = Loader::default();
        let mut parsing = Loader::default();
        db_node(&mut l);
        db_node(&mut parsing);
        let mut docs = mixed_documents();
        for (at, edit) in &edits {
            docs[*at] = edit.apply(&docs[*at]);
            let text = docs.join("---\n");
            let s = build(&mut l, &[("a.yaml", &text)]);
            for file in parsing.files.values_mut() {
                file.pieces.clear();
            }
            let expected = build(&mut parsing, &[("a.yaml", &text)]);
            proptest::prop_assert_eq!(s, expected);
        }
    }
}

// --- the polling stream, on a real directory ---

async fn next_snapshot(events: &mut BoxStream<'static, PolicySnapshot>) -> PolicySnapshot {
    tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("snapshot in time")
        .expect("stream continues")
}

/// Writes through a hidden temporary file and a rename, so a poll never sees half a file.
fn write(dir: &Path, name: &str, text: &str) {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, dir.join(name)).expect("rename");
}

#[tokio::test]
async fn stream_follows_add_change_delete_and_bad_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("policies");
    let source = PolicyDirSource::new(&dir, Duration::from_millis(10));
    assert!(source.describe().contains("policies"));
    let mut events = source.subscribe();

    // Directory missing, then created empty.
    let s = next_snapshot(&mut events).await;
    assert!(s.errors[0].contains("does not exist"), "{:?}", s.errors);
    std::fs::create_dir(&dir).expect("mkdir");
    assert_eq!(next_snapshot(&mut events).await, PolicySnapshot::default());

    // Add.
    write(&dir, "a.yaml", &format!("{NP}---\n{ATG}"));
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec!["web"], vec![], vec!["vm1"]));
    write(&dir, "b.json", AG_JSON);
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec!["web"], vec!["front"], vec!["vm1"]));

    // Change.
    write(
        &dir,
        "a.yaml",
        &format!("{}---\n{ATG}", NP.replace("priority: 5", "priority: 7")),
    );
    let s = next_snapshot(&mut events).await;
    assert_eq!(s.network_policies[0].priority, Some(7.0));

    // A bad file next to the good ones.
    write(&dir, "c.yaml", "kind: [unclosed\n");
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec!["web"], vec!["front"], vec!["vm1"]));
    assert_eq!(s.errors.len(), 1);
    assert!(s.errors[0].contains("c.yaml: cannot parse"), "{:?}", s.errors);

    // Delete.
    std::fs::remove_file(dir.join("b.json")).expect("rm");
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec!["web"], vec![], vec!["vm1"]));
    std::fs::remove_file(dir.join("c.yaml")).expect("rm");
    let s = next_snapshot(&mut events).await;
    assert!(s.errors.is_empty());

    // Touching a file without changing what it means emits nothing: the next snapshot is
    // the one after a real change.
    write(
        &dir,
        "a.yaml",
        &format!(
            "# comment\n{}---\n{ATG}",
            NP.replace("priority: 5", "priority: 7")
        ),
    );
    write(&dir, "z.yaml", "");
    std::fs::remove_file(dir.join("a.yaml")).expect("rm");
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec![], vec![], vec![]));
    assert!(s.errors.is_empty());
}

/// An edit of the ExternalNode file (in another directory) is read at once, not at the next
/// poll: the poll period here is a minute, the wait for the snapshot 10 s.
#[tokio::test]
async fn an_external_node_edit_elsewhere_is_read_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("policies");
    let node_dir = tmp.path().join("node");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::create_dir(&node_dir).expect("mkdir");
    let node = |role: &str| {
        format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
                 metadata: {{name: vm1, namespace: vm-ns, labels: {{role: {role}}}}}\n\
                 spec: {{interfaces: [{{name: eth0, ips: [10.99.0.2]}}]}}\n"
        )
    };
    write(&node_dir, "external-node.yaml", &node("db"));
    write(&dir, "annp.yaml", ANNP);
    let source = PolicyDirSource::new(&dir, Duration::from_secs(60))
        .with_external_node_file(node_dir.join("external-node.yaml"));
    let mut events = source.subscribe();
    let s = next_snapshot(&mut events).await;
    assert_eq!(s.errors, Vec::<String>::new());
    assert_eq!(s.applied_to_groups[0].members.len(), 1);

    write(&node_dir, "external-node.yaml", &node("web"));
    let s = next_snapshot(&mut events).await;
    assert!(
        s.applied_to_groups[0].members.is_empty(),
        "{:?}",
        s.applied_to_groups
    );
}

/// On a pass an event woke, a regular file no event named is not looked at (not even its
/// metadata), while a symlinked one is, since its target can change where no event is seen. A
/// regular file changed without an event here (through a hard link elsewhere) is read at the next
/// safety-net poll, which reads every file.
#[tokio::test]
async fn a_woken_pass_skips_unnamed_regular_files_but_not_symlinks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("policies");
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::create_dir(&shared).expect("mkdir");
    write(&dir, "a.yaml", &format!("{NP}---\n{ATG}"));
    std::fs::hard_link(dir.join("a.yaml"), shared.join("a-elsewhere.yaml")).expect("hard link");
    write(&shared, "b.json", AG_JSON);
    std::os::unix::fs::symlink(shared.join("b.json"), dir.join("b.json")).expect("symlink");
    // No poll within the test: only inotify wakes the source.
    let source = PolicyDirSource::new(&dir, Duration::from_secs(600));
    let mut events = source.subscribe();
    let s = next_snapshot(&mut events).await;
    assert_eq!(names(&s), (vec!["web"], vec!["front"], vec!["vm1"]));
    assert_eq!(s.network_policies[0].priority, Some(5.0));

    // The symlink's target changes in the other directory (no event in the policy directory),
    // and a.yaml's content changes through its other name (no event here either).
    write(&shared, "b.json", &AG_JSON.replace("\"front\"", "\"front2\""));
    {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(shared.join("a-elsewhere.yaml"))
            .expect("open the hard link");
        f.write_all(b"---\nkind: AddressGroup\nmetadata: {name: g9}\n")
            .expect("append");
    }
    // Another file appears: its event wakes a pass.
    write(&dir, "c.yaml", &NP.replace("{name: web}", "{name: web2}"));
    let s = next_snapshot(&mut events).await;
    assert_eq!(
        names(&s),
        (vec!["web", "web2"], vec!["front2"], vec!["vm1"]),
        "the symlinked file was looked at, a.yaml (a regular file no event named) was not \
         read again; {:?}",
        s.errors
    );
    // An event naming it: read again, with what was appended through the other name.
    std::fs::write(
        dir.join("a.yaml"),
        format!("{NP}---\n{ATG}---\nkind: AddressGroup\nmetadata: {{name: g9}}\n"),
    )
    .expect("rewrite in place");
    let s = next_snapshot(&mut events).await;
    assert_eq!(
        names(&s),
        (vec!["web", "web2"], vec!["front2", "g9"], vec!["vm1"])
    );
}

/// A directory of many files is read on several threads: every file once, in path order, with a
/// FIFO, a dangling symlink and an oversized file reported where they sort; the next pass reads
/// only the file whose metadata changed.
#[test]
fn many_files_are_read_on_threads_as_one_read_in_order() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let count = parallel::PARALLEL_READS_FROM + 44;
    for i in 0..count {
        write(
            dir,
            &format!("np{i:04}.yaml"),
            &NP.replace("{name: web}", &format!("{{name: web{i}}}")),
        );
    }
    nix_mkfifo(&dir.join("np0100x.yaml"));
    std::os::unix::fs::symlink(dir.join("gone"), dir.join("np0200x.yaml")).expect("symlink");
    write(dir, "np0300x.yaml", &"#".repeat(5000));
    // Written long enough before the read for their metadata to prove them unchanged later.
    std::thread::sleep(crate::sources::file_stat::RACY_MARGIN + Duration::from_millis(100));
    let DirContent::Files(read) = read_content_blocking(dir, 4096, None) else {
        panic!("the directory reads");
    };
    let paths: Vec<PathBuf> = read.iter().map(|(p, _)| p.clone()).collect();
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "in path order");
    assert_eq!(read.len(), count + 3, "every file once");
    for (path, text) in &read {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match (name, text) {
            ("np0100x.yaml", Err(e)) => assert!(e.to_string().contains("a FIFO"), "{e}"),
            ("np0200x.yaml", Err(e)) => assert!(e.to_string().contains("dangling symlink"), "{e}"),
            ("np0300x.yaml", Err(e)) => assert!(e.to_string().contains("more than the 4096 bytes"), "{e}"),
            (_, Ok(file)) => {
                let i: usize = name[2..6].parse().expect("a fleet file");
                assert!(
                    file.read && file.text.contains(&format!("name: web{i}}}")),
                    "{name}"
                );
            }
            (_, Err(e)) => panic!("{name}: {e}"),
        }
    }
    // The loader holds them now: the next pass reads again only what changed.
    let mut loader = Loader::default();
    loader.build(dir, &DirContent::Files(read));
    write(dir, "np0007.yaml", &NP.replace("{name: web}", "{name: changed}"));
    let DirContent::Files(again) = read_content_blocking(dir, 4096, Some((&loader.files, None))) else {
        panic!("the directory reads");
    };
    let read_again: Vec<&str> = again
        .iter()
        .filter(|(_, t)| t.as_ref().is_ok_and(|f| f.read))
        .filter_map(|(p, _)| p.file_name().and_then(|n| n.to_str()))
        .collect();
    assert_eq!(read_again, ["np0007.yaml"]);
}

fn nix_mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// The same objects as YAML files and as JSON files load to the same snapshot with the same
/// errors: lists and top-level sequences flattened, an Antrea-native object left to the local
/// controller, a wrong `apiVersion`, a field of the wrong type, an unknown kind.
#[test]
fn yaml_files_load_as_json_files_do() {
    let yaml: Vec<(&str, String)> = vec![
        ("a.yaml", NP.to_owned()),
        ("atg.yaml", ATG.to_owned()),
        ("annp.yaml", ANNP.to_owned()),
        ("inventory.yaml", FRONT.to_owned()),
        (
            "list.yaml",
            "kind: AddressGroupList\nitems:\n- {kind: AddressGroup, metadata: {name: g2}}\n\
             - kind: AddressGroup\n  metadata: {name: g3}\n"
                .to_owned(),
        ),
        (
            "seq.yaml",
            "- {kind: AddressGroup, metadata: {name: g4}}\n\
             - {apiVersion: controlplane.antrea.io/v1beta2, kind: AppliedToGroup, metadata: {name: a1}}\n"
                .to_owned(),
        ),
        (
            "version.yaml",
            "kind: AddressGroup\napiVersion: v1\nmetadata: {name: x}\n".to_owned(),
        ),
        (
            "type.yaml",
            "kind: NetworkPolicy\nmetadata: {name: typed}\npriority: high\n".to_owned(),
        ),
        ("pod.yaml", "kind: Pod\nmetadata: {name: p}\n".to_owned()),
    ];
    let json: Vec<(String, String)> = yaml
        .iter()
        .map(|(name, text)| {
            let docs: Vec<Value> = parse_values(text, false, &InputLimits::default()).expect("YAML");
            let value = match <[Value; 1]>::try_from(docs) {
                Ok([one]) => one,
                Err(docs) => Value::Array(docs),
            };
            (name.replace(".yaml", ".json"), value.to_string())
        })
        .collect();
    let load = |list: Vec<(&str, &str)>| {
        let mut l = Loader::default();
        db_node(&mut l);
        build(&mut l, &list)
    };
    let from_yaml = load(yaml.iter().map(|(n, t)| (*n, t.as_str())).collect());
    let from_json = load(json.iter().map(|(n, t)| (n.as_str(), t.as_str())).collect());
    assert_eq!(names(&from_yaml), names(&from_json));
    assert_eq!(from_yaml.network_policies, from_json.network_policies);
    assert_eq!(from_yaml.address_groups, from_json.address_groups);
    assert_eq!(from_yaml.applied_to_groups, from_json.applied_to_groups);
    let errors_of_json: Vec<String> = from_json
        .errors
        .iter()
        .map(|e| e.replace(".json", ".yaml"))
        .collect();
    assert_eq!(from_yaml.errors, errors_of_json);
    assert_eq!(from_yaml.errors.len(), 3, "{:#?}", from_yaml.errors);
    let (policies, groups, applied) = names(&from_yaml);
    assert_eq!(policies.len(), 2, "{policies:?}");
    assert_eq!(groups.len(), 4, "{groups:?}");
    assert_eq!(applied.len(), 3, "{applied:?}");
}
