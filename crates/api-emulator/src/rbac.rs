//! Kubernetes RBAC as the emulator enforces it: parses the manifests of
//! `deploy/kubernetes/vm-agent-rbac.yml` (ServiceAccounts, token Secrets, (Cluster)Roles and their
//! bindings) and answers "may this identity do this verb on this resource" with kube-apiserver's
//! RBAC rules (group/resource/subresource/resourceNames matching, RoleBindings scoped to their
//! namespace, `system:masters` allowed everything).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

// The manifest lives outside this crate (the deploy/ tree is the source of truth): fine for a
// workspace crate that is never packaged (publish = false).
/// The RBAC manifests bundled with the crate (namespace `vm-ns`).
pub const VM_AGENT_RBAC_YAML: &str = include_str!("../../../deploy/kubernetes/vm-agent-rbac.yml");

/// Why RBAC manifests could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("RBAC manifest document {index}: {message}")]
    Document { index: usize, message: String },
}

/// Who sends a request: a user name and its groups, as kube-apiserver's authenticators produce.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Identity {
    pub user: String,
    pub groups: Vec<String>,
}

impl Identity {
    /// The identity of a ServiceAccount token: `system:serviceaccount:<ns>:<name>`.
    pub fn service_account(namespace: &str, name: &str) -> Identity {
        Identity {
            user: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        }
    }

    /// A cluster administrator (group `system:masters`, which RBAC never restricts).
    pub fn admin() -> Identity {
        Identity {
            user: "emulator-admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == "system:masters")
    }
}

/// What a request asks for, as kube-apiserver's request-info resolver describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub api_group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty for cluster-scoped resources.
    pub namespace: String,
    /// Empty for collections (unless a `metadata.name` field selector names one object).
    pub name: String,
    /// Set instead of the resource fields for non-resource URLs (`/version`, `/emulator/...`).
    pub non_resource_path: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct PolicyRule {
    api_groups: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    verbs: Vec<String>,
    #[serde(rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
struct Subject {
    kind: String,
    name: String,
    namespace: String,
}

#[derive(Clone, Debug)]
struct Binding {
    /// Empty for a ClusterRoleBinding.
    namespace: String,
    role_ref: RoleRef,
    subjects: Vec<Subject>,
}

/// A ServiceAccount token Secret of the manifests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenSecret {
    pub namespace: String,
    pub name: String,
    pub service_account: String,
}

/// The parsed manifests.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    cluster_roles: BTreeMap<String, Vec<PolicyRule>>,
    roles: BTreeMap<(String, String), Vec<PolicyRule>>,
    bindings: Vec<Binding>,
    /// `(namespace, name)` of every ServiceAccount.
    pub service_accounts: Vec<(String, String)>,
    pub token_secrets: Vec<TokenSecret>,
}

fn field<T: for<'de> Deserialize<'de> + Default>(
    doc: &Value,
    key: &str,
    index: usize,
) -> Result<T, RbacError> {
    match doc.get(key) {
        None | Some(Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| RbacError::Document {
            index,
            message: format!("{key}: {e}"),
        }),
    }
}

