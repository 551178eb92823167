//! Antrea-native policies in `standalone.policyDir`, translated by the local controller and
//! enforced on real traffic: the seed example verbatim (SSH from the `role: front`
//! inventory host rejected with a RST, from another address allowed unless 172.16.100.5), an
//! ACNP in a higher tier overriding the ANNP, a ClusterGroup used by two policies, a label change
//! on an inventory ExternalEntity taking effect live, and a policy deleted.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test crate: failing loudly is the point

mod support;

use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::Duration;

use support::*;

/// The seed example, verbatim.
const SEED_ANNP: &str = include_str!("fixtures/seed-annp.yaml");

/// Another address of the outside host, in no policy.
const OTHER_SRC: &str = "172.16.100.6";
const DENIED_SRC: &str = "172.16.100.5";

fn inventory(front_role: &str) -> String {
    format!(
        "apiVersion: crd.antrea.io/v1alpha2
kind: ExternalEntity
metadata: {{name: front1, namespace: vm-ns, labels: {{role: {front_role}}}}}
spec: {{endpoints: [{{ip: {EXT_IP4}}}]}}
"
    )
}

const FRONT_GROUP: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: front-hosts}
spec: {externalEntitySelector: {matchLabels: {role: front}}}
";

/// In the securityops tier (priority 100), ahead of the ANNP's application tier.
const ACNP_ALLOW_SSH: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: ops-allow-ssh}
spec:
  tier: securityops
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Allow, name: ssh-from-front, ports: [{protocol: TCP, port: 22}], from: [{group: front-hosts}]}
";

/// The same ClusterGroup in a second policy.
const ACNP_DROP_8080: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: app-drop-8080}
spec:
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Drop, ports: [{protocol: TCP, port: 8080}], from: [{group: front-hosts}]}
";

fn policy_dir(lab: &Lab) -> PathBuf {
    let dir = lab.dir().join("policies");
    std::fs::create_dir_all(&dir).expect("create the policy dir");
    dir
}

fn write_policy(lab: &Lab, file: &str, yaml: &str) {
    let dir = policy_dir(lab);
    let tmp = dir.join(format!(".{file}.tmp"));
    std::fs::write(&tmp, yaml).expect("write policy");
    std::fs::rename(&tmp, dir.join(file)).expect("move policy in place");
}

/// The lab's ExternalNode, labelled `role: db` (its ExternalEntity carries the label).
fn write_db_external_node(lab: &Lab) {
    let text = format!(
        "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\n\
         metadata: {{name: {NODE_NAME}, namespace: {EN_NAMESPACE}, labels: {{role: db}}}}\n\
         spec: {{interfaces: [{{name: {NIC}, ips: [\"{VM_IP4}\", \"{VM_IP6}\"]}}]}}\n"
    );
    let tmp = lab.dir().join(".en.tmp");
    std::fs::write(&tmp, text).expect("write the ExternalNode file");
    std::fs::rename(&tmp, lab.en_file()).expect("move the ExternalNode file in place");
}

/// How a TCP connection from `src` in the outside host to the VM's `port` ends.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Connected,
    /// A RST came back.
    Refused,
    /// Nothing came back.
    TimedOut,
}

fn connect(lab: &Lab, src: &str, port: u16) -> Outcome {
    let out = lab.ext(&format!("nc -z -v -n -w 2 -s {src} {VM_IP4} {port}"));
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    if out.status.success() {
        Outcome::Connected
    } else if err.contains("refused") {
        Outcome::Refused
    } else {
        Outcome::TimedOut
    }
}

/// Listeners in the VM on every port the test uses (so that a refusal can only be the policy's).
fn listen(lab: &Lab, port: u16) -> Child {
    let mut c = lab.ns_command(lab.vm_ns(), "nc");
    c.args(["-l", "-k", "-n", VM_IP4, &port.to_string()]);
    c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    c.spawn().expect("start nc -l -k")
}

fn wait_outcome(lab: &Lab, src: &str, port: u16, want: Outcome, what: &str) {
    wait_until(Duration::from_secs(20), what, || connect(lab, src, port) == want);
}

