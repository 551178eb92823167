//! Hostile and careless input in the lab: ExternalNode files that point at links that must never
//! become uplinks, and policy files that are empty, conflicting, huge, deeply nested or not files at
//! all. In every case the enforced Drop keeps dropping real packets, the host's interfaces stay as
//! they were, the agent says what it refused (exact log lines), and health keeps answering.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::PathBuf;
use std::time::Duration;

use support::*;

/// The AppliedToGroup holding this lab VM's eth0 ExternalEntity.
const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// Drops TCP 5201 from the outside host (IPv4 and IPv6).
fn drop_policy() -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-drop, uid: uid-drop}}
sourceRef: {{type: AntreaNetworkPolicy, namespace: vm-ns, name: drop-5201, uid: uid-drop}}
appliedToGroups: [atg-vm1]
priority: 5
tierPriority: 250
rules:
- direction: In
  from: {{ipBlocks: [{{cidr: {EXT_IP4}/32}}, {{cidr: \"{EXT_IP6}/128\"}}]}}
  services: [{{protocol: TCP, port: 5201}}]
  action: Drop
  priority: 0
"
    )
}

const DENIED_PORT: u16 = 5201;

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

fn write_atomically(path: &std::path::Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("f")
    ));
    std::fs::write(&tmp, text).expect("write");
    std::fs::rename(&tmp, path).expect("move in place");
}

fn write_policy(lab: &Lab, file: &str, yaml: &str) {
    write_atomically(&policy_dir(lab).join(file), yaml);
}

/// Writes the ExternalNode with one interface `name` carrying `ips`.
fn write_en(lab: &Lab, name: &str, ips: &[&str]) {
    let ips: Vec<String> = ips.iter().map(|ip| format!("\"{ip}\"")).collect();
    write_atomically(
        &lab.en_file(),
        &format!(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
             metadata: {{name: {NODE_NAME}, namespace: {EN_NAMESPACE}}}\n\
             spec: {{interfaces: [{{name: {name}, ips: [{}]}}]}}\n",
            ips.join(", ")
        ),
    );
}

/// eth0 attached, the Drop on TCP 5201 enforced (checked with real packets).
fn attached_with_drop(lab: &Lab, config_extra: &str) -> AgentProcess {
    write_policy(lab, "00-atg.yaml", APPLIED_TO);
    write_policy(lab, "10-drop.yaml", &drop_policy());
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\n{config_extra}",
        policy_dir(lab).display()
    ));
    lab.write_external_node(&[VM_IP4, VM_IP6]);
    let agent = lab.start_agent_with_env(
        &["run", "--config", &config.display().to_string()],
        &[("GLIBC_TUNABLES", &deployed_glibc_tunables())],
    );
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "the Drop enforced", || {
        lab.dump_flows().iter().any(|f| f.contains("conj_id="))
    });
    assert_drop_holds(lab, "at the start");
    agent
}

/// The allocator settings the systemd unit runs the agent with, so the lab measures memory as
/// deployed.
fn deployed_glibc_tunables() -> String {
    let unit = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/systemd/antrea-vm-agent.service"
    );
    std::fs::read_to_string(unit)
        .expect("the systemd unit")
        .lines()
        .find_map(|l| l.strip_prefix("Environment=GLIBC_TUNABLES="))
        .expect("the unit sets GLIBC_TUNABLES")
        .to_string()
}

fn assert_drop_holds(lab: &Lab, when: &str) {
    assert!(
        !lab.tcp_from_ext(VM_IP4, DENIED_PORT),
        "TCP {DENIED_PORT} is dropped {when}"
    );
    assert!(
        lab.tcp_from_ext(VM_IP4, DENIED_PORT + 1),
        "another port passes {when}"
    );
}

/// Every link of the VM namespace with its index, kind and flags, and every address: what
/// "the host's interfaces are untouched" compares.
fn vm_interfaces(lab: &Lab) -> (String, String) {
    let links = lab.vm_ok("ip -o link show | sed 's/ link\\/.*//'");
    // Global addresses only: IPv6 link-local ones of the new links finish DAD meanwhile.
    let addrs = lab.vm_ok("ip -o addr show scope global | sed 's/valid_lft.*//'");
    (links, addrs)
}

