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
