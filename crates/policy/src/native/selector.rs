//! Label selectors (`metav1.LabelSelector`): checking them, matching a label set, and the
//! canonical text Kubernetes prints for them (`labels.Selector.String()`), which antrea-controller
//! uses to name the groups a selector produces.

use std::collections::BTreeMap;

use super::types::LabelSelector;

/// One requirement, in the form Kubernetes normalizes a selector to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Requirement {
    Equals(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    fn key(&self) -> &str {
        match self {
            Requirement::Equals(k, _)
            | Requirement::In(k, _)
            | Requirement::NotIn(k, _)
            | Requirement::Exists(k)
            | Requirement::DoesNotExist(k) => k,
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }

    fn text(&self) -> String {
        match self {
            Requirement::Equals(k, v) => format!("{k}={v}"),
            Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
            Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
            Requirement::Exists(k) => k.clone(),
            Requirement::DoesNotExist(k) => format!("!{k}"),
        }
    }
}

/// Why a label key or value is refused (`validation.IsQualifiedName`,
/// `validation.IsValidLabelValue`), in Kubernetes' words.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LabelError {
    #[error("prefix part must be non-empty")]
    EmptyPrefix,
    #[error("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character")]
    PrefixNotSubdomain,
    #[error("name part must be non-empty")]
    EmptyName,
    #[error("name part must be no more than 63 characters")]
    NameTooLong,
    #[error("name part {}", NAME_RULE)]
    NameSyntax,
    #[error("must be no more than 63 characters")]
    ValueTooLong,
    #[error("a valid label {}", NAME_RULE)]
    ValueSyntax,
}

/// Why a label selector is refused, with the field (within the selector) that is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("Invalid label key: {key}: {reason}")]
    MatchLabelKey { key: String, reason: LabelError },
    #[error("Invalid label value: {value}: {reason}")]
    MatchLabelValue { value: String, reason: LabelError },
    #[error("matchExpressions[{index}].key: Invalid value: {key:?}: {reason}")]
    ExpressionKey {
        index: usize,
        key: String,
        reason: LabelError,
    },
    #[error("matchExpressions[{index}].values: Invalid value: {value:?}: {reason}")]
    ExpressionValue {
        index: usize,
        value: String,
        reason: LabelError,
    },
    #[error("matchExpressions[{index}].values: Required value: must be specified when `operator` is 'In' or 'NotIn'")]
    ValuesRequired { index: usize },
    #[error("matchExpressions[{index}].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'")]
    ValuesForbidden { index: usize },
    #[error("matchExpressions[{index}].operator: Unsupported value: {operator:?}: supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"")]
    UnsupportedOperator { index: usize, operator: String },
}

/// A checked selector. An empty one selects everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

impl Selector {
    /// Checks `selector` as Kubernetes converts it (`LabelSelectorAsSelector`) plus the label
    /// syntax antrea-controller's webhook checks on `matchLabels`.
    pub fn parse(selector: &LabelSelector) -> Result<Selector, SelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in &selector.match_labels {
            check_label_key(k).map_err(|reason| SelectorError::MatchLabelKey {
                key: k.clone(),
                reason,
            })?;
            check_label_value(v).map_err(|reason| SelectorError::MatchLabelValue {
                value: v.clone(),
                reason,
            })?;
            requirements.push(Requirement::Equals(k.clone(), v.clone()));
        }
        for (index, expr) in selector.match_expressions.iter().enumerate() {
            check_label_key(&expr.key).map_err(|reason| SelectorError::ExpressionKey {
                index,
                key: expr.key.clone(),
                reason,
            })?;
            let mut values = expr.values.clone();
            for v in &values {
                check_label_value(v).map_err(|reason| SelectorError::ExpressionValue {
                    index,
                    value: v.clone(),
                    reason,
                })?;
            }
            values.sort();
            values.dedup();
            let requirement = match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => return Err(SelectorError::ValuesRequired { index }),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(SelectorError::ValuesForbidden { index })
                }
                "In" => Requirement::In(expr.key.clone(), values),
                "NotIn" => Requirement::NotIn(expr.key.clone(), values),
                "Exists" => Requirement::Exists(expr.key.clone()),
                "DoesNotExist" => Requirement::DoesNotExist(expr.key.clone()),
                other => {
                    return Err(SelectorError::UnsupportedOperator {
                        index,
                        operator: other.to_string(),
                    })
                }
            };
            requirements.push(requirement);
        }
        // Kubernetes keeps requirements sorted by key (stable here, so the text is deterministic).
        requirements.sort_by(|a, b| a.key().cmp(b.key()));
        Ok(Selector { requirements })
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// `labels.Selector.String()`: requirements sorted by key, joined by `,`; empty for
    /// "everything".
    pub fn text(&self) -> String {
        self.requirements
            .iter()
            .map(Requirement::text)
            .collect::<Vec<_>>()
            .join(",")
    }
}

