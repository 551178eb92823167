//! The policy files of the benches' fleets, as YAML text: 2,000 NetworkPolicies x 5 rules by
//! default, with the priorities drawn three ways ([`Fleet`]). `policy_realize`, `fqdn_hold` and
//! `reject_latency` write them into the lab agent's policy directory (the last two the
//! fractional fleet); `policy_parse` parses them in-process, phase by phase.

/// Rules in each fleet policy: 2,000 policies make the 10,000 rules.
pub const RULES_PER_POLICY: usize = 5;

/// The default step of the fractional fleet's policy priorities (`1 + 0.07 i`).
pub const FRACTIONAL_STEP: f64 = 0.07;

/// The AppliedToGroup holding this lab VM's eth0 ExternalEntity.
pub const APPLIED_TO: &str = "\
apiVersion: controlplane.antrea.io/v1beta2
kind: AppliedToGroup
metadata: {name: atg-vm1}
groupMembers: [{externalEntity: {name: vm1-3e616, namespace: vm-ns}}]
";

/// How a fleet's policy priorities are drawn (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fleet {
    Fractional(f64),
    Whole,
    OneTier,
}

impl Fleet {
    pub fn parse(name: &str, step: f64) -> Fleet {
        match name.trim() {
            "fractional" => Fleet::Fractional(step),
            "whole" => Fleet::Whole,
            "one-tier" => Fleet::OneTier,
            other => panic!("PRBENCH_FLEETS: unknown fleet {other:?} (fractional, whole, one-tier)"),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Fleet::Fractional(step) => format!("fractional (Application tier, priority 1 + {step} i)"),
            Fleet::Whole => "whole (tiers 50/100/150/200/250, priorities 1, 2, 5, 10, 20, 50, 100 shared by many policies)".into(),
            Fleet::OneTier => "one-tier (Application tier, priority 1 + i, whole numbers)".into(),
        }
    }

    pub fn label(&self) -> &'static str {
        match self {
            Fleet::Fractional(_) => "fractional",
            Fleet::Whole => "whole",
            Fleet::OneTier => "one-tier",
        }
    }

    /// (tier priority, policy priority) of policy `i`.
    pub fn priority(&self, i: usize) -> (i32, f64) {
        match self {
            Fleet::Fractional(step) => (250, 1.0 + i as f64 * step),
            Fleet::Whole => {
                // Most policies in the Application tier, the rest spread over the others.
                let tier = [250, 250, 250, 200, 150, 100, 50, 250][i % 8];
                let priority = [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0][(i / 8) % 7];
                (tier, priority)
            }
            Fleet::OneTier => (250, 1.0 + i as f64),
        }
    }
}

/// NetworkPolicy `i` of the fleet: 5 rules, alternating ingress and egress, a /24 peer plus a
/// /16 (or an IPv6 /8), TCP 22 plus a port range, actions cycling Allow, Drop, Reject, Pass.
pub fn fleet_policy(i: usize, fleet: Fleet) -> String {
    let mut rules = String::new();
    for r in 0..RULES_PER_POLICY {
        let k = i * RULES_PER_POLICY + r;
        let cidr = format!("{}.{}.{}.0/24", 10 + k / 65536, (k / 256) % 256, k % 256);
        let peer = if k.is_multiple_of(2) {
            format!("direction: In, from: {{ipBlocks: [{{cidr: {cidr}}}, {{cidr: 192.168.0.0/16}}]}}")
        } else {
            format!("direction: Out, to: {{ipBlocks: [{{cidr: {cidr}}}, {{cidr: \"fd00::/8\"}}]}}")
        };
        let action = ["Allow", "Drop", "Reject", "Pass"][k % 4];
        rules.push_str(&format!(
            "- {{{peer}, services: [{{protocol: TCP, port: 22}}, {{protocol: TCP, port: 8000, endPort: {}}}], \
             action: {action}, priority: {r}}}\n",
            8080 + k % 7
        ));
    }
    let (tier, priority) = fleet.priority(i);
    policy(&format!("fleet-{i}"), tier, priority, &rules)
}

/// The policy added, changed and deleted in step 2 (one ingress rule).
pub fn incremental_policy(j: usize, port: usize) -> String {
    policy(
        &format!("inc-{j}"),
        250,
        0.5,
        &format!(
            "- {{direction: In, from: {{ipBlocks: [{{cidr: 10.250.{}.0/24}}]}}, \
             services: [{{protocol: TCP, port: {port}}}], action: Drop, priority: 0}}\n",
            j % 256
        ),
    )
}

/// A NetworkPolicy object applied to the lab VM, in YAML.
pub fn policy(name: &str, tier_priority: i32, priority: f64, rules: &str) -> String {
    format!(
        "apiVersion: controlplane.antrea.io/v1beta2
kind: NetworkPolicy
metadata: {{name: uid-{name}, uid: uid-{name}}}
sourceRef: {{type: AntreaClusterNetworkPolicy, name: {name}, uid: uid-{name}}}
appliedToGroups: [atg-vm1]
priority: {priority}
tierPriority: {tier_priority}
rules:
{rules}"
    )
}

/// The same object as JSON text (what `.json` policy files hold).
pub fn as_json(yaml: &str) -> String {
    let value: serde_json::Value = serde_norway::from_str(yaml).expect("a fleet policy is YAML");
    serde_json::to_string(&value).expect("JSON")
}
