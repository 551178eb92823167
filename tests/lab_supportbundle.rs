//! `antrea-vm-agent supportbundle` against a running agent enforcing Antrea-native policies (the
//! issue's seed ANNP) on the lab's real OVS: the archive is unpacked and its parts checked — the
//! bridge's flows (the policy's among them), every `get` output in table and JSON, OVSDB,
//! ovs-vswitchd's coverage and log, the agent's log file found from its command line, the host's
//! addresses and nftables ruleset, the manifest — and grepped for every secret of the
//! kubeconfig and files the configuration names. Then again with the agent stopped: the API
//! parts are recorded as unavailable and the rest is still there.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use support::*;

const SEED_ANNP: &str = include_str!("fixtures/seed-annp.yaml");

/// The secrets: inline in the kubeconfig, in the files it names, and the metrics bearer token.
const TOKEN: &str = "lab-inline-token-4e8d2a7c9b13f605";
const KEY_DATA_PLAIN: &str = "LAB-CLIENT-KEY-DATA-7a6b5c4d3e2f1a0b";
const CERT_DATA_PLAIN: &str = "LAB-CLIENT-CERT-DATA-0f1e2d3c4b5a6978";
const KEY_FILE_LINE: &str = "MHcCAQEEIlabKeyFileBodySecret00112233445566778899";
const TOKEN_FILE: &str = "lab-token-file-secret-a1b2c3d4e5f60718";
const BEARER: &str = "lab-metrics-bearer-secret-99887766554433";
/// The password in the cluster URL's userinfo.
const SERVER_PASSWORD: &str = "lab-server-userinfo-pass-5f4e3d2c";

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// Writes the secret files and a kubeconfig naming them; returns the kubeconfig's path.
fn write_secrets(lab: &Lab) -> (PathBuf, PathBuf) {
    let d = lab.dir().join("secrets");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join("client.key"),
        format!("-----BEGIN EC PRIVATE KEY-----\n{KEY_FILE_LINE}\n-----END EC PRIVATE KEY-----\n"),
    )
    .unwrap();
    std::fs::write(d.join("token"), format!("{TOKEN_FILE}\n")).unwrap();
    std::fs::write(d.join("bearer"), BEARER).unwrap();
    let kubeconfig = d.join("antrea-agent.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\n\
             clusters: [{{name: c, cluster: {{server: 'https://lab:{SERVER_PASSWORD}@10.96.0.1:443'}}}}]\n\
             users:\n- name: antrea-agent\n  user:\n    token: {TOKEN}\n    client-key-data: {}\n    \
             client-certificate-data: {}\n    client-key: client.key\n    tokenFile: {}\n\
             contexts: [{{name: x, context: {{cluster: c, user: antrea-agent}}}}]\ncurrent-context: x\n",
            b64(KEY_DATA_PLAIN),
            b64(CERT_DATA_PLAIN),
            d.join("token").display()
        ),
    )
    .unwrap();
    (kubeconfig, d.join("bearer"))
}

fn secrets() -> Vec<String> {
    vec![
        TOKEN.into(),
        b64(KEY_DATA_PLAIN),
        b64(CERT_DATA_PLAIN),
        KEY_DATA_PLAIN.into(),
        CERT_DATA_PLAIN.into(),
        KEY_FILE_LINE.into(),
        TOKEN_FILE.into(),
        BEARER.into(),
        SERVER_PASSWORD.into(),
    ]
}

/// The archive's files by their path under its root directory; the root.
fn unpack(path: &Path) -> (String, BTreeMap<String, Vec<u8>>) {
    let file = std::fs::File::open(path).unwrap();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut files = BTreeMap::new();
    let mut root = String::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let full = entry.path().unwrap().display().to_string();
        let (r, rel) = full.split_once('/').expect("every file is under the root");
        root = r.to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        files.insert(rel.to_string(), data);
    }
    (root, files)
}

struct Bundle {
    files: BTreeMap<String, Vec<u8>>,
    manifest: serde_json::Value,
}

impl Bundle {
    fn text(&self, path: &str) -> String {
        String::from_utf8_lossy(self.files.get(path).unwrap_or_else(|| {
            panic!(
                "{path} not in the bundle; it holds {:?}\nmanifest: {:#}",
                self.files.keys().collect::<Vec<_>>(),
                self.manifest
            )
        }))
        .into_owned()
    }

