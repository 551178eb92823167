//! `antrea-vm-agent compile --state FILE`: the flows the agent would own for a given state,
//! without OVS. Pure: a state document in, rendered flows out. It composes the policy flows
//! (`policy`) with the FQDN clause flows of a given cache (`fqdn`), so it sits above both.
//!
//! The state (YAML or JSON) has the keys `interfaces` (each: `name`, `ofport`, `uplinkOfport`,
//! `ips`, `externalEntity: {namespace, name}`), `policyBypassRules` (the config's schema), and
//! `networkPolicies`, `addressGroups`, `appliedToGroups` (controlplane objects in wire JSON).
//! Flows are rendered like `ovs-ofctl dump-flows --names --no-stats`: Antrea's table names, and
//! the interfaces' ports by name (`eth0`, `"eth0~"`); round 1, meters on, sorted by table then
//! priority (highest first).

use crate::policy::controlplane::Validate as _;
use std::net::IpAddr;

use serde::Deserialize;

use crate::attachment::{AttachedInterface, EntityRef};
use crate::config::{BypassRule, Config};
use crate::fqdn::cache::FqdnCache;
use crate::fqdn::dns::Answer;
use crate::fqdn::flows::{self as fqdn_flows, Placements};
use crate::ovs::openflow::render::{render_flow, NameMap};
use crate::policy::compiler::{CompileOptions, Compiler};
use crate::policy::controlplane::store::PolicyStore;
use crate::policy::controlplane::{ControlplaneObject, Kind};
use crate::policy::flowset::desired_flows;
use crate::policy::fqdn_selector::normalize;
use crate::policy::pipeline::{self, PipelineOptions};
use crate::policy::resolve::resolve;