/// The VM of both tests: attached in standalone mode with the inventory and the seed ANNP, the
/// outside host's other addresses routed through it, and listeners on TCP 22, 8080 and 9443.
fn seeded_vm(lab: &Lab) -> (AgentProcess, Vec<Child>) {
    // The outside host's other addresses, routed from the VM through it.
    lab.ext_ok(&format!(
        "ip addr add {DENIED_SRC}/32 dev {EXT_NIC} && ip addr add {OTHER_SRC}/32 dev {EXT_NIC}"
    ));
    write_policy(lab, "inventory.yaml", &inventory("front"));
    write_policy(lab, "annp1.yaml", SEED_ANNP);
    let config = lab.write_config(&format!(
        "standalone:\n  policyDir: {}\n",
        policy_dir(lab).display()
    ));
    write_db_external_node(lab);
    let agent = lab.start_agent(&config);
    lab.isolate_uplink();
    wait_until(Duration::from_secs(30), "attached", || {
        lab.vm_addrs(NIC).iter().any(|a| a.starts_with(VM_IP4))
    });
    lab.vm_ok(&format!("ip route replace 172.16.100.0/24 via {EXT_IP4}"));
    let listeners = vec![listen(lab, 22), listen(lab, 8080), listen(lab, 9443)];
    (agent, listeners)
}

#[test]
fn antrea_native_policies_on_real_traffic() {
    let lab = Lab::new();
    let (mut agent, mut listeners) = seeded_vm(&lab);

    // The seed example.
    wait_outcome(
        &lab,
        EXT_IP4,
        22,
        Outcome::Refused,
        "SSH from the role:front host rejected",
    );
    assert_eq!(
        connect(&lab, OTHER_SRC, 22),
        Outcome::Connected,
        "SSH from another address"
    );
    assert_eq!(
        connect(&lab, DENIED_SRC, 22),
        Outcome::Refused,
        "SSH from 172.16.100.5 rejected"
    );
    assert_eq!(
        connect(&lab, EXT_IP4, 8080),
        Outcome::Connected,
        "another port is not matched"
    );

    // An ACNP in a higher tier (securityops) allows what the ANNP rejects; a ClusterGroup used by
    // it and by a second ACNP that drops 8080.
    write_policy(&lab, "front-hosts.yaml", FRONT_GROUP);
    write_policy(&lab, "acnp-allow-ssh.yaml", ACNP_ALLOW_SSH);
    write_policy(&lab, "acnp-drop-8080.yaml", ACNP_DROP_8080);
    wait_outcome(
        &lab,
        EXT_IP4,
        22,
        Outcome::Connected,
        "the higher tier's Allow wins",
    );
    wait_outcome(
        &lab,
        EXT_IP4,
        8080,
        Outcome::TimedOut,
        "8080 from the group dropped",
    );
    assert_eq!(
        connect(&lab, DENIED_SRC, 22),
        Outcome::Refused,
        "the ANNP still rejects its ipBlock"
    );
    assert_eq!(
        connect(&lab, OTHER_SRC, 8080),
        Outcome::Connected,
        "8080 from outside the group"
    );

    // A label change on the inventory ExternalEntity: it leaves the group and the selector, so
    // neither ACNP nor the ANNP matches it any more.
    write_policy(&lab, "inventory.yaml", &inventory("other"));
    wait_outcome(
        &lab,
        EXT_IP4,
        8080,
        Outcome::Connected,
        "8080 passes once the label changed",
    );
    assert_eq!(connect(&lab, EXT_IP4, 22), Outcome::Connected);
    // And back: the group holds it again.
    write_policy(&lab, "inventory.yaml", &inventory("front"));
    wait_outcome(
        &lab,
        EXT_IP4,
        8080,
        Outcome::TimedOut,
        "8080 dropped again after the label is back",
    );

    // A policy deleted: the ANNP's reject of 172.16.100.5 goes away.
    std::fs::remove_file(policy_dir(&lab).join("annp1.yaml")).expect("delete the ANNP");
    wait_outcome(
        &lab,
        DENIED_SRC,
        22,
        Outcome::Connected,
        "SSH from 172.16.100.5 after the delete",
    );
    assert_eq!(
        connect(&lab, EXT_IP4, 8080),
        Outcome::TimedOut,
        "the other policies stay"
    );

    // An invalid edit is reported and changes nothing.
    write_policy(
        &lab,
        "acnp-drop-8080.yaml",
        &ACNP_DROP_8080.replace("action: Drop", "action: Deny"),
    );
    agent.wait_for_log(
        "spec.ingress[0].action: Unsupported value",
        Duration::from_secs(20),
    );
    assert_eq!(
        connect(&lab, EXT_IP4, 8080),
        Outcome::TimedOut,
        "the last valid version stays"
    );

    for l in &mut listeners {
        let _ = l.kill();
        let _ = l.wait();
    }
    agent.stop();
}

