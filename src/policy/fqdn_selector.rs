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
//! Matching is case-insensitive and ignores one trailing dot (DNS names on the wire are
//! absolute).

/// Why a selector is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("empty name")]
    Empty,
    #[error(
        "{0:?} has only wildcards and ends with a dot: Antrea matches it against names without \
         their trailing dot, so it matches no name, where this agent would read it as every name"
    )]
    OnlyWildcards(String),
    #[error("{0:?} is not a DNS name: {1}")]
    Invalid(String, &'static str),
}

/// A normalized name: lower case, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Checks a selector as written in a policy.
pub fn validate(selector: &str) -> Result<(), SelectorError> {
    let s = selector.trim_end_matches('.');
    if s.is_empty() {
        return Err(SelectorError::Empty);
    }
    // `*` (or `*.*`) is accepted as antrea-controller's webhook accepts it
    // (`validateFQDNSelectors` checks the characters only) and means what Antrea's agent makes
    // of it (`fqdnToSelectorItem`, `toRegex`: `^.*$`, every name). With a trailing dot, though,
    // Antrea's pattern ends in a literal dot that no name has once the agent trims it
    // (`parseDNSResponse`), while this module drops the dot: `*.` would become every name.
    if s.len() != selector.len() && s.chars().all(|c| c == '*' || c == '.') {
        return Err(SelectorError::OnlyWildcards(selector.to_owned()));
    }
    if s.len() > 253 {
        return Err(SelectorError::Invalid(
            selector.to_owned(),
            "longer than 253 characters",
        ));
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '*'))
    {
        return Err(SelectorError::Invalid(
            selector.to_owned(),
            "only letters, digits, '-', '_', '.' and '*' are allowed",
        ));
    }
    if s.split('.').any(str::is_empty) {
        return Err(SelectorError::Invalid(selector.to_owned(), "empty label"));
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
            &normalize("*.Allowed.Test."),
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
            assert_eq!(matches(&normalize(selector), name), matched, "{selector} {name}");
        }
    }

    #[test]
    fn bad_selectors_are_refused() {
        assert_eq!(validate(""), Err(SelectorError::Empty));
        // Wildcards with a trailing dot: no name in Antrea, every name once the dot is dropped.
        assert!(matches!(validate("*."), Err(SelectorError::OnlyWildcards(_))));
        assert!(matches!(validate("*.*."), Err(SelectorError::OnlyWildcards(_))));
        assert!(matches!(validate("a..b"), Err(SelectorError::Invalid(..))));
        assert!(matches!(validate("a b.com"), Err(SelectorError::Invalid(..))));
        assert!(validate("*.example.com").is_ok());
        assert!(validate("example.com.").is_ok());
    }
}
