//! The ExternalNode custom resource (`crd.antrea.io/v1alpha1`, kind `ExternalNode`): its wire
//! shape, validation into the agent's typed view, the ExternalEntity naming rule, and the
//! ExternalEntities antrea-controller derives from it (`local_entities`, the local controller's
//! input: `policy` gets them as values and does not name this module).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::error_kind::ErrorKind;
use crate::policy::native::Entity;

pub const API_VERSION: &str = "crd.antrea.io/v1alpha1";
pub const KIND: &str = "ExternalNode";

/// The object as it appears on the wire or in a file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExternalNodeObject {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub spec: Option<ExternalNodeSpecWire>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExternalNodeSpecWire {
    #[serde(default)]
    pub interfaces: Vec<NetworkInterfaceWire>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkInterfaceWire {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ips: Vec<String>,
}

/// A validated ExternalNode: what the agent acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalNode {
    pub name: String,
    pub namespace: String,
    pub interfaces: Vec<ExternalNodeInterface>,
    /// Where it came from, for error messages (e.g. `file /etc/antrea/external-node.yaml`);
    /// set by the watcher, empty when unknown.
    pub source: String,
}

/// One interface of an ExternalNode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExternalNodeInterface {
    /// `spec.interfaces[i].name`; empty when not given.
    pub name: String,
    pub ips: Vec<IpAddr>,
    /// The ExternalEntity that represents this interface in policies.
    pub entity_name: String,
}

/// An ExternalNode object that cannot be used, naming the field at fault.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("ExternalNode {object}: {field}: {message}")]
pub struct InvalidExternalNode {
    /// `namespace/name` (or what is known of it).
    pub object: String,
    /// e.g. `spec.interfaces[0].ips[1]`.
    pub field: String,
    pub message: String,
}

impl InvalidExternalNode {
    pub fn kind(&self) -> ErrorKind {
        ErrorKind::ExternalNode
    }
}

/// Antrea's ExternalEntity name for an interface (the naming rule is shared with the API
/// emulator, so it lives in the wire crate).
pub use antrea_controlplane::naming::external_entity_name;

/// The ExternalEntities antrea-controller derives from an ExternalNode: one per interface,
/// named by [`external_entity_name`], in the ExternalNode's namespace, with its labels and the
/// interface's IPs.
pub fn local_entities(node: &ExternalNodeObject) -> Vec<Entity> {
    let Some(spec) = &node.spec else {
        return Vec::new();
    };
    spec.interfaces
        .iter()
        .map(|iface| Entity {
            namespace: node.metadata.namespace.clone(),
            name: external_entity_name(&node.metadata.name, &iface.name),
            labels: node.metadata.labels.clone(),
            ips: iface.ips.iter().filter_map(|ip| ip.parse().ok()).collect(),
            ports: Vec::new(),
            local: true,
        })
        .collect()
}

impl ExternalNodeObject {
    /// Validates the object for the agent named `node_name` in `namespace`.
    pub fn validate(&self, node_name: &str, namespace: &str) -> Result<ExternalNode, InvalidExternalNode> {
        let object = format!("{}/{}", self.metadata.namespace, self.metadata.name);
        let bad = |field: &str, message: String| InvalidExternalNode {
            object: object.clone(),
            field: field.to_string(),
            message,
        };
        if !self.api_version.is_empty() && self.api_version != API_VERSION {
            return Err(bad(
                "apiVersion",
                format!("must be {API_VERSION}, got {}", self.api_version),
            ));
        }
        if !self.kind.is_empty() && self.kind != KIND {
            return Err(bad("kind", format!("must be {KIND}, got {}", self.kind)));
        }
        if self.metadata.name != node_name {
            return Err(bad(
                "metadata.name",
                format!(
                    "is {:?} but this agent's node name is {node_name:?} (NODE_NAME or hostname)",
                    self.metadata.name
                ),
            ));
        }
        if !self.metadata.namespace.is_empty() && self.metadata.namespace != namespace {
            return Err(bad(
                "metadata.namespace",
                format!(
                    "is {:?} but externalNode.externalNodeNamespace is {namespace:?}",
                    self.metadata.namespace
                ),
            ));
        }
        let spec = self
            .spec
            .as_ref()
            .ok_or_else(|| bad("spec", "is required".into()))?;
        if spec.interfaces.is_empty() {
            return Err(bad("spec.interfaces", "must list at least one interface".into()));
        }
        if spec.interfaces.len() > 1 && spec.interfaces.iter().any(|i| i.name.is_empty()) {
            return Err(bad(
                "spec.interfaces",
                "every interface needs a name when more than one is listed".into(),
            ));
        }
        let mut interfaces = Vec::new();
        for (i, iface) in spec.interfaces.iter().enumerate() {
            if iface.ips.is_empty() {
                return Err(bad(
                    &format!("spec.interfaces[{i}].ips"),
                    "is empty: the CRD allows an interface named without IPs, but this agent finds \
                     and polices interfaces by their IPs and refuses it (list the interface's IPs)"
                        .into(),
                ));
            }
            let mut ips = Vec::new();
            for (j, ip) in iface.ips.iter().enumerate() {
                let parsed: IpAddr = ip.trim().parse().map_err(|_| {
                    bad(
                        &format!("spec.interfaces[{i}].ips[{j}]"),
                        format!("{ip:?} is not an IP address"),
                    )
                })?;
                if let Some(why) = unusable_ip(parsed) {
                    return Err(bad(
                        &format!("spec.interfaces[{i}].ips[{j}]"),
                        format!("{ip} is {why}; an uplink needs an address other hosts can reach"),
                    ));
                }
                ips.push(parsed);
            }
            if ips.iter().all(is_link_local) {
                return Err(bad(
                    &format!("spec.interfaces[{i}].ips"),
                    "lists only link-local addresses, which cannot identify an uplink \
                     (every interface has one); list the interface's routable addresses"
                        .into(),
                ));
            }
            ips.sort();
            ips.dedup();
            interfaces.push(ExternalNodeInterface {
                name: iface.name.clone(),
                ips,
                entity_name: external_entity_name(&self.metadata.name, &iface.name),
            });
        }
        Ok(ExternalNode {
            name: self.metadata.name.clone(),
            namespace: namespace.to_string(),
            interfaces,
            source: String::new(),
        })
    }
}

