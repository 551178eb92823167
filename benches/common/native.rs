//! The Antrea-native fleet that `native_translate` (pure) and `native_realize` (real OVS)
//! measure: ExternalEntities spread over 10 namespaces, each labelled with one of [`APPS`]
//! apps, and policies (ANNPs and securityops ACNPs, one ingress rule each) applied to the VM
//! (`role: db`) from the entities of one app plus a /24 ipBlock. Policy `i` selects app
//! `i % APPS`, so every app is used and moving an entity between two apps changes the flows of
//! the policies of both.

use serde_json::{json, Value};

/// Distinct `externalEntitySelector` peers.
pub const APPS: usize = 500;

/// The namespaces the inventory is spread over (entity `i` is in `ns{i % NAMESPACES}`).
pub const NAMESPACES: usize = 10;

/// ExternalEntity `host{i}`, labelled `app: a{app}`, with one endpoint IP.
pub fn entity(i: usize, app: usize) -> Value {
    json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
           "metadata": {"name": format!("host{i}"), "namespace": format!("ns{}", i % NAMESPACES),
                        "labels": {"app": format!("a{app}"), "tier": format!("t{}", i % 5)}},
           "spec": {"endpoints": [{"ip": format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256)}]}})
}

/// Policy `i`: an ANNP in `vm-ns` (even `i`) or a securityops ACNP (odd), one ingress rule
/// from app `a{i % APPS}` (any namespace) and a /24, TCP port `1000 + i % 1000`.
pub fn policy(i: usize) -> Value {
    let rule = json!({"action": if i.is_multiple_of(3) { "Drop" } else { "Allow" },
                      "ports": [{"protocol": "TCP", "port": 1000 + (i % 1000)}],
                      "from": [{"externalEntitySelector": {"matchLabels": {"app": format!("a{}", i % APPS)}},
                                "namespaceSelector": {}},
                               {"ipBlock": {"cidr": format!("192.168.{}.0/24", i % 256)}}]});
    if i.is_multiple_of(2) {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
               "metadata": {"name": format!("annp{i}"), "namespace": "vm-ns"},
               "spec": {"priority": 1 + (i % 100), "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                        "ingress": [rule]}})
    } else {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
               "metadata": {"name": format!("acnp{i}")},
               "spec": {"tier": "securityops", "priority": 1 + (i % 100),
                        "appliedTo": [{"externalEntitySelector": {"matchLabels": {"role": "db"}}}],
                        "ingress": [rule]}})
    }
}

/// The app entity `i` is moved to by the `n`th label change: never its current one.
pub fn next_app(current: usize, i: usize, n: usize) -> usize {
    let app = (i + n + 1) % APPS;
    if app == current {
        (app + 1) % APPS
    } else {
        app
    }
}

/// The mixed fleet of `native_memory`, shaped like what users write: custom Tiers next to the
/// built-in ones, ExternalEntities over several namespaces, Antrea Groups (in `vm-ns`) and
/// ClusterGroups referenced by rules, and policies (ANNPs in `vm-ns` for even `i`, ACNPs for
/// odd) of [`mixed::RULES`] rules each, ingress and egress, actions cycling Allow, Drop,
/// Reject, Pass, peers mixing entity selectors, ipBlocks with `except`, group references, and
/// port ranges (`port` + `endPort`).
pub mod mixed {
    use serde_json::{json, Value};

    /// Rules per policy (half ingress, half egress).
    pub const RULES: usize = 10;
    /// The namespaces `ns{n}` of the entities (every seventh entity is in `vm-ns`).
    pub const NAMESPACES: usize = 6;
    /// The entity selectors' apps.
    pub const APPS: usize = 60;
    /// ClusterGroups (the ACNPs' group peers).
    pub const CLUSTER_GROUPS: usize = 40;
    /// Groups in `vm-ns` (the ANNPs' group peers).
    pub const GROUPS: usize = 12;
    /// The custom Tiers (name, priority), next to the built-in securityops and application.
    pub const TIERS: [(&str, i32); 3] = [("infra", 60), ("team-a", 120), ("team-b", 180)];
    /// The tiers the ACNPs are spread over.
    const ACNP_TIERS: [&str; 5] = ["infra", "securityops", "team-a", "team-b", "application"];
    /// The tiers the ANNPs are spread over.
    const ANNP_TIERS: [&str; 3] = ["application", "team-a", "securityops"];