/// An ExternalNode that lists the loopback address, or whose IPs are on the loopback, a tunnel, a
/// TAP device, a bridge or a bridge port, is refused with a log line naming the file, the entry and the reason;
/// the attached NIC stays attached, no interface changes, and the Drop keeps dropping.
#[test]
fn external_nodes_pointing_at_non_uplinks_change_nothing() {
    let lab = Lab::new();
    let mut agent = attached_with_drop(&lab, "");
    // Links that hold addresses but can never be uplinks.
    lab.vm_ok(
        "ip link add vx7 type vxlan id 7 dstport 4789 && ip addr add 10.77.0.2/24 dev vx7 \
         && ip tuntap add mode tap tap7 && ip addr add 10.76.0.2/24 dev tap7 \
         && ip link add br7 type bridge && ip addr add 10.78.0.2/24 dev br7 && ip link set br7 up \
         && ip link add v7 type veth peer name v7p && ip link set v7 master br7 \
         && ip addr add 10.79.0.2/24 dev v7 && ip link set v7 up \
         && ip addr add 10.80.0.2/32 dev lo",
    );
    let before = vm_interfaces(&lab);
    let file = lab.en_file().display().to_string();

    write_en(&lab, NIC, &["127.0.0.1"]);
    agent.wait_for_log(
        &format!(
            "ExternalNode vm-ns/vm1: spec.interfaces[0].ips[0]: 127.0.0.1 is a loopback address; \
             an uplink needs an address other hosts can reach (file {file}); keeping the last valid \
             ExternalNode state"
        ),
        Duration::from_secs(20),
    );
    const KINDS: &str = "(allowed kinds: none, veth, bond, team, vlan, macvlan, ipvlan)";
    for (name, ip, link, reason) in [
        (
            "vx7",
            "10.77.0.2",
            "vx7",
            &format!("vx7 is a vxlan device, not a physical-like interface {KINDS}"),
        ),
        (
            "tap7",
            "10.76.0.2",
            "tap7",
            &format!("tap7 is a tun device, not a physical-like interface {KINDS}"),
        ),
        ("br7", "10.78.0.2", "br7", &"br7 is a Linux bridge".to_string()),
        (
            "v7",
            "10.79.0.2",
            "v7",
            &"v7 is a port of br7 (a bond slave, bridge port or OVS port)".to_string(),
        ),
        (
            "lo",
            "10.80.0.2",
            "lo",
            &"lo is the loopback interface".to_string(),
        ),
    ] {
        write_en(&lab, name, &[ip]);
        agent.wait_for_log(
            &format!(
                "ExternalNode vm-ns/vm1 (file {file}): spec.interfaces[0] (name \"{name}\", ips [{ip}]): \
                 resolves to {link}, which cannot be an uplink: {reason}; nothing on the host was changed"
            ),
            Duration::from_secs(20),
        );
    }
    assert_eq!(vm_interfaces(&lab), before, "no interface of the host changed");
    assert!(lab.vm_link_exists(UPLINK), "eth0 stays attached");
    assert_drop_holds(&lab, "after the refused ExternalNodes");
    assert!(agent.is_running());
    agent.stop();
}

