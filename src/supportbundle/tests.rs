//! A whole bundle collected without root, OVS or a running agent: the configuration, kubeconfig
//! and secret files of a temporary directory; every secret they hold must be absent from the
//! unpacked archive, and every missing source must be in the manifest with its reason.

use std::collections::BTreeMap;
use std::io::Read;

use super::*;

/// The kubeconfig's secrets, inline and in files it names; the metrics server's token file.
const TOKEN: &str = "inline-token-7f3a9c2e5b1d4068";
const KEY_DATA: &str = "S0VZLURBVEEtU0VDUkVULTEyMzQ1Njc4OTA="; // KEY-DATA-SECRET-1234567890
const CERT_DATA: &str = "Q0VSVC1EQVRBLVNFQ1JFVC0xMjM0NTY3ODkw"; // CERT-DATA-SECRET-1234567890
const KEY_FILE_BODY: &str = "MHcCAQEEIKeyFileBodySecretLine0123456789abcdef";
const TOKEN_FILE: &str = "token-file-secret-91c2d3e4f5a6b7c8";
const BEARER_FILE: &str = "metrics-bearer-secret-0a1b2c3d4e5f";

fn unpack(bytes: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(bytes));
    let mut files = BTreeMap::new();
    for entry in archive.entries().expect("entries") {
        let mut entry = entry.expect("entry");
        let path = entry.path().expect("path").display().to_string();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("read");
        files.insert(path, data);
    }
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_without_agent_or_ovs_holds_no_secret_and_says_what_failed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let key_file = d.join("client.key");
    std::fs::write(
        &key_file,
        format!("-----BEGIN EC PRIVATE KEY-----\n{KEY_FILE_BODY}\n-----END EC PRIVATE KEY-----\n"),
    )
    .expect("key");
    std::fs::write(d.join("token"), TOKEN_FILE).expect("token");
    std::fs::write(d.join("bearer"), BEARER_FILE).expect("bearer");
    let kubeconfig = d.join("antrea-agent.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://10.0.0.1:6443'}}}}]\n\
             users:\n- name: u\n  user:\n    token: {TOKEN}\n    client-key-data: {KEY_DATA}\n    \
             client-certificate-data: {CERT_DATA}\n    client-key: client.key\n    tokenFile: {}\n",
            d.join("token").display()
        ),
    )
    .expect("kubeconfig");
    let state = d.join("state");
    std::fs::create_dir_all(&state).expect("state");
    // A secret that leaked into a state file and a log is scrubbed there too.
    std::fs::write(
        state.join("agent-info.json"),
        format!("{{\"leak\": \"{TOKEN}\"}}"),
    )
    .expect("state file");
    let log = d.join("agent.log");
    std::fs::write(
        &log,
        format!("I1208 starting\nGET /x Authorization: Bearer {BEARER_FILE}\nkey {KEY_FILE_BODY}\n"),
    )
    .expect("log");
    let config = d.join("antrea-agent.conf");
    std::fs::write(
        &config,
        format!(
            "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsRunDir: {run}\nstateDir: {state}\n\
             clientConnection: {{kubeconfig: {kc}}}\nantreaClientConnection: {{kubeconfig: {kc}}}\n\
             agentAPI: {{socket: {run}/agent.sock}}\n\
             metricsServer: {{bearerTokenFile: {bearer}}}\nauditLogging: {{logDir: {run}/audit}}\n",
            run = d.join("run").display(),
            state = state.display(),
            kc = kubeconfig.display(),
            bearer = d.join("bearer").display(),
        ),
    )
    .expect("config");

    let mut options = Options::new(config);
    options.log_files = vec![log];
    options.limits.collector_timeout = Duration::from_secs(10);
    let bundle = collect(&options).await;
    let bytes = bundle.write_to(Vec::new()).expect("write");
    let files = unpack(&bytes);
    let root = &bundle.root;
    assert!(root.starts_with("antrea-vm-agent-supportbundle-"), "{root}");

    for secret in [
        TOKEN,
        KEY_DATA,
        CERT_DATA,
        "KEY-DATA-SECRET-1234567890",
        "CERT-DATA-SECRET-1234567890",
        KEY_FILE_BODY,
        TOKEN_FILE,
        BEARER_FILE,
    ] {
        for (path, data) in &files {
            assert!(
                memchr::memmem::find(data, secret.as_bytes()).is_none(),
                "{secret} found in {path}"
            );
        }
    }
    let text = |p: &str| {
        String::from_utf8_lossy(
            files
                .get(&format!("{root}/{p}"))
                .unwrap_or_else(|| panic!("{p} missing; files: {:?}", files.keys().collect::<Vec<_>>())),
        )
        .into_owned()
    };
    let kc = text("agent/config/clientConnection.kubeconfig");
    assert!(
        kc.contains("<redacted>") && kc.contains("client-key: client.key"),
        "{kc}"
    );
    assert!(text("agent/config/antrea-agent.conf").contains("bearerTokenFile"));
    assert!(text("agent/logs/agent.log").contains("I1208 starting"));
    assert!(text("agent/state/agent-info.json").contains("<redacted>"));
    assert!(text("versions.txt").contains("antrea-vm-agent: v"));

    let manifest: serde_json::Value = serde_json::from_str(&text(MANIFEST)).expect("the manifest is JSON");
    let entry = |p: &str| -> serde_json::Value {
        manifest["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .find(|e| e["path"] == p)
            .cloned()
            .unwrap_or_else(|| panic!("no manifest entry {p}: {manifest:#}"))
    };
    assert!(
        manifest["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .any(|n| n.as_str().unwrap_or("").contains("agent API unavailable")),
        "{manifest:#}"
    );
    let get = entry("agent/get/networkpolicy.json");
    assert_eq!(get["status"], "failed");
    assert!(
        get["error"]
            .as_str()
            .unwrap_or("")
            .contains("agent API unavailable"),
        "{get}"
    );
    for p in ["ovs/flows.txt", "ovs/groups.txt", "ovs/vswitchd/coverage.txt"] {
        let e = entry(p);
        assert_eq!(e["status"], "failed", "{e}");
        assert!(!e["error"].as_str().unwrap_or("").is_empty(), "{e}");
        assert!(!files.contains_key(&format!("{root}/{p}")));
    }
    assert_eq!(entry("agent/logs/agent.log")["scrubbed"], true);
    assert_eq!(entry("agent/state/agent-info.json")["scrubbed"], true);
    assert_eq!(entry("agent/logs/audit")["status"], "skipped");
    let total: u64 = manifest["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["bytes"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(manifest["totalBytes"].as_u64(), Some(total));
    // Every file of the archive is in the manifest, with its size.
    for (path, data) in &files {
        let rel = path.strip_prefix(&format!("{root}/")).expect("under the root");
        if rel != MANIFEST {
            assert_eq!(entry(rel)["bytes"].as_u64(), Some(data.len() as u64), "{rel}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_total_bound_holds_for_a_whole_bundle() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("big.log");
    std::fs::write(&log, "0123456789\n".repeat(5_000)).expect("log");
    let mut options = Options::new(dir.path().join("missing.conf"));
    options.log_files = vec![log];
    options.limits = Limits {
        max_file_bytes: 10_000,
        max_total_bytes: 20_000,
        collector_timeout: Duration::from_secs(10),
    };
    let bundle = collect(&options).await;
    let m = &bundle.manifest;
    assert!(m.total_bytes <= 20_000, "{}", m.total_bytes);
    assert!(
        m.notes.iter().any(|n| n.contains("cannot be read")),
        "{:?}",
        m.notes
    );
    let log = m.entry("agent/logs/big.log").expect("the log's entry");
    assert_ne!(log.status, Status::Collected);
    assert_eq!(log.original_bytes, Some(55_000));
    let files = unpack(&bundle.write_to(Vec::new()).expect("write"));
    let content: usize = files
        .iter()
        .filter(|(p, _)| !p.ends_with(MANIFEST))
        .map(|(_, d)| d.len())
        .sum();
    assert_eq!(content as u64, m.total_bytes);
}

#[test]
fn since_takes_a_number_and_a_unit() {
    use crate::cli::args::parse_since;
    assert_eq!(parse_since("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_since("30m"), Ok(Duration::from_secs(1800)));
    assert_eq!(parse_since("2h"), Ok(Duration::from_secs(7200)));
    assert_eq!(parse_since("1d"), Ok(Duration::from_secs(86400)));
    assert!(parse_since("0h").is_err());
    assert!(parse_since("h").is_err());
    assert!(parse_since("5w").is_err());
}

/// `metricsServer.bearerTokenFile` relative: resolved as the loaded configuration resolves it
/// (Config::load: against the working directory), so its secret is scrubbed. A kubeconfig that
/// is a FIFO, and a token file a kubeconfig names that is one, are refused without blocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relative_secret_file_is_scrubbed_and_fifos_are_refused() {
    let cwd = std::env::current_dir().expect("cwd");
    let dir = tempfile::tempdir_in(&cwd).expect("tempdir");
    let d = dir.path();
    let relative = d.strip_prefix(&cwd).expect("under cwd").join("bearer");
    assert!(relative.is_relative());
    std::fs::write(d.join("bearer"), BEARER_FILE).expect("bearer");
    let fifo = |name: &str| {
        let p = d.join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .expect("mkfifo");
        assert!(made.success());
        p
    };
    let kc_fifo = fifo("fifo.kubeconfig");
    let token_fifo = fifo("token.fifo");
    let kubeconfig = d.join("antrea.kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    tokenFile: {}\n",
            token_fifo.display()
        ),
    )
    .expect("kubeconfig");
    let log = d.join("agent.log");
    std::fs::write(&log, format!("leak {BEARER_FILE}\n")).expect("log");
    let config = d.join("antrea-agent.conf");
    std::fs::write(
        &config,
        format!(
            "nodeType: externalNode\nfeatureGates: {{ExternalNode: true}}\novsRunDir: {run}\nstateDir: {run}/state\n\
             clientConnection: {{kubeconfig: {kc_fifo}}}\nantreaClientConnection: {{kubeconfig: {kc}}}\n\
             agentAPI: {{socket: {run}/agent.sock}}\nmetricsServer: {{bearerTokenFile: {rel}}}\n",
            run = d.join("run").display(),
            kc_fifo = kc_fifo.display(),
            kc = kubeconfig.display(),
            rel = relative.display(),
        ),
    )
    .expect("config");
    let mut options = Options::new(config);
    options.log_files = vec![log];
    options.limits.collector_timeout = Duration::from_secs(10);
    let bundle = tokio::time::timeout(Duration::from_secs(60), collect(&options))
        .await
        .expect("a FIFO must not block the collection");
    let log = bundle
        .items
        .iter()
        .find(|i| i.path == "agent/logs/agent.log")
        .expect("log item");
    assert_eq!(log.data.as_deref().ok(), Some(&b"leak <redacted>\n"[..]));
    let m = &bundle.manifest;
    let kc = m
        .entry("agent/config/clientConnection.kubeconfig")
        .expect("entry");
    assert_eq!(kc.status, Status::Failed);
    assert!(kc.error.as_deref().is_some_and(|e| e.contains("FIFO")), "{kc:?}");
    assert!(
        m.notes
            .iter()
            .any(|n| n.contains(&token_fifo.display().to_string()) && n.contains("FIFO")),
        "{:?}",
        m.notes
    );
}