/// The round the rendered cookies carry.
pub const ROUND: u16 = 1;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StateDoc {
    #[serde(default)]
    interfaces: Vec<InterfaceDoc>,
    #[serde(default)]
    policy_bypass_rules: Vec<serde_json::Value>,
    #[serde(default)]
    network_policies: Vec<serde_json::Value>,
    #[serde(default)]
    address_groups: Vec<serde_json::Value>,
    #[serde(default)]
    applied_to_groups: Vec<serde_json::Value>,
    /// Resolved FQDN names: `[{name, ips}]` (what the FQDN cache would hold).
    #[serde(default)]
    fqdn_cache: Vec<FqdnDoc>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FqdnDoc {
    name: String,
    #[serde(default)]
    ips: Vec<IpAddr>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct InterfaceDoc {
    name: String,
    ofport: u32,
    uplink_ofport: u32,
    #[serde(default)]
    ips: Vec<IpAddr>,
    external_entity: EntityDoc,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntityDoc {
    namespace: String,
    name: String,
}

/// Problems with a state document, each naming the key or object at fault.
#[derive(Debug, thiserror::Error)]
#[error("{}", .problems.join("\n"))]
pub struct StateError {
    pub problems: Vec<String>,
}

/// The result of compiling a state: the flows, warnings about rules that could not be used, and
/// the rules installed fail-closed instead of as written (one line each, naming the policy).
#[derive(Debug, Default)]
pub struct CompiledState {
    pub flows: Vec<String>,
    pub warnings: Vec<String>,
    pub not_enforced: Vec<String>,
}

/// Compiles a state document (YAML or JSON text).
pub fn compile_state(text: &str) -> Result<CompiledState, StateError> {
    compile_state_with(text, Vec::new())
}

/// Compiles a state document with `extra` controlplane objects (e.g. the local controller's
/// translation of Antrea-native policies) added to its own.
pub fn compile_state_with(text: &str, extra: Vec<ControlplaneObject>) -> Result<CompiledState, StateError> {
    let doc: StateDoc = serde_norway::from_str(text).map_err(|e| StateError {
        problems: vec![format!("state: {e}")],
    })?;
    let mut problems = Vec::new();
    let bypass = bypass_rules(&doc.policy_bypass_rules, &mut problems);
    let mut store = PolicyStore::new();
    for (key, kind, objects) in [
        ("networkPolicies", Kind::NetworkPolicy, &doc.network_policies),
        ("addressGroups", Kind::AddressGroup, &doc.address_groups),
        ("appliedToGroups", Kind::AppliedToGroup, &doc.applied_to_groups),
    ] {
        for (i, value) in objects.iter().enumerate() {
            let mut value = value.clone();
            if let Some(obj) = value.as_object_mut() {
                obj.entry("kind").or_insert_with(|| kind.as_str().into());
            }
            let loaded = ControlplaneObject::from_value(value)
                .map_err(|e| e.to_string())
                .and_then(|o| o.validate().map_err(|e| e.to_string()))
                .and_then(|v| store.apply(v).map_err(|e| e.to_string()));
            if let Err(e) = loaded {
                problems.push(format!("{key}[{i}]: {e}"));
            }
        }
    }
    for object in extra {
        let name = format!("{} {}", object.kind(), object.metadata().name);
        let loaded = object
            .validate()
            .map_err(|e| e.to_string())
            .and_then(|v| store.apply(v).map_err(|e| e.to_string()));
        if let Err(e) = loaded {
            problems.push(format!("translated {name}: {e}"));
        }
    }
    if !problems.is_empty() {
        return Err(StateError { problems });
    }
    let interfaces: Vec<AttachedInterface> = doc
        .interfaces
        .into_iter()
        .map(|i| AttachedInterface {
            uplink_name: format!("{}~", i.name),
            name: i.name,
            ofport: i.ofport,
            uplink_ofport: i.uplink_ofport,
            ips: i.ips,
            entity: EntityRef {
                namespace: i.external_entity.namespace,
                name: i.external_entity.name,
            },
        })
        .collect();
    let resolved = resolve(&store, &interfaces);
    let dns_ports: std::collections::BTreeSet<u32> = resolved
        .rules
        .iter()
        .filter_map(|r| r.fqdn.as_ref())
        .flat_map(|f| f.ports.iter().copied())
        .collect();
    let mut flows = desired_flows(
        PipelineOptions {
            round: ROUND,
            meters: true,
        },
        &bypass,
        &interfaces,
        &dns_ports,
    );
    let mut compiler = Compiler::new(CompileOptions::default());
    let compiled = compiler.compile(&resolved.rules, ROUND);
    // The FQDN clause flows the cache's addresses give.
    let placements = Placements::new(compiler.fqdn_placements());
    let mut cache = FqdnCache::new(0);
    let answers: Vec<Answer> = doc
        .fqdn_cache
        .iter()
        .flat_map(|d| {
            d.ips.iter().map(|ip| Answer {
                name: normalize(&d.name),
                ip: *ip,
                ttl: 3600,
            })
        })
        .collect();
    cache.record(&answers, 0, placements.selectors());
    flows.extend(fqdn_flows::desired(&placements, &cache));
    let mut warnings = resolved.warnings;
    warnings.extend(
        compiled
            .skipped
            .iter()
            .map(|s| format!("rule {:?} not compiled: {:?}", s.id, s.reason)),
    );
    flows.extend(compiled.flows);
    let ports = interfaces
        .iter()
        .flat_map(|i| {
            [
                (i.ofport, i.name.clone()),
                (i.uplink_ofport, i.uplink_name.clone()),
            ]
        })
        .collect();
    let names = NameMap {
        tables: pipeline::table_names().into_iter().collect(),
        ports,
    };
    let mut sorted: Vec<_> = flows.into_values().collect();
    sorted.sort_by(|a, b| {
        a.table
            .cmp(&b.table)
            .then(b.priority.cmp(&a.priority))
            .then(a.cmp(b))
    });
    let not_enforced = resolved
        .not_enforced
        .iter()
        .map(|n| format!("NetworkPolicy {}: {}", n.policy, n.message))
        .collect();
    Ok(CompiledState {
        flows: sorted.iter().map(|f| render_flow(f, &names)).collect(),
        warnings,
        not_enforced,
    })
}

/// Validates the bypass rules exactly as the configuration does (same checks, same messages).
fn bypass_rules(rules: &[serde_json::Value], problems: &mut Vec<String>) -> Vec<BypassRule> {
    if rules.is_empty() {
        return Vec::new();
    }
    let doc = serde_json::json!({
        "nodeType": "externalNode",
        "featureGates": {"ExternalNode": true},
        "standalone": {"externalNodeFile": "/dev/null"},
        "externalNode": {"policyBypassRules": rules},
    });
    match serde_norway::to_string(&doc)
        .map_err(|e| e.to_string())
        .and_then(|yaml| {
            Config::from_yaml_str(&yaml).map_err(|errors| {
                errors
                    .problems
                    .iter()
                    .map(|p| format!("{}: {}", p.path, p.message))
                    .collect::<Vec<_>>()
                    .join("; ")
            })
        }) {
        Ok(config) => config.policy_bypass_rules,
        Err(e) => {
            problems.push(e);
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATE: &str = "
interfaces:
- {name: eth0, ofport: 3, uplinkOfport: 2, ips: [10.99.0.2], externalEntity: {namespace: vm-ns, name: vm1-3e616}}
policyBypassRules:
- {direction: ingress, protocol: tcp, cidr: 10.10.10.0/30, port: 30000}
appliedToGroups:
- metadata: {name: atg}
  groupMembers: [{externalEntity: {namespace: vm-ns, name: vm1-3e616}}]
networkPolicies:
- metadata: {name: uid-1, uid: uid-1}
  sourceRef: {type: AntreaNetworkPolicy, namespace: vm-ns, name: np, uid: uid-1}
  appliedToGroups: [atg]
  priority: 5
  tierPriority: 250
  rules:
  - {direction: In, from: {ipBlocks: [{cidr: 10.0.0.0/8}]}, services: [{protocol: TCP, port: 22}], action: Drop, priority: 0}
";

    #[test]
    fn a_state_compiles_into_sorted_flows_with_table_names() {
        let out = compile_state(STATE).expect("valid state");
        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        let flows = out.flows;
        assert!(flows[0].contains("table=PipelineRootClassifier"), "{}", flows[0]);
        assert!(flows.iter().any(|f| f
            == "cookie=0x1080000000000, table=IngressSecurityClassifier, priority=200,ct_state=+new+trk,tcp,nw_src=10.10.10.0/30,tp_dst=30000 actions=goto_table:IngressMetric"));
        assert!(flows
            .iter()
            .any(|f| f.contains("table=L2ForwardingCalc") && f.contains("in_port=eth0 ")));
        assert!(flows
            .iter()
            .any(|f| f.contains("table=NonIP") && f.contains("in_port=\"eth0~\"")));
        assert!(flows
            .iter()
            .any(|f| f.contains("conj_id=") && f.contains("table=AntreaPolicyIngressRule")));
        assert!(flows
            .iter()
            .any(|f| f.contains("nw_src=10.0.0.0/8") && f.contains("conjunction(")));
        // Sorted by table, then priority from high to low.
        let keys: Vec<(u8, u16)> = flows
            .iter()
            .map(|f| {
                let table = pipeline::table_names()
                    .iter()
                    .find(|(_, n)| f.contains(&format!("table={n},")))
                    .map_or(255, |(id, _)| *id);
                let prio = f
                    .split("priority=")
                    .nth(1)
                    .and_then(|p| p.split([',', ' ']).next())
                    .and_then(|p| p.parse().ok());
                (table, prio.unwrap_or(0))
            })
            .collect();
        let mut expected = keys.clone();
        expected.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        assert_eq!(keys, expected);
    }

    /// A state with one rule (`RULE` replaced) applied to eth0, whose ExternalEntity declares
    /// `mdns` as UDP 5353.
    fn one_rule_state(rule: &str) -> String {
        format!(
            "
interfaces:
- {{name: eth0, ofport: 3, uplinkOfport: 2, ips: [10.99.0.2], externalEntity: {{namespace: vm-ns, name: vm1-3e616}}}}
appliedToGroups:
- metadata: {{name: atg}}
  groupMembers: [{{externalEntity: {{namespace: vm-ns, name: vm1-3e616}}, ports: [{{name: mdns, port: 5353, protocol: UDP}}]}}]
networkPolicies:
- metadata: {{name: uid-1, uid: uid-1}}
  sourceRef: {{type: AntreaClusterNetworkPolicy, name: np, uid: uid-1}}
  appliedToGroups: [atg]
  priority: 5
  tierPriority: 250
  rules:
  - {rule}
"
        )
    }

    #[test]
    fn rules_not_enforced_as_written_compile_fail_closed() {
        // An L7 Allow compiles to the flows of the same rule written as a Drop, and is reported.
        let l7 = compile_state(&one_rule_state(
            "{direction: In, name: allow-ok, from: {ipBlocks: [{cidr: 0.0.0.0/0}]}, services: [{protocol: TCP, port: 8080}], \
             l7Protocols: [{http: {method: GET, path: /ok}}], action: Allow}",
        ))
        .expect("valid");
        let drop = compile_state(&one_rule_state(
            "{direction: In, name: allow-ok, from: {ipBlocks: [{cidr: 0.0.0.0/0}]}, services: [{protocol: TCP, port: 8080}], action: Drop}",
        ))
        .expect("valid");
        assert_eq!(l7.flows, drop.flows);
        assert!(drop.not_enforced.is_empty());
        assert_eq!(l7.not_enforced.len(), 1);
        assert!(
            l7.not_enforced[0].starts_with("NetworkPolicy uid-1: rule \"allow-ok\" (rules[0]): l7Protocols"),
            "{:?}",
            l7.not_enforced
        );

        // A toServices peer next to an ipBlock: the flows of the ipBlock alone, reported.
        let svc = compile_state(&one_rule_state(
            "{direction: Out, to: {toServices: [{namespace: ns, name: db}], ipBlocks: [{cidr: 192.168.1.0/24}]}, action: Allow}",
        ))
        .expect("valid");
        let ip_only = compile_state(&one_rule_state(
            "{direction: Out, to: {ipBlocks: [{cidr: 192.168.1.0/24}]}, action: Allow}",
        ))
        .expect("valid");
        assert_eq!(svc.flows, ip_only.flows);
        assert!(svc.not_enforced[0].contains("toServices peers (ns/db) need AntreaProxy"));
        // An FQDN peer is enforced: nothing reported.
        let fqdn = compile_state(&one_rule_state(
            "{direction: Out, to: {fqdns: [db.example.com], ipBlocks: [{cidr: 192.168.1.0/24}]}, action: Allow}",
        ))
        .expect("valid");
        assert!(fqdn.not_enforced.is_empty(), "{:?}", fqdn.not_enforced);

        // A named port without a protocol takes the member's UDP.
        let named = compile_state(&one_rule_state(
            "{direction: In, from: {ipBlocks: [{cidr: 10.0.0.0/8}]}, services: [{port: mdns}], action: Drop}",
        ))
        .expect("valid");
        assert!(named.warnings.is_empty() && named.not_enforced.is_empty());
        assert!(
            named
                .flows
                .iter()
                .any(|f| f.contains("udp,tp_dst=5353") && f.contains("conjunction(")),
            "{:#?}",
            named.flows
        );
        assert!(!named.flows.iter().any(|f| f.contains("tcp,tp_dst=5353")));
    }

    #[test]
    fn bad_state_names_the_key_and_object() {
        let err =
            compile_state("policyBypassRules: [{direction: up, protocol: tcp, cidr: 1.2.3.0/24, port: 1}]\n")
                .expect_err("bad bypass rule");
        assert!(
            err.to_string()
                .contains("direction up for policyBypassRule is invalid"),
            "{err}"
        );
        let err = compile_state("networkPolicies: [{metadata: {name: p}, rules: [{direction: Sideways}]}]\n")
            .expect_err("bad policy");
        assert!(err.to_string().starts_with("networkPolicies[0]:"), "{err}");
        let err = compile_state("interface: []\n").expect_err("unknown key");
        assert!(err.to_string().contains("interface"), "{err}");
    }
}