/// `/readyz` from inside the VM namespace: (HTTP status, seconds).
fn readyz(lab: &Lab) -> (String, f64) {
    let out = lab.vm(
        "curl -s -o /dev/null --max-time 2 -w '%{http_code} %{time_total}' http://127.0.0.1:10351/readyz",
    );
    let text = out.stdout_text();
    let mut parts = text.split_whitespace();
    let code = parts.next().unwrap_or("none").to_string();
    let secs = parts.next().and_then(|s| s.parse().ok()).unwrap_or(f64::INFINITY);
    (code, secs)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("agent status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

/// Bad policy input under an enforced Drop, one case after the other on one agent: a file
/// emptied in place, a second file defining the same name, a FIFO and a dangling symlink under
/// policy names, 60,000-level nesting and 180,000 values (while `/readyz` is polled), a 20,000-level ExternalNode,
/// an oversized file, 100,000 bad objects, and the directory removed and put back. The Drop keeps
/// dropping real packets throughout, and memory comes back after the large inputs.
#[test]
fn bad_policy_files_never_weaken_enforcement_nor_wedge_the_agent() {
    let lab = Lab::new();
    let mut agent = attached_with_drop(&lab, "");
    let rss_start = rss_kib(agent.pid());
    let dir = policy_dir(&lab);
    let drop_file = dir.join("10-drop.yaml");
    let log_name = |name: &str| dir.join(name).display().to_string();

    // Emptied in place (a truncating editor, a failed copy).
    std::fs::write(&drop_file, "").expect("truncate");
    agent.wait_for_log(
        &format!(
            "policy file {}: holds no objects (delete the file to remove its objects); keeping the \
             object last loaded from it",
            log_name("10-drop.yaml")
        ),
        Duration::from_secs(20),
    );
    assert_drop_holds(&lab, "with the file emptied");
    write_policy(&lab, "10-drop.yaml", &drop_policy());

    // The same name in a lexically earlier file, allowing: the last file's Drop stays.
    write_policy(
        &lab,
        "05-allow.yaml",
        &drop_policy().replace("action: Drop", "action: Allow"),
    );
    agent.wait_for_log(
        &format!(
            "policy files {}, {}: NetworkPolicy uid-drop is defined in more than one file: the \
             last definition, in {} (the last file in path order), is used",
            log_name("05-allow.yaml"),
            log_name("10-drop.yaml"),
            log_name("10-drop.yaml")
        ),
        Duration::from_secs(20),
    );
    assert_drop_holds(&lab, "with a conflicting definition");
    std::fs::remove_file(dir.join("05-allow.yaml")).expect("rm");

    // Not regular files: reported once, never read, nothing hangs.
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("20-fifo.yaml"))
        .status()
        .expect("mkfifo");
    assert!(made.success());
    std::os::unix::fs::symlink(dir.join("gone.yaml"), dir.join("21-dangling.yaml")).expect("symlink");
    for (name, what) in [
        ("20-fifo.yaml", "a FIFO"),
        ("21-dangling.yaml", "a dangling symlink"),
    ] {
        agent.wait_for_log(
            &format!(
                "policy file {}: skipped: it is {what}, not a regular file",
                log_name(name)
            ),
            Duration::from_secs(20),
        );
    }
    assert_eq!(
        agent.log().matches("20-fifo.yaml: skipped").count(),
        1,
        "one log line for the FIFO"
    );
    std::fs::remove_file(dir.join("20-fifo.yaml")).expect("rm");
    std::fs::remove_file(dir.join("21-dangling.yaml")).expect("rm");

    // Deep nesting, while /readyz is polled: it keeps answering fast.
    let (code, _) = readyz(&lab);
    assert_eq!(code, "200", "ready before the deep file");
    write_policy(&lab, "30-deep.yaml", &"{a: ".repeat(60_000));
    // Within the limits but slow to parse and validate (180,000 values): off the actors' threads.
    write_policy(&lab, "31-wide.yaml", &"- {a: 1}\n".repeat(60_000));
    write_en(&lab, NIC, &[VM_IP4, VM_IP6]);
    write_atomically(&lab.en_file(), &format!("metadata: {}", "[".repeat(20_000)));
    let mut samples = Vec::new();
    for _ in 0..25 {
        let (code, secs) = readyz(&lab);
        assert_eq!(code, "200", "/readyz answers during the deep input");
        samples.push(secs * 1000.0);
        std::thread::sleep(Duration::from_millis(40));
    }
    let slowest = samples.iter().copied().fold(0f64, f64::max) / 1000.0;
    println!(
        "/readyz during 60,000-level nesting and 180,000 values, ms: {}",
        samples
            .iter()
            .map(|ms| format!("{ms:.1}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    assert!(slowest < 0.1, "/readyz took {slowest} s");
    agent.wait_for_log(
        &format!(
            "policy file {}: nesting deeper than 64 levels at line 1 \
             (standalone.inputLimits.maxNestingDepth)",
            log_name("30-deep.yaml")
        ),
        Duration::from_secs(10),
    );
    agent.wait_for_log(
        &format!(
            "ExternalNode file {}: nesting deeper than 64 levels at line 1",
            lab.en_file().display()
        ),
        Duration::from_secs(10),
    );
    agent.wait_for_log(
        &format!(
            "policy file {}: 59990 more objects are invalid",
            log_name("31-wide.yaml")
        ),
        Duration::from_secs(20),
    );
    std::fs::remove_file(dir.join("30-deep.yaml")).expect("rm");
    std::fs::remove_file(dir.join("31-wide.yaml")).expect("rm");
    lab.write_external_node(&[VM_IP4, VM_IP6]);

    // Large input rejected: an oversized file (not even read), 150,000 objects (refused before
    // parsing), and a 100,000-element array of bad objects. Memory comes back afterwards.
    std::thread::sleep(Duration::from_secs(3));
    let rss_before = rss_kib(agent.pid());
    println!("agent RSS: {rss_start} KiB at the start, {rss_before} KiB after the 180,000 values");
    assert!(
        rss_before * 10 <= rss_start * 12,
        "RSS {rss_before} KiB after a large accepted parse vs {rss_start} KiB at the start"
    );
    write_atomically(&dir.join("40-huge.yaml"), &"#".repeat(9 << 20));
    write_policy(
        &lab,
        "41-many.json",
        &format!("[{}]", vec!["{\"kind\": 1}"; 150_000].join(",")),
    );
    write_policy(
        &lab,
        "42-array.json",
        &format!("[{}]", vec!["1"; 100_000].join(",")),
    );
    agent.wait_for_log(
        &format!(
            "policy file {}: is 9437184 bytes, more than the 8388608 bytes allowed \
             (standalone.inputLimits.maxFileBytes)",
            log_name("40-huge.yaml")
        ),
        Duration::from_secs(20),
    );
    agent.wait_for_log(
        &format!(
            "policy file {}: more than 200000 elements (standalone.inputLimits.maxElements)",
            log_name("41-many.json")
        ),
        Duration::from_secs(20),
    );
    agent.wait_for_log(
        &format!(
            "policy file {}: 99990 more objects are invalid (only the first 10 are listed)",
            log_name("42-array.json")
        ),
        Duration::from_secs(20),
    );
    assert_drop_holds(&lab, "after the large inputs");
    std::fs::remove_file(dir.join("40-huge.yaml")).expect("rm");
    std::fs::remove_file(dir.join("41-many.json")).expect("rm");
    std::fs::remove_file(dir.join("42-array.json")).expect("rm");
    // The source hands free memory back after a large input, and again 2 s later.
    std::thread::sleep(Duration::from_secs(4));
    let rss_after = rss_kib(agent.pid());
    if std::env::var("HOSTILE_SMAPS").is_ok_and(|v| v == "1") {
        let smaps = std::fs::read_to_string(format!("/proc/{}/smaps", agent.pid())).unwrap_or_default();
        let mut current = String::new();
        let mut rows = Vec::new();
        for l in smaps.lines() {
            if l.chars().next().is_some_and(|c| c.is_ascii_hexdigit())
                && l.contains('-')
                && !l.starts_with("Rss")
            {
                current = l.to_string();
            } else if let Some(v) = l.strip_prefix("Rss:") {
                let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
                rows.push((kb, current.clone()));
            }
        }
        rows.sort();
        for r in rows.iter().rev().take(8) {
            println!("SMAPS {} kB {}", r.0, r.1);
        }
    }
    println!("agent RSS: {rss_before} KiB before the rejected large inputs, {rss_after} KiB after");
    assert!(
        rss_after * 10 <= rss_before * 12,
        "RSS {rss_after} KiB after vs {rss_before} KiB before"
    );

    // The directory removed, then put back: the Drop stays in force meanwhile.
    let gone = lab.dir().join("policies.gone");
    std::fs::rename(&dir, &gone).expect("move the directory away");
    agent.wait_for_log(
        &format!(
            "policy directory {} does not exist (removed or not mounted); keeping the 2 objects \
             last loaded from it until it is back",
            dir.display()
        ),
        Duration::from_secs(20),
    );
    assert_drop_holds(&lab, "while the policy directory is gone");
    std::fs::rename(&gone, &dir).expect("put the directory back");
    std::thread::sleep(Duration::from_secs(1));
    assert_drop_holds(&lab, "after the policy directory is back");
    assert!(agent.is_running());
    agent.stop();
}
