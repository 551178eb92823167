//! What keeps secrets out of a support bundle: the redacted copies of the agent's configuration
//! and of the kubeconfigs it points to ([`redact_config`], [`redact_kubeconfig`]), the set of
//! secret strings they and the files they name hold ([`Secrets`]), and the scrub that every
//! collected file goes through before it is archived ([`Secrets::scrub`]): each known secret
//! replaced, PEM private-key blocks and `Bearer` credentials removed wherever they appear.
//!
//! Two layers on purpose: the structured redaction decides what a configuration file shows, and
//! the scrub catches a secret that reached a log line, a state file or a command's output.

use std::path::{Path, PathBuf};

use aho_corasick::AhoCorasick;
use serde_norway::Value;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// Secrets shorter than this are not scrubbed from other files: replacing every `abc` of a log
/// would destroy it and protect nothing (the structured redaction still removes them).
const MIN_SCRUB_LEN: usize = 6;
/// The largest secret file read (a token, a key, a certificate chain): a larger one, a FIFO or
/// a device is refused rather than read.
pub const MAX_SECRET_FILE_BYTES: u64 = 1024 * 1024;

/// Why a file could not be redacted (it is then left out of the bundle).
#[derive(Debug, thiserror::Error)]
pub enum RedactError {
    #[error("not valid YAML, left out rather than copied unredacted: {0}")]
    Yaml(String),
    #[error("cannot encode the redacted document: {0}")]
    Encode(String),
}

/// The secret strings found so far; [`Secrets::scrub`] removes them from any text.
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    values: Vec<String>,
}

impl Secrets {
    /// Adds a secret value, and, when it is base64 (a kubeconfig's `*-data`), what it decodes
    /// to: a PEM's body lines are what a copy of the file elsewhere would contain.
    pub fn add(&mut self, value: &str) {
        let value = value.trim();
        if value.len() < MIN_SCRUB_LEN {
            return;
        }
        self.values.push(value.to_string());
        if let Some(decoded) = decode_base64(value) {
            self.add_text(&decoded);
        }
    }

    /// Adds the contents of a secret file (a token, a private key, a certificate): the whole
    /// text and each of its lines long enough to be specific.
    pub fn add_text(&mut self, text: &str) {
        let trimmed = text.trim();
        if trimmed.len() >= MIN_SCRUB_LEN {
            self.values.push(trimmed.to_string());
        }
        for line in trimmed.lines().map(str::trim) {
            if line.len() >= 16 && !line.starts_with("-----") {
                self.values.push(line.to_string());
            }
        }
    }

    /// Adds what the file at `path` holds, a regular file of at most [`MAX_SECRET_FILE_BYTES`]
    /// (never blocking on a FIFO). A missing file adds nothing (it cannot have been copied
    /// either); one refused or unreadable is the error, for the manifest.
    pub fn add_file(&mut self, path: &Path) -> Result<(), String> {
        use crate::sources::bounded::{read_regular_file, FileRead};
        match read_regular_file(path, MAX_SECRET_FILE_BYTES) {
            Ok(FileRead::Text(text)) => {
                self.add_text(&text);
                Ok(())
            }
            Ok(FileRead::Missing) => Ok(()),
            Ok(FileRead::NotRegular(what)) => Err(format!("it is {what}, not a regular file")),
            Err(e) => Err(e.to_string()),
        }
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `data` with every known secret, every PEM private-key block and every `Bearer`
    /// credential replaced by [`REDACTED`]. Returns whether anything was replaced.
    pub fn scrub(&self, data: &mut Vec<u8>) -> bool {
        let mut changed = false;
        if !self.values.is_empty() {
            // Longest first: a secret that contains another is replaced whole.
            let mut patterns = self.values.clone();
            patterns.sort_by_key(|p| std::cmp::Reverse(p.len()));
            patterns.dedup();
            if let Ok(ac) = AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::LeftmostLongest)
                .build(&patterns)
            {
                if ac.is_match(data.as_slice()) {
                    let replacements = vec![REDACTED.as_bytes(); patterns.len()];
                    *data = ac.replace_all_bytes(data, &replacements);
                    changed = true;
                }
            }
        }
        changed |= scrub_pem_private_keys(data);
        changed |= scrub_bearer(data);
        changed
    }
}

fn decode_base64(value: &str) -> Option<String> {
    use base64::Engine;
    let compact: String = value.split_whitespace().collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(compact.as_bytes())
        .ok()?;
    String::from_utf8(bytes).ok()
}

fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    haystack
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Where the first `-----BEGIN ... PRIVATE KEY-----` header starts, from `from`.
fn private_key_begin(data: &[u8], from: usize) -> Option<usize> {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const KEY_END: &[u8] = b"PRIVATE KEY-----";
    let mut at = from;
    while let Some(begin) = find(data, BEGIN, at) {
        let line_end = data[begin..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |p| begin + p);
        if find(&data[begin..line_end], KEY_END, 0).is_some() {
            return Some(begin);
        }
        at = begin + BEGIN.len();
    }
    None
}

/// Replaces each `-----BEGIN ... PRIVATE KEY----- ... -----END ... PRIVATE KEY-----` block (an
/// unterminated one up to the end), and everything before an `-----END ... PRIVATE KEY-----`
/// that no BEGIN precedes: the rest of a key whose beginning a cut removed.
fn scrub_pem_private_keys(data: &mut Vec<u8>) -> bool {
    const BEGIN: &[u8] = b"-----BEGIN ";
    const KEY_END: &[u8] = b"PRIVATE KEY-----";
    const END: &[u8] = b"-----END ";
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    let mut changed = false;
    let first_begin = private_key_begin(data, 0).unwrap_or(data.len());
    let mut search = 0;
    while let Some(end) = find(data, END, search).filter(|e| *e < first_begin) {
        let line_end = data[end..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |p| end + p);
        if let Some(k) = find(&data[end..line_end], KEY_END, 0) {
            out.extend_from_slice(REDACTED.as_bytes());
            at = end + k + KEY_END.len();
            changed = true;
            break;
        }
        search = end + END.len();
    }
    while let Some(begin) = find(data, BEGIN, at) {
        let line_end = data[begin..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(data.len(), |p| begin + p);
        let header = &data[begin..line_end];
        if find(header, KEY_END, 0).is_none() {
            out.extend_from_slice(&data[at..begin + BEGIN.len()]);
            at = begin + BEGIN.len();
            continue;
        }
        out.extend_from_slice(&data[at..begin]);
        out.extend_from_slice(REDACTED.as_bytes());
        changed = true;
        at = match find(data, END, line_end) {
            Some(end) => find(data, KEY_END, end).map_or(data.len(), |k| k + KEY_END.len()),
            None => data.len(),
        };
    }
    if changed {
        out.extend_from_slice(&data[at..]);
        *data = out;
    }
    changed
}

/// Replaces the credential after each `Bearer ` (an HTTP Authorization header in a log line).
fn scrub_bearer(data: &mut Vec<u8>) -> bool {
    const BEARER: &[u8] = b"Bearer ";
    let mut out = Vec::with_capacity(data.len());
    let mut at = 0;
    let mut changed = false;
    while let Some(b) = find(data, BEARER, at) {
        let start = b + BEARER.len();
        let len = data[start..]
            .iter()
            .position(|c| c.is_ascii_whitespace() || matches!(c, b'"' | b'\'' | b',' | b'}'))
            .unwrap_or(data.len() - start);
        out.extend_from_slice(&data[at..start]);
        if len > 0 && &data[start..start + len] != REDACTED.as_bytes() {
            out.extend_from_slice(REDACTED.as_bytes());
            changed = true;
        } else {
            out.extend_from_slice(&data[start..start + len]);
        }
        at = start + len;
    }
    if changed {
        out.extend_from_slice(&data[at..]);
        *data = out;
    }
    changed
}

/// Whether a configuration key names a secret value (not a file that holds one: a path is kept).
fn is_secret_key(key: &str) -> bool {
    let k: String = key
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    if k.ends_with("file") || k.ends_with("path") || k.ends_with("dir") {
        return false;
    }
    [
        "token",
        "password",
        "passwd",
        "secret",
        "keydata",
        "certificatedata",
        "certdata",
        "authoritydata",
        "credential",
        "privatekey",
    ]
    .iter()
    .any(|s| k.contains(s))
}

/// Replaces `v` with [`REDACTED`], adding every string it held to `secrets`.
fn take_secret(v: &mut Value, secrets: &mut Secrets) {
    collect_strings(v, secrets);
    *v = Value::String(REDACTED.to_string());
}

fn collect_strings(v: &Value, secrets: &mut Secrets) {
    match v {
        Value::String(s) => secrets.add(s),
        Value::Number(n) => secrets.add(&n.to_string()),
        Value::Sequence(items) => items.iter().for_each(|i| collect_strings(i, secrets)),
        Value::Mapping(m) => m.iter().for_each(|(k, v)| {
            collect_strings(k, secrets);
            collect_strings(v, secrets);
        }),
        Value::Tagged(t) => collect_strings(&t.value, secrets),
        Value::Null | Value::Bool(_) => {}
    }
}

/// Redacts, anywhere in the document, the values of keys that name a secret.
fn redact_secret_keys(v: &mut Value, secrets: &mut Secrets) {
    match v {
        Value::Mapping(m) => {
            for (k, value) in m.iter_mut() {
                if k.as_str().is_some_and(is_secret_key) && !value.is_null() {
                    take_secret(value, secrets);
                } else {
                    redact_secret_keys(value, secrets);
                }
            }
        }
        Value::Sequence(items) => items.iter_mut().for_each(|i| redact_secret_keys(i, secrets)),
        Value::Tagged(t) => redact_secret_keys(&mut t.value, secrets),
        _ => {}
    }
}

fn to_yaml(doc: &Value) -> Result<String, RedactError> {
    serde_norway::to_string(doc).map_err(|e| RedactError::Encode(e.to_string()))
}

fn parse_yaml(text: &str) -> Result<Value, RedactError> {
    serde_norway::from_str(text).map_err(|e| RedactError::Yaml(e.to_string()))
}

/// `antrea-agent.conf` redacted: the values of keys that name a secret (the file normally holds
/// none: credentials live in the kubeconfigs and files it names). The secrets found are added.
pub fn redact_config(text: &str, secrets: &mut Secrets) -> Result<String, RedactError> {
    let mut doc = parse_yaml(text)?;
    redact_secret_keys(&mut doc, secrets);
    to_yaml(&doc)
}

/// The files a configuration names whose contents are secrets (never copied into the bundle;
/// read only to scrub their contents from everything else): `metricsServer.bearerTokenFile`
/// and `metricsServer.tlsKeyFile`, relative paths against `base`. Used when the configuration
/// does not load (a loaded one gives its resolved paths).
pub fn config_secret_files(text: &str, base: &Path) -> Vec<PathBuf> {
    let Ok(doc) = parse_yaml(text) else {
        return Vec::new();
    };
    ["bearerTokenFile", "tlsKeyFile"]
        .iter()
        .filter_map(|k| doc.get("metricsServer")?.get(*k)?.as_str())
        .filter(|p| !p.is_empty())
        .map(|p| base.join(p))
        .collect()
}

/// The keys of a kubeconfig's `users[].user` kept as they are: file paths and identities. Every
/// other key (token, password, `*-data`, auth-provider config, exec env and args, and whatever
/// a later client-go adds) is redacted: a credential format unknown here is not shown.
const KUBECONFIG_USER_KEPT: &[&str] = &[
    "client-certificate",
    "client-key",
    "tokenFile",
    "username",
    "as",
    "as-uid",
    "as-groups",
];
/// Kept under `users[].user.exec`: which plugin runs, not what it is given (under
/// `auth-provider`, only its `name`).
const KUBECONFIG_EXEC_KEPT: &[&str] = &[
    "apiVersion",
    "command",
    "installHint",
    "interactiveMode",
    "provideClusterInfo",
];

/// The files a kubeconfig's users name whose contents are secret or identify the client:
/// `client-key`, `client-certificate` and `tokenFile` (relative paths against `base`).
pub fn kubeconfig_secret_files(text: &str, base: &Path) -> Vec<PathBuf> {
    let Ok(doc) = parse_yaml(text) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for user in doc
        .get("users")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
    {
        for key in ["client-key", "client-certificate", "tokenFile"] {
            if let Some(p) = user.get("user").and_then(|u| u.get(key)).and_then(Value::as_str) {
                files.push(base.join(p));
            }
        }
    }
    files
}

/// `url` without its userinfo (`user:password@`), which is returned: scheme, host, port and
/// path are kept.
fn strip_userinfo(url: &str) -> Option<(String, String)> {
    let scheme_end = url.find("://")? + 3;
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let at = rest[..authority_end].rfind('@')?;
    let userinfo = rest[..at].to_string();
    Some((format!("{}{}", &url[..scheme_end], &rest[at + 1..]), userinfo))
}

/// The kubeconfig's cluster URLs (`server`, `proxy-url`) without userinfo; each userinfo (and
/// its password alone) becomes a secret to scrub.
fn redact_cluster_urls(doc: &mut Value, secrets: &mut Secrets) {
    let Some(clusters) = doc.get_mut("clusters").and_then(Value::as_sequence_mut) else {
        return;
    };
    for cluster in clusters {
        let Some(fields) = cluster.get_mut("cluster") else {
            continue;
        };
        for key in ["server", "proxy-url"] {
            let Some(v) = fields.get_mut(key) else {
                continue;
            };
            if let Some((stripped, userinfo)) = v.as_str().and_then(strip_userinfo) {
                secrets.add(&userinfo);
                if let Some((_, password)) = userinfo.split_once(':') {
                    secrets.add(password);
                }
                *v = Value::String(stripped);
            }
        }
    }
}

/// A kubeconfig redacted: in each `users[].user`, every key but file paths and identities
/// ([`KUBECONFIG_USER_KEPT`]); the userinfo of the clusters' `server` and `proxy-url`; the
/// clusters' `certificate-authority-data` (a certificate, not a secret, but its bytes are of no
/// use in a bundle); and any secret-named key elsewhere.
pub fn redact_kubeconfig(text: &str, secrets: &mut Secrets) -> Result<String, RedactError> {
    let mut doc = parse_yaml(text)?;
    redact_cluster_urls(&mut doc, secrets);
    if let Some(users) = doc.get_mut("users").and_then(Value::as_sequence_mut) {
        for user in users {
            let Some(Value::Mapping(fields)) = user.get_mut("user") else {
                continue;
            };
            for (k, v) in fields.iter_mut() {
                let key = k.as_str().unwrap_or_default();
                let kept_inside = match key {
                    "exec" => KUBECONFIG_EXEC_KEPT,
                    "auth-provider" => &["name"][..],
                    _ => &[][..],
                };
                if !kept_inside.is_empty() {
                    if let Value::Mapping(inner) = v {
                        for (ik, iv) in inner.iter_mut() {
                            if !kept_inside.contains(&ik.as_str().unwrap_or_default()) {
                                take_secret(iv, secrets);
                            }
                        }
                        continue;
                    }
                }
                if !KUBECONFIG_USER_KEPT.contains(&key) {
                    take_secret(v, secrets);
                }
            }
        }
    }
    redact_secret_keys(&mut doc, secrets);
    to_yaml(&doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0EtREFUQS1OT1QtU0VDUkVULUJVVC1SRURBQ1RFRA==
users:
- name: u
  user:
    token: tok-1234567890abcdef
    client-key-data: S0VZLURBVEEtU0VDUkVULTEyMzQ1Njc4OTA=
    client-certificate-data: Q0VSVC1EQVRBLVNFQ1JFVC0xMjM0NTY3ODkw
    client-key: /etc/antrea/key.pem
    tokenFile: /etc/antrea/token
    username: admin
    password: hunter2hunter2
    auth-provider:
      name: oidc
      config: {id-token: idtok-abcdefgh, refresh-token: reftok-abcdefgh}
    exec:
      command: get-token
      args: [--secret, argsecret-abcdef]
      env: [{name: TOKEN, value: envsecret-abcdef}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
";

    #[test]
    fn a_kubeconfig_keeps_paths_and_loses_every_credential() {
        let mut secrets = Secrets::default();
        let out = redact_kubeconfig(KUBECONFIG, &mut secrets).expect("redact");
        for secret in [
            "tok-1234567890abcdef",
            "S0VZLURBVEEtU0VDUkVULTEyMzQ1Njc4OTA=",
            "Q0VSVC1EQVRBLVNFQ1JFVC0xMjM0NTY3ODkw",
            "Q0EtREFUQS1OT1QtU0VDUkVULUJVVC1SRURBQ1RFRA==",
            "hunter2hunter2",
            "idtok-abcdefgh",
            "reftok-abcdefgh",
            "argsecret-abcdef",
            "envsecret-abcdef",
        ] {
            assert!(!out.contains(secret), "{secret} left in:\n{out}");
        }
        for kept in [
            "/etc/antrea/key.pem",
            "/etc/antrea/token",
            "username: admin",
            "command: get-token",
            "server: https://10.0.0.1:6443",
            "name: oidc",
        ] {
            assert!(out.contains(kept), "{kept} lost:\n{out}");
        }
        // The decoded material is known too, so a copy elsewhere is scrubbed.
        let mut log = b"key KEY-DATA-SECRET-1234567890 and tok-1234567890abcdef here".to_vec();
        assert!(secrets.scrub(&mut log));
        assert_eq!(
            String::from_utf8_lossy(&log),
            "key <redacted> and <redacted> here"
        );
    }

    #[test]
    fn the_config_redacts_secret_named_keys_but_keeps_paths() {
        let mut secrets = Secrets::default();
        let out = redact_config(
            "metricsServer: {bearerTokenFile: /etc/t, tlsKeyFile: /etc/k}\nsomeToken: abcdefgh123\n\
             nested: [{password: pw-12345678}]\nclientConnection: {kubeconfig: /etc/kc}\n",
            &mut secrets,
        )
        .expect("redact");
        assert!(
            !out.contains("abcdefgh123") && !out.contains("pw-12345678"),
            "{out}"
        );
        assert!(
            out.contains("/etc/t") && out.contains("/etc/k") && out.contains("/etc/kc"),
            "{out}"
        );
        assert_eq!(
            config_secret_files(
                "metricsServer: {bearerTokenFile: /etc/t, tlsKeyFile: k}",
                Path::new("/base")
            ),
            [PathBuf::from("/etc/t"), PathBuf::from("/base/k")]
        );
        assert!(matches!(
            redact_config("a: [unclosed", &mut secrets),
            Err(RedactError::Yaml(_))
        ));
    }

    #[test]
    fn the_scrub_removes_private_keys_and_bearer_tokens_anywhere() {
        let secrets = Secrets::default();
        let mut text =
            b"before\n-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIabc\n-----END EC PRIVATE KEY-----\nafter \
            -----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n\
            GET /metrics Authorization: Bearer s3cr3t-t0ken\n\"Bearer xyz\""
                .to_vec();
        assert!(secrets.scrub(&mut text));
        let text = String::from_utf8_lossy(&text);
        assert_eq!(
            text,
            "before\n<redacted>\nafter -----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n\
             GET /metrics Authorization: Bearer <redacted>\n\"Bearer <redacted>\""
        );
        // An unterminated key block is cut to the end; nothing to do is reported as such.
        let mut cut = b"x -----BEGIN PRIVATE KEY-----\nAAAA".to_vec();
        assert!(secrets.scrub(&mut cut));
        assert_eq!(cut, b"x <redacted>");
        let mut clean = b"nothing secret".to_vec();
        assert!(!secrets.scrub(&mut clean));
    }

    #[test]
    fn the_end_of_a_key_whose_beginning_was_cut_is_removed_from_the_start() {
        let secrets = Secrets::default();
        let mut tail = b"QyNTUxOQAAACBsecondhalfofthekey\n-----END OPENSSH PRIVATE KEY-----\nlater line\n\
              -----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----\nend"
            .to_vec();
        assert!(secrets.scrub(&mut tail));
        assert_eq!(
            String::from_utf8_lossy(&tail),
            "<redacted>\nlater line\n<redacted>\nend"
        );
        // An END of something else (a certificate) before no BEGIN is left alone.
        let mut cert = b"MIIB\n-----END CERTIFICATE-----\nok".to_vec();
        assert!(!secrets.scrub(&mut cert));
    }

    #[test]
    fn cluster_urls_lose_their_userinfo_which_is_scrubbed_elsewhere() {
        let mut secrets = Secrets::default();
        let out = redact_kubeconfig(
            "clusters:\n- name: c\n  cluster:\n    server: https://admin:s3cretpass@10.0.0.1:6443/k8s\n    \
             proxy-url: http://proxyuser:proxypass99@proxy:3128\n",
            &mut secrets,
        )
        .expect("redact");
        assert!(out.contains("server: https://10.0.0.1:6443/k8s"), "{out}");
        assert!(out.contains("proxy-url: http://proxy:3128"), "{out}");
        assert!(
            !out.contains("s3cretpass") && !out.contains("proxypass99"),
            "{out}"
        );
        let mut log = b"dial https://admin:s3cretpass@10.0.0.1 pw proxypass99".to_vec();
        assert!(secrets.scrub(&mut log));
        assert_eq!(
            String::from_utf8_lossy(&log),
            "dial https://<redacted>@10.0.0.1 pw <redacted>"
        );
        assert_eq!(strip_userinfo("https://h:1/a@b"), None);
    }

    #[test]
    fn short_values_are_not_scrubbed_everywhere() {
        let mut secrets = Secrets::default();
        secrets.add("abc");
        assert!(secrets.is_empty());
        secrets.add_text("line-one-is-long-enough\nshort\n");
        let mut text = b"short line-one-is-long-enough".to_vec();
        assert!(secrets.scrub(&mut text));
        assert_eq!(text, b"short <redacted>");
    }
}
