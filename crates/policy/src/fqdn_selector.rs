//! FQDN selectors of egress rules: validation, normalization and matching. Pure.
//!
//! A selector is part of a rule, so it lives with the rules: validation (`controlplane`,
//! `native`) refuses a bad one, resolution normalizes it. The FQDN cache and its flows (the
//! `fqdn` module, above `policy`) match names with it, and `fqdn` re-exports this module as
//! `fqdn::selector`.
//!
//! Antrea's semantics: a selector is an exact name or a pattern where `*` stands for any
//! sequence of characters, dots included, anchored at both ends (upstream turns `*` into the
//! regular expression `.*`). So `*foobar.com` matches `foobar.com`, `www.foobar.com` and
//! `a.b.foobar.com`; `*.foobar.com` matches the last two only; `*` alone matches every name
//! (antrea-controller's webhook accepts it, and the agent's `toRegex` makes it `^.*$`).
//! Matching is case-insensitive. Names lose their trailing dot before matching (DNS names on the
//! wire are absolute; Antrea's agent trims it in `parseDNSResponse`), selectors keep theirs: a
//! selector written with a trailing dot (`example.com.`, `*.`, `.`), or with an empty label
//! (`a..b`), is accepted as antrea-controller's webhook accepts it and, as in Antrea, matches no
//! name. Refusing it would refuse the policy, and with it the policy's other Drop rules.

/// Why a selector is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("empty name")]
    Empty,
    #[error("{0:?} is not a DNS name: {1}")]
    Invalid(String, &'static str),
}

/// A normalized name: lower case, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A normalized selector: lower case, its dots as written (see the module's header: a trailing
/// dot makes it match no name, as in Antrea's agent, which lowercases the selector in
/// `fqdnToSelectorItem` and matches it against names without their trailing dot).
pub fn normalize_selector(selector: &str) -> String {
    selector.to_ascii_lowercase()
}

/// Whether a normalized selector can match any name: not with a leading or trailing dot, nor an
/// empty label (no name has them). Such a selector is kept, matching nothing; the FQDN module
/// does not query DNS for it.
pub fn can_match(selector: &str) -> bool {
    !selector.is_empty() && !selector.starts_with('.') && !selector.ends_with('.') && !selector.contains("..")
}

/// Checks a selector as written in a policy: antrea-controller's webhook
/// (`validateFQDNSelectors`) checks only its characters; `_` is accepted too, as names may
/// carry it (SRV-style labels), and Antrea's agent accepts whatever the controller sends.
pub fn validate(selector: &str) -> Result<(), SelectorError> {
    if selector.is_empty() {
        return Err(SelectorError::Empty);
    }
    if !selector
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '*'))
    {
        return Err(SelectorError::Invalid(
            selector.to_owned(),
            "only letters, digits, '-', '_', '.' and '*' are allowed",
        ));
    }
    Ok(())
}

/// Whether `name` (normalized) is selected by `selector` (normalized).
pub fn matches(selector: &str, name: &str) -> bool {
    if !selector.contains('*') {
        return selector == name;
    }
    glob(selector.as_bytes(), name.as_bytes())
}

/// `*`-only glob, iterative with one backtrack point (linear in practice, no recursion).
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, t));
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some((sp, st)) = star {
            p = sp + 1;
            t = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_follow_antrea() {
        for name in ["foobar.com", "www.foobar.com", "a.b.foobar.com"] {
            assert!(matches("*foobar.com", name), "{name}");
        }
        assert!(!matches("*.foobar.com", "foobar.com"));
        assert!(matches("*.foobar.com", "www.foobar.com"));
        assert!(!matches("*.foobar.com", "foobar.org"));
        assert!(matches("www.*.com", "www.x.y.com"));
        assert!(!matches("foobar.com", "www.foobar.com"));
        assert!(matches("foobar.com", "foobar.com"));
        assert!(matches(
            &normalize_selector("*.Allowed.Test"),
            &normalize("A.ALLOWED.test.")
        ));
    }

    /// antrea-io/antrea `validateFQDNSelectors` (webhook: characters only, so `*` is
    /// accepted) and the agent's `fqdnToSelectorItem`/`toRegex` (`*` becomes `^.*$`, and `*.*`
    /// `^.*[.].*$`): `*` selects every name, `*.*` every name with a dot.
    #[test]
    fn a_lone_wildcard_matches_every_name_as_fqdn_to_selector_item() {
        // (selector, name, matched)
        let cases: [(&str, &str, bool); 9] = [
            ("*", "example.com", true),
            ("*", "a.b.c.example.org", true),
            ("*", "localhost", true),
            ("*", "x", true),
            ("**", "example.com", true),
            ("*.*", "example.com", true),
            ("*.*", "localhost", false),
            ("*", &normalize("WWW.Example.COM."), true),
            ("*.example.com", "example.com", false),
        ];
        for (selector, name, matched) in cases {
            assert_eq!(validate(selector), Ok(()), "{selector}");
            assert_eq!(
                matches(&normalize_selector(selector), name),
                matched,
                "{selector} {name}"
            );
        }
    }

    #[test]
    fn bad_selectors_are_refused() {
        assert_eq!(validate(""), Err(SelectorError::Empty));
        assert!(matches!(validate("a b.com"), Err(SelectorError::Invalid(..))));
        assert!(matches!(validate("foo!bar"), Err(SelectorError::Invalid(..))));
        assert!(validate("*.example.com").is_ok());
        assert!(validate("example.com.").is_ok());
    }

    /// antrea-io/antrea: the webhook (`validateFQDNSelectors`) checks characters only, the
    /// agent lowercases the selector (`fqdnToSelectorItem`) and trims the trailing dot of the
    /// names it learns (`parseDNSResponse`) but not of the selector: a selector with a trailing
    /// dot, a leading dot or an empty label is accepted and matches no name.
    #[test]
    fn a_selector_no_name_can_have_matches_nothing_as_fqdn_to_selector_item() {
        for selector in [
            "example.com.",
            "*.",
            "*.*.",
            ".",
            "..",
            "a..b",
            ".example.com",
            "*.Example.COM.",
        ] {
            assert_eq!(validate(selector), Ok(()), "{selector}");
            let selector = normalize_selector(selector);
            assert!(!can_match(&selector), "{selector}");
            for name in ["example.com", "www.example.com", "a.b", "localhost"] {
                assert!(!matches(&selector, &normalize(name)), "{selector} {name}");
                assert!(
                    !matches(&selector, &normalize(&format!("{name}."))),
                    "{selector} {name}."
                );
            }
        }
        for selector in ["example.com", "*.example.com", "*", "*.*"] {
            assert!(can_match(&normalize_selector(selector)), "{selector}");
        }
        assert!(matches(
            &normalize_selector("*.Example.COM"),
            &normalize("WWW.example.com.")
        ));
    }
}