/// The corners where a policy must mean what antrea-controller makes of it, on real traffic:
/// an Allow through a ClusterGroup nested too deep (`childGroupsNestingExceeded`: it matches
/// nothing, its valid ipBlock child included) and an Allow with `toServices: []` (a peer that
/// matches nothing) admit nothing, so the seed ANNP's Reject of SSH stays; a Drop whose other
/// peer names a missing ClusterGroup still drops through its ipBlock (the policy is enforced,
/// not refused); an egress Drop with `toServices: []` blocks nothing; a Drop from Pods (whose
/// addresses the VM cannot know) is enforced fail-closed, from any address.
const CORNERS: &str = "\
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-front-ip}
spec: {ipBlocks: [{cidr: 10.99.0.1/32}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-leaf}
spec: {externalEntitySelector: {matchLabels: {role: front}}}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-parent}
spec: {childGroups: [cg-leaf]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterGroup
metadata: {name: cg-mixed}
spec: {childGroups: [cg-front-ip, cg-parent]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-ssh-nested}
spec:
  tier: securityops
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Allow, name: nested, ports: [{protocol: TCP, port: 22}], from: [{group: cg-mixed}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: allow-ssh-no-services}
spec:
  tier: securityops
  priority: 6
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Allow, name: no-services, ports: [{protocol: TCP, port: 22}], toServices: []}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: drop-8080-missing-group}
spec:
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Drop, name: d, ports: [{protocol: TCP, port: 8080}], from: [{group: no-such-group}, {ipBlock: {cidr: 172.16.100.5/32}}]}
---
apiVersion: crd.antrea.io/v1beta1
kind: NetworkPolicy
metadata: {name: egress-no-services, namespace: vm-ns}
spec:
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  egress:
  - {action: Drop, name: e, toServices: []}
---
apiVersion: crd.antrea.io/v1beta1
kind: ClusterNetworkPolicy
metadata: {name: drop-9443-from-pods}
spec:
  priority: 5
  appliedTo: [{externalEntitySelector: {matchLabels: {role: db}}}]
  ingress:
  - {action: Drop, name: pods, ports: [{protocol: TCP, port: 9443}], from: [{podSelector: {}}]}
";

#[test]
fn antrea_native_corners_keep_denied_what_antrea_denies() {
    let lab = Lab::new();
    let (mut agent, mut listeners) = seeded_vm(&lab);
    let mut outside = lab.ns_command(lab.ext_ns(), "nc");
    outside.args(["-l", "-k", "-n", EXT_IP4, "9000"]);
    outside
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    listeners.push(outside.spawn().expect("start nc -l -k outside"));
    wait_outcome(&lab, EXT_IP4, 22, Outcome::Refused, "the seed ANNP rejects SSH");

    write_policy(&lab, "corners.yaml", CORNERS);
    // The file is one snapshot: once its Drop is in force, so are its Allows.
    wait_outcome(
        &lab,
        DENIED_SRC,
        8080,
        Outcome::TimedOut,
        "a Drop next to a missing group's peer drops through its ipBlock",
    );
    assert_eq!(
        connect(&lab, EXT_IP4, 22),
        Outcome::Refused,
        "neither the over-nested group nor toServices: [] lets SSH through the seed's Reject"
    );
    assert_eq!(
        connect(&lab, OTHER_SRC, 22),
        Outcome::Connected,
        "SSH from elsewhere"
    );
    assert_eq!(
        connect(&lab, OTHER_SRC, 8080),
        Outcome::Connected,
        "8080 from elsewhere"
    );
    // Pods the VM cannot know the addresses of: Antrea drops from them, so the rule is kept
    // fail-closed, dropping from every address, and the rest of the host stays reachable.
    assert_eq!(
        connect(&lab, OTHER_SRC, 9443),
        Outcome::TimedOut,
        "a Drop from Pods is enforced fail-closed, from any address"
    );
    agent.wait_for_log("enforced fail-closed", Duration::from_secs(20));
    let egress = lab.vm(&format!("nc -z -n -w 2 {EXT_IP4} 9000"));
    assert!(
        egress.status.success(),
        "an egress Drop with toServices: [] blocks nothing: {}",
        String::from_utf8_lossy(&egress.stderr)
    );
    agent.wait_for_log("is not realized and matches nothing", Duration::from_secs(20));

    for l in &mut listeners {
        let _ = l.kill();
        let _ = l.wait();
    }
    agent.stop();
}