fn meta(doc: &Value, key: &str) -> String {
    doc.get("metadata")
        .and_then(|m| m.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

impl Rbac {
    /// Parses a multi-document YAML stream; kinds other than the RBAC ones are ignored.
    pub fn parse(yaml: &str) -> Result<Rbac, RbacError> {
        let mut rbac = Rbac::default();
        for (index, document) in serde_norway::Deserializer::from_str(yaml).enumerate() {
            let doc = Value::deserialize(document).map_err(|e| RbacError::Document {
                index,
                message: e.to_string(),
            })?;
            if doc.is_null() {
                continue;
            }
            let kind = doc.get("kind").and_then(Value::as_str).unwrap_or_default();
            let (name, namespace) = (meta(&doc, "name"), meta(&doc, "namespace"));
            match kind {
                "ServiceAccount" => rbac.service_accounts.push((namespace, name)),
                "Secret" => {
                    let sa = doc
                        .get("metadata")
                        .and_then(|m| m.get("annotations"))
                        .and_then(|a| a.get("kubernetes.io/service-account.name"))
                        .and_then(Value::as_str);
                    let typ = doc.get("type").and_then(Value::as_str);
                    if let (Some(sa), Some("kubernetes.io/service-account-token")) = (sa, typ) {
                        rbac.token_secrets.push(TokenSecret {
                            namespace,
                            name,
                            service_account: sa.to_string(),
                        });
                    }
                }
                "ClusterRole" => {
                    rbac.cluster_roles.insert(name, field(&doc, "rules", index)?);
                }
                "Role" => {
                    rbac.roles.insert((namespace, name), field(&doc, "rules", index)?);
                }
                "ClusterRoleBinding" | "RoleBinding" => rbac.bindings.push(Binding {
                    namespace: if kind == "RoleBinding" {
                        namespace
                    } else {
                        String::new()
                    },
                    role_ref: field(&doc, "roleRef", index)?,
                    subjects: field(&doc, "subjects", index)?,
                }),
                _ => {}
            }
        }
        Ok(rbac)
    }

    /// kube-apiserver's RBAC decision for `who` doing `what`.
    pub fn allows(&self, who: &Identity, what: &Attributes) -> bool {
        if who.is_master() {
            return true;
        }
        self.bindings.iter().any(|b| {
            if !b.subjects.iter().any(|s| subject_matches(s, who)) {
                return false;
            }
            // A RoleBinding grants only inside its namespace, whatever role it references.
            if !b.namespace.is_empty() && b.namespace != what.namespace {
                return false;
            }
            let rules = match b.role_ref.kind.as_str() {
                "ClusterRole" => self.cluster_roles.get(&b.role_ref.name),
                "Role" => self.roles.get(&(b.namespace.clone(), b.role_ref.name.clone())),
                _ => None,
            };
            rules.is_some_and(|rules| rules.iter().any(|r| rule_matches(r, what)))
        })
    }
}

fn subject_matches(s: &Subject, who: &Identity) -> bool {
    match s.kind.as_str() {
        "ServiceAccount" => who.user == format!("system:serviceaccount:{}:{}", s.namespace, s.name),
        "User" => who.user == s.name,
        "Group" => who.groups.contains(&s.name),
        _ => false,
    }
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == "*" || v == value)
}

fn rule_matches(rule: &PolicyRule, what: &Attributes) -> bool {
    if !has(&rule.verbs, &what.verb) {
        return false;
    }
    if let Some(path) = &what.non_resource_path {
        return rule
            .non_resource_urls
            .iter()
            .any(|u| u == path || u.strip_suffix('*').is_some_and(|prefix| path.starts_with(prefix)));
    }
    if !has(&rule.api_groups, &what.api_group) {
        return false;
    }
    let combined = if what.subresource.is_empty() {
        what.resource.clone()
    } else {
        format!("{}/{}", what.resource, what.subresource)
    };
    let resource_ok = rule.resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!what.subresource.is_empty() && *r == format!("*/{}", what.subresource))
    });
    resource_ok
        && (rule.resource_names.is_empty()
            || (!what.name.is_empty() && rule.resource_names.contains(&what.name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            api_group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
            non_resource_path: None,
        }
    }

    #[test]
    fn bundled_manifests_grant_what_section_7_lists() {
        let rbac = Rbac::parse(VM_AGENT_RBAC_YAML).unwrap();
        assert_eq!(
            rbac.service_accounts,
            vec![("vm-ns".to_string(), "vm-agent".to_string())]
        );
        assert_eq!(rbac.token_secrets[0].name, "vm-agent-service-account-token");
        let agent = Identity::service_account("vm-ns", "vm-agent");
        let cp = "controlplane.antrea.io";
        let crd = "crd.antrea.io";
        for (verb, group, res, sub, ns, name, want) in [
            ("get", crd, "externalnodes", "", "vm-ns", "vm1", true),
            ("watch", crd, "externalnodes", "", "vm-ns", "", true),
            ("get", crd, "externalnodes", "", "other", "vm1", false),
            ("delete", crd, "externalnodes", "", "vm-ns", "vm1", false),
            ("get", crd, "antreaagentinfos", "", "", "vm1", true),
            ("update", crd, "antreaagentinfos", "", "", "vm1", true),
            ("create", crd, "antreaagentinfos", "", "", "", false),
            ("watch", cp, "addressgroups", "", "", "", true),
            ("create", cp, "networkpolicies", "status", "", "p", true),
            ("create", cp, "networkpolicies", "", "", "", false),
            ("create", cp, "nodestatssummaries", "", "", "", true),
            ("get", "", "configmaps", "", "kube-system", "antrea-ca", true),
            ("list", "", "configmaps", "", "kube-system", "", false),
            ("get", "", "secrets", "", "vm-ns", "x", false),
        ] {
            assert_eq!(
                rbac.allows(&agent, &attrs(verb, group, res, sub, ns, name)),
                want,
                "{verb} {group}/{res}/{sub} {ns}/{name}"
            );
        }
        assert!(rbac.allows(
            &Identity::admin(),
            &attrs("delete", crd, "externalnodes", "", "vm-ns", "vm1")
        ));
        let stranger = Identity::service_account("vm-ns", "other");
        assert!(!rbac.allows(&stranger, &attrs("watch", cp, "addressgroups", "", "", "")));
    }
}