/// Why an IP can never identify an uplink, if it cannot: loopback, unspecified, multicast or
/// broadcast addresses.
fn unusable_ip(ip: IpAddr) -> Option<&'static str> {
    let ip = ip.to_canonical();
    if ip.is_loopback() {
        Some("a loopback address")
    } else if ip.is_unspecified() {
        Some("the unspecified address")
    } else if ip.is_multicast() {
        Some("a multicast address")
    } else if matches!(ip, IpAddr::V4(v4) if v4.is_broadcast()) {
        Some("the broadcast address")
    } else {
        None
    }
}

/// IPv4 169.254.0.0/16 or IPv6 fe80::/10.
fn is_link_local(ip: &IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entity_names_match_antrea() {
        assert_eq!(external_entity_name("vm1", ""), "vm1");
        assert_eq!(external_entity_name("vm2", "ens192"), "vm2-e8be5");
        assert_eq!(external_entity_name("vm1", "eth0"), "vm1-3e616");
        assert_eq!(external_entity_name("win-vm", "Ethernet 2"), "win-vm-50b31");
    }

    fn object(yaml: &str) -> ExternalNodeObject {
        serde_norway::from_str(yaml).expect("test yaml")
    }

    #[test]
    fn valid_object_is_accepted() {
        let en = object(
            "apiVersion: crd.antrea.io/v1alpha1\nkind: ExternalNode\nmetadata: {name: vm1, namespace: vm-ns}\n\
             spec: {interfaces: [{name: eth0, ips: [\"fd00::2\", \"10.0.0.2\"]}]}\n",
        );
        let v = en.validate("vm1", "vm-ns").expect("valid");
        assert_eq!(
            v.interfaces[0].ips,
            vec!["10.0.0.2".parse::<IpAddr>().unwrap(), "fd00::2".parse().unwrap()]
        );
        assert_eq!(v.interfaces[0].entity_name, "vm1-3e616");
    }

    #[test]
    fn errors_name_the_field() {
        let en = object("metadata: {name: vm1}\nspec: {interfaces: [{ips: [\"10.0.0.300\"]}]}\n");
        let err = en.validate("vm1", "default").expect_err("bad ip");
        assert_eq!(err.field, "spec.interfaces[0].ips[0]");
        let en = object("metadata: {name: other}\nspec: {interfaces: [{ips: [\"10.0.0.3\"]}]}\n");
        assert_eq!(
            en.validate("vm1", "default").expect_err("name").field,
            "metadata.name"
        );
        let en = object("metadata: {name: vm1}\n");
        assert_eq!(en.validate("vm1", "default").expect_err("spec").field, "spec");
        let en = object("metadata: {name: vm1}\nspec: {interfaces: [{ips: [\"10.0.0.3\"]}, {name: b, ips: [\"10.1.0.3\"]}]}\n");
        assert_eq!(
            en.validate("vm1", "default").expect_err("names").field,
            "spec.interfaces"
        );
    }

    #[test]
    fn loopback_link_local_only_and_other_unusable_ips_are_refused() {
        let err = |ips: &str| {
            object(&format!(
                "metadata: {{name: vm1}}\nspec: {{interfaces: [{{ips: [{ips}]}}]}}\n"
            ))
            .validate("vm1", "default")
            .expect_err("refused")
            .to_string()
        };
        assert_eq!(
            err("\"127.0.0.1\""),
            "ExternalNode /vm1: spec.interfaces[0].ips[0]: 127.0.0.1 is a loopback address; \
             an uplink needs an address other hosts can reach"
        );
        assert!(err("\"10.0.0.2\", \"::1\"")
            .starts_with("ExternalNode /vm1: spec.interfaces[0].ips[1]: ::1 is a loopback address"));
        assert!(err("\"::ffff:127.0.0.2\"").contains("is a loopback address"));
        assert!(err("\"0.0.0.0\"").contains("the unspecified address"));
        assert!(err("\"ff02::1\"").contains("a multicast address"));
        assert!(err("\"255.255.255.255\"").contains("the broadcast address"));
        assert_eq!(
            err("\"fe80::1\", \"169.254.1.1\""),
            "ExternalNode /vm1: spec.interfaces[0].ips: lists only link-local addresses, which \
             cannot identify an uplink (every interface has one); list the interface's routable \
             addresses"
        );
        // A link-local address next to a routable one is accepted.
        let ok = object("metadata: {name: vm1}\nspec: {interfaces: [{ips: [\"fe80::1\", \"10.0.0.2\"]}]}\n");
        assert!(ok.validate("vm1", "default").is_ok());
    }
}