    pub fn tier(name: &str, priority: i32) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Tier", "metadata": {"name": name},
               "spec": {"priority": priority, "description": format!("the {name} tier")}})
    }

    /// Namespace `name`, labelled `team: a` or `team: b` by `n`.
    pub fn namespace(name: &str, n: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Namespace",
               "metadata": {"name": name, "labels": {"team": (["a", "b"][n % 2])}}})
    }

    /// The namespace of entity `i`: every seventh in `vm-ns` (where the Groups select).
    pub fn entity_namespace(i: usize) -> String {
        if i.is_multiple_of(7) {
            "vm-ns".into()
        } else {
            format!("ns{}", i % NAMESPACES)
        }
    }

    /// ExternalEntity `vm{i}`, app `a{i % APPS}`, one endpoint IP.
    pub fn entity(i: usize) -> Value {
        json!({"apiVersion": "crd.antrea.io/v1alpha2", "kind": "ExternalEntity",
               "metadata": {"name": format!("vm{i}"), "namespace": entity_namespace(i),
                            "labels": {"app": format!("a{}", i % APPS), "env": (["prod", "dev"][i % 2])}},
               "spec": {"endpoints": [{"ip": format!("10.{}.{}.{}", 120 + i / 65536, (i / 256) % 256, i % 256)}]}})
    }

    /// ClusterGroup `cg{g}`: the entities of one app in every namespace (even `g`), or a /20
    /// with a hole (odd `g`).
    pub fn cluster_group(g: usize) -> Value {
        let spec = if g.is_multiple_of(2) {
            json!({"externalEntitySelector": {"matchLabels": {"app": format!("a{}", g % APPS)}},
                   "namespaceSelector": {}})
        } else {
            json!({"ipBlocks": [{"cidr": format!("172.{}.0.0/20", 16 + g % 16),
                                 "except": [format!("172.{}.1.0/24", 16 + g % 16)]}]})
        };
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterGroup",
               "metadata": {"name": format!("cg{g}")}, "spec": spec})
    }

    /// Group `grp{g}` in `vm-ns` (an ANNP references the Groups of its own namespace): the
    /// `vm-ns` entities of one app (even `g`), or two ipBlocks, one with a hole (odd `g`).
    pub fn group(g: usize) -> Value {
        let spec = if g.is_multiple_of(2) {
            json!({"externalEntitySelector": {"matchLabels": {"app": format!("a{}", g * 7 % APPS)}}})
        } else {
            json!({"ipBlocks": [{"cidr": format!("100.64.{}.0/22", g * 4 % 256),
                                 "except": [format!("100.64.{}.0/26", g * 4 % 256)]},
                                {"cidr": format!("100.65.{g}.0/24")}]})
        };
        json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "Group",
               "metadata": {"name": format!("grp{g}"), "namespace": "vm-ns"}, "spec": spec})
    }

    /// The first port of rule `r` of policy `i` unless the one-rule change overrides it.
    pub fn first_port(i: usize, r: usize) -> usize {
        1000 + (i * RULES + r) % 2000
    }

    /// Rule `r` of policy `i`, its first port `port`.
    fn rule(i: usize, r: usize, port: usize) -> Value {
        let k = i * RULES + r;
        let action = ["Allow", "Drop", "Reject", "Pass"][k % 4];
        let peer = match r % 4 {
            0 => json!({"externalEntitySelector": {"matchLabels": {"app": format!("a{}", k % APPS)}},
                        "namespaceSelector": {"matchLabels": {"team": (["a", "b"][k % 2])}}}),
            1 => {
                let (a, b) = (200 + (k / 128) % 50, (k * 2) % 256);
                json!({"ipBlock": {"cidr": format!("10.{a}.{b}.0/23"), "except": [format!("10.{a}.{b}.128/25")]}})
            }
            2 if i.is_multiple_of(2) => json!({"group": format!("grp{}", k % GROUPS)}),
            2 => json!({"group": format!("cg{}", k % CLUSTER_GROUPS)}),
            _ => json!({"ipBlock": {"cidr": format!("192.168.{}.0/24", k % 256)}}),
        };
        let ports = if r.is_multiple_of(2) {
            json!([{"protocol": "TCP", "port": port, "endPort": port + 10 + k % 50},
                   {"protocol": "UDP", "port": 53}])
        } else {
            json!([{"protocol": "TCP", "port": port}])
        };
        let side = if r < RULES / 2 { "from" } else { "to" };
        let mut rule = json!({"action": action, "name": format!("r{r}"), "ports": ports});
        rule[side] = json!([peer]);
        rule
    }

    /// Policy `i`; `port` overrides its first rule's first port (the one-rule change).
    pub fn policy(i: usize, port: Option<usize>) -> Value {
        let rules: Vec<Value> = (0..RULES)
            .map(|r| {
                rule(
                    i,
                    r,
                    if r == 0 {
                        port.unwrap_or(first_port(i, r))
                    } else {
                        first_port(i, r)
                    },
                )
            })
            .collect();
        let (ingress, egress) = rules.split_at(RULES / 2);
        let applied = json!([{"externalEntitySelector": {"matchLabels": {"role": "db"}}}]);
        if i.is_multiple_of(2) {
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "NetworkPolicy",
                   "metadata": {"name": format!("annp{i}"), "namespace": "vm-ns"},
                   "spec": {"tier": ANNP_TIERS[(i / 2) % ANNP_TIERS.len()], "priority": 1 + (i % 50),
                            "appliedTo": applied, "ingress": ingress, "egress": egress}})
        } else {
            json!({"apiVersion": "crd.antrea.io/v1beta1", "kind": "ClusterNetworkPolicy",
                   "metadata": {"name": format!("acnp{i}")},
                   "spec": {"tier": ACNP_TIERS[(i / 2) % ACNP_TIERS.len()], "priority": 1.5 + (i % 20) as f64,
                            "appliedTo": applied, "ingress": ingress, "egress": egress}})
        }
    }
}