    fn entry(&self, path: &str) -> serde_json::Value {
        self.manifest["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["path"] == path)
            .cloned()
            .unwrap_or_else(|| panic!("no manifest entry {path}: {:#}", self.manifest))
    }

    fn assert_no_secret(&self) {
        for secret in secrets() {
            for (path, data) in &self.files {
                assert!(
                    !data.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "secret {secret} found in {path}"
                );
            }
        }
    }
}

fn run_bundle(lab: &Lab, config: &Path, out: &Path) -> Bundle {
    let t0 = Instant::now();
    let result = lab.run_agent(&[
        "supportbundle",
        "--config",
        &config.display().to_string(),
        "--output",
        &out.display().to_string(),
    ]);
    println!(
        "supportbundle took {} ms: {}",
        t0.elapsed().as_millis(),
        result.stdout_text().trim()
    );
    assert!(
        result.status.success(),
        "supportbundle failed: {}",
        result.describe()
    );
    let (root, files) = unpack(out);
    assert!(
        root.starts_with(&format!("antrea-vm-agent-supportbundle-{NODE_NAME}-")),
        "{root}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(files.get("manifest.json").expect("a manifest")).expect("JSON manifest");
    Bundle { files, manifest }
}

#[test]
fn lab_supportbundle_of_a_running_agent_and_of_a_stopped_one() {
    let lab = Lab::new();
    let policies = lab.dir().join("policies");
    std::fs::create_dir_all(&policies).unwrap();
    std::fs::write(
        policies.join("inventory.yaml"),
        format!(
            "apiVersion: crd.antrea.io/v1alpha2\nkind: ExternalEntity\n\
             metadata: {{name: front1, namespace: vm-ns, labels: {{role: front}}}}\n\
             spec: {{endpoints: [{{ip: {EXT_IP4}}}]}}\n"
        ),
    )
    .unwrap();
    std::fs::write(policies.join("annp1.yaml"), SEED_ANNP).unwrap();
    std::fs::write(
        lab.en_file(),
        format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
             metadata: {{name: {NODE_NAME}, namespace: {EN_NAMESPACE}, labels: {{role: db}}}}\n\
             spec: {{interfaces: [{{name: {NIC}, ips: [\"{VM_IP4}\", \"{VM_IP6}\"]}}]}}\n"
        ),
    )
    .unwrap();
    let (kubeconfig, bearer) = write_secrets(&lab);
    let socket = lab.dir().join("agent-api.sock");
    // Standalone mode ignores the kubeconfigs, but the configuration names them: the bundle must
    // show them redacted.
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {policies}\nagentAPI:\n  socket: {socket}\n\
         clientConnection:\n  kubeconfig: {kc}\nantreaClientConnection:\n  kubeconfig: {kc}\n\
         metricsServer:\n  bearerTokenFile: {bearer}\n",
        policies = policies.display(),
        socket = socket.display(),
        kc = kubeconfig.display(),
        bearer = bearer.display(),
    ));
    let log = lab.dir().join("antrea-agent.log");
    let mut agent = lab.start_agent_with_args(&[
        "run",
        "--config",
        &config.display().to_string(),
        "--logtostderr=false",
        &format!("--log_file={}", log.display()),
    ]);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "the seed policy's Reject flows", || {
        lab.try_dump_flows()
            .is_ok_and(|f| f.iter().any(|l| l.contains("tp_dst=22")))
    });
    let flows_now = lab.dump_flows();

    let b = run_bundle(&lab, &config, &lab.dir().join("running.tar.gz"));
    b.assert_no_secret();

    // The bridge, as ovs-ofctl prints it: every flow of the live dump is in flows.txt.
    let flows = b.text("ovs/flows.txt");
    let policy_flows: Vec<&String> = flows_now.iter().filter(|l| l.contains("tp_dst=22")).collect();
    assert!(!policy_flows.is_empty());
    for f in &flows_now {
        let table = f.split(", ").find(|p| p.starts_with("table=")).unwrap_or("");
        let actions = f.rsplit(' ').next().unwrap_or("");
        assert!(
            flows.lines().any(|l| l.contains(table) && l.ends_with(actions)),
            "{f} not in flows.txt:\n{flows}"
        );
    }
    assert_eq!(
        flows.lines().filter(|l| l.contains("actions=")).count(),
        flows_now.len(),
        "{flows}"
    );
    assert_eq!(b.entry("ovs/flows.txt")["status"], "collected");
    assert!(b.text("ovs/groups.txt").contains("OFPST_GROUP_DESC reply"));
    assert!(b.text("ovs/meters.txt").contains("OFPST_METER_CONFIG reply"));
    assert!(b.text("ovs/ovsdb-dump.txt").contains("Open_vSwitch table"));
    assert!(b.text("ovs/vsctl-show.txt").contains(BRIDGE));
    assert!(b.text("ovs/vswitchd/coverage.txt").contains("Event coverage"));
    assert!(b.text("ovs/vswitchd/dpif.txt").contains(BRIDGE));
    assert!(!b.text("ovs/logs/ovs-vswitchd.log").is_empty());

    // Every get output, the policy in them.
    for resource in [
        "networkpolicy",
        "appliedtogroup",
        "addressgroup",
        "ovsflows",
        "agentinfo",
        "interfaces",
        "fqdncache",
    ] {
        assert_eq!(
            b.entry(&format!("agent/get/{resource}.txt"))["status"],
            "collected"
        );
        let json = b.text(&format!("agent/get/{resource}.json"));
        serde_json::from_str::<serde_json::Value>(&json)
            .unwrap_or_else(|e| panic!("get {resource} -o json: {e}\n{json}"));
    }
    assert!(b.text("agent/get/networkpolicy.txt").contains("annp1"));
    assert!(b.text("agent/get/interfaces.txt").contains(NIC));

    // The agent's own files: its log (found from its --log_file), configuration, state.
    assert!(b.text("agent/logs/antrea-agent.log").contains("flows committed"));
    let conf = b.text("agent/config/antrea-agent.conf");
    assert!(
        conf.contains("policyDir") && conf.contains(&kubeconfig.display().to_string()),
        "{conf}"
    );
    let kc = b.text("agent/config/clientConnection.kubeconfig");
    assert!(
        kc.contains("<redacted>")
            && kc.contains("client-key: client.key")
            && kc.contains("server: https://10.96.0.1:443"),
        "{kc}"
    );
    assert!(
        b.files.keys().any(|p| p.starts_with("agent/state/interfaces/")),
        "no interface record in {:?}",
        b.files.keys().collect::<Vec<_>>()
    );

    // The host, and versions.
    assert!(b.text("host/ip-addr.txt").contains(VM_IP4));
    assert!(b.text("host/ip-6-route.txt").contains("fd00:99::"));
    assert!(b.text("host/ip-link.txt").contains(UPLINK));
    assert!(b
        .text("host/nft-ruleset.txt")
        .contains(&format!("{}_uplink", lab.prefix())));
    let versions = b.text("versions.txt");
    assert!(
        versions.contains("antrea-vm-agent: v")
            && versions.contains("ovs-vswitchd: ovs-vswitchd (Open vSwitch)"),
        "{versions}"
    );

    // The manifest accounts for every file and every failure.
    let m = &b.manifest;
    assert_eq!(m["format"], 1);
    assert!(
        m["notes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|n| !n.as_str().unwrap_or("").contains("agent API unavailable")),
        "{m:#}"
    );
    for (path, data) in &b.files {
        if path != "manifest.json" {
            assert_eq!(b.entry(path)["bytes"].as_u64(), Some(data.len() as u64), "{path}");
        }
    }
    for e in m["entries"].as_array().unwrap() {
        if e["status"] == "failed" {
            assert!(!e["error"].as_str().unwrap_or("").is_empty(), "{e}");
        }
    }

    // The agent stopped: the API parts are unavailable, the rest still collected.
    agent.stop();
    let b = run_bundle(&lab, &config, &lab.dir().join("stopped.tar.gz"));
    b.assert_no_secret();
    assert!(
        b.manifest["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap_or("").contains("agent API unavailable")),
        "{:#}",
        b.manifest
    );
    let get = b.entry("agent/get/networkpolicy.txt");
    assert_eq!(get["status"], "failed");
    assert!(
        get["error"].as_str().unwrap().contains("agent API unavailable"),
        "{get}"
    );
    assert!(!b.files.contains_key("agent/get/networkpolicy.txt"));
    // The flows stay in the bridge after the agent stops, and so in the bundle.
    assert!(b.text("ovs/flows.txt").contains("tp_dst=22"));
    // No agent says where it logs: the default path is tried and noted.
    assert!(
        b.manifest["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap_or("")
            .contains("/var/log/antrea/antrea-agent.log")),
        "{:#}",
        b.manifest
    );
}