const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn is_name_part(s: &str) -> bool {
    let bytes = s.as_bytes();
    !bytes.is_empty()
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `validation.IsDNS1123Label`: at most 63 lowercase letters, digits and `-`, starting and
/// ending with a letter or digit.
pub fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// `validation.IsDNS1123Subdomain`.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b.first()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.last()
                    .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// `validation.IsQualifiedName`: `[prefix/]name`, name at most 63 characters.
pub fn check_label_key(key: &str) -> Result<(), LabelError> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err(LabelError::EmptyPrefix);
        }
        if !is_dns_subdomain(p) {
            return Err(LabelError::PrefixNotSubdomain);
        }
    }
    if name.is_empty() {
        return Err(LabelError::EmptyName);
    }
    if name.len() > 63 {
        return Err(LabelError::NameTooLong);
    }
    if !is_name_part(name) {
        return Err(LabelError::NameSyntax);
    }
    Ok(())
}

/// `validation.IsValidLabelValue`: empty, or at most 63 characters of the name syntax.
pub fn check_label_value(value: &str) -> Result<(), LabelError> {
    if value.is_empty() {
        return Ok(());
    }
    if value.len() > 63 {
        return Err(LabelError::ValueTooLong);
    }
    if !is_name_part(value) {
        return Err(LabelError::ValueSyntax);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::types::LabelSelectorRequirement;

    fn sel(labels: &[(&str, &str)], exprs: &[(&str, &str, &[&str])]) -> LabelSelector {
        LabelSelector {
            match_labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            match_expressions: exprs
                .iter()
                .map(|(k, op, vs)| LabelSelectorRequirement {
                    key: k.to_string(),
                    operator: op.to_string(),
                    values: vs.iter().map(|v| v.to_string()).collect(),
                })
                .collect(),
        }
    }

    fn labels(list: &[(&str, &str)]) -> BTreeMap<String, String> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn text_is_sorted_by_key_with_kubernetes_operators() {
        let s = Selector::parse(&sel(
            &[("role", "db"), ("app", "x")],
            &[
                ("tier", "In", &["b", "a"]),
                ("env", "NotIn", &["prod"]),
                ("zone", "Exists", &[]),
                ("gone", "DoesNotExist", &[]),
            ],
        ))
        .unwrap();
        assert_eq!(
            s.text(),
            "app=x,env notin (prod),!gone,role=db,tier in (a,b),zone"
        );
        assert_eq!(Selector::parse(&LabelSelector::default()).unwrap().text(), "");
    }

    #[test]
    fn matching_follows_each_operator() {
        let s = Selector::parse(&sel(&[("role", "db")], &[("env", "NotIn", &["prod"])])).unwrap();
        assert!(s.matches(&labels(&[("role", "db")])));
        assert!(s.matches(&labels(&[("role", "db"), ("env", "dev")])));
        assert!(!s.matches(&labels(&[("role", "db"), ("env", "prod")])));
        assert!(!s.matches(&labels(&[("role", "web")])));
        assert!(Selector::parse(&LabelSelector::default())
            .unwrap()
            .matches(&labels(&[])));
    }

    #[test]
    fn bad_selectors_are_refused_naming_the_part() {
        let e = Selector::parse(&sel(&[("-bad", "x")], &[]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("Invalid label key: -bad: name part"), "{e}");
        let e = Selector::parse(&sel(&[("k", "bad value")], &[]))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("Invalid label value: bad value:"), "{e}");
        let e = Selector::parse(&sel(&[], &[("k", "In", &[])]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("matchExpressions[0].values: Required value"), "{e}");
        let e = Selector::parse(&sel(&[], &[("k", "Gt", &["1"])]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("matchExpressions[0].operator: Unsupported value: \"Gt\""),
            "{e}"
        );
        assert!(check_label_key("example.com/role").is_ok());
        assert!(check_label_key("Example.com/role").is_err());
    }
}
