//! The auth file: a list of tokens, each with a role and the namespaces it may use.
//!
//! ```yaml
//! tokens:
//!   - token: "s3cret-admin"
//!     role: admin
//!     namespaces: ["*"]
//!   - token: "payments-client"
//!     role: client
//!     namespaces: ["payments"]
//! ```
//!
//! or the same in TOML (`[[tokens]]` tables). Tokens are kept as SHA-256 digests and a
//! presented token is compared with every one of them in constant time.

use flo_workflow::yaml_depth::{YAML_NESTING_MAX, YamlLimits, exceeds};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

/// Most tokens one auth file may hold (a lookup compares with each of them).
pub const AUTH_TOKENS_MAX: usize = 10_000;
/// Longest token accepted, in the file and in a handshake.
pub const TOKEN_BYTES_MAX: usize = 4096;
/// Largest auth file once its YAML aliases are expanded.
pub const AUTH_FILE_EXPANDED_BYTES_MAX: u64 = 16 << 20;
const AUTH_YAML_LIMITS: YamlLimits = YamlLimits {
    nesting_max: YAML_NESTING_MAX,
    expanded_bytes_max: AUTH_FILE_EXPANDED_BYTES_MAX,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, in its namespaces: definitions too; server-wide changes with `*`.
    Admin,
    /// Applications: KV, invocations, runs, workflows, signals, in its namespaces.
    Client,
    /// Workers: registration, heartbeats, tasks, and KV reads, in its namespaces.
    Worker,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Client => "client",
            Role::Worker => "worker",
        }
    }
}

/// The namespaces a token may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespaces {
    /// `*`: every namespace.
    All,
    Only(Vec<String>),
}

impl Namespaces {
    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            Namespaces::All => true,
            Namespaces::Only(list) => list.iter().any(|n| n == namespace),
        }
    }
}

/// What a valid token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The entry's `name`, or `token #N` (its position in the file, from 1): for log lines,
    /// which never show the token.
    pub name: String,
    pub role: Role,
    pub namespaces: Namespaces,
    /// The worker ids this token may act as (register, heartbeat, take and report tasks):
    /// exact ids, or prefixes ending in `*`. None: any worker id in its namespaces.
    pub workers: Option<Vec<String>>,
}

impl Principal {
    /// Whether this token may act as worker `worker_id`.
    pub fn may_act_as(&self, worker_id: &str) -> bool {
        let Some(patterns) = &self.workers else {
            return true;
        };
        patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => worker_id.starts_with(prefix),
            None => p == worker_id,
        })
    }
}

/// How the file is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Yaml,
    Toml,
}

impl FileFormat {
    /// `.toml` is TOML; anything else (`.yaml`, `.yml`, `.json`) is YAML.
    pub fn of_path(path: &std::path::Path) -> FileFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("toml") => FileFormat::Toml,
            _ => FileFormat::Yaml,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    #[error("cannot parse it: {0}")]
    Parse(String),
    #[error("it lists no tokens: every request would be refused")]
    NoTokens,
    #[error("it lists {0} tokens, more than the {AUTH_TOKENS_MAX} allowed")]
    TooMany(usize),
    #[error("{entry}: the token is empty")]
    EmptyToken { entry: String },
    #[error("{entry}: the token is longer than {TOKEN_BYTES_MAX} bytes")]
    LongToken { entry: String },
    #[error("{entry}: the same token as {first}; each token must be unique")]
    Duplicate { entry: String, first: String },
    #[error("{entry}: no namespaces (list them, or \"*\" for all)")]
    NoNamespaces { entry: String },
    #[error("{entry}: an empty namespace name")]
    EmptyNamespace { entry: String },
    #[error("quotas: {0}")]
    Quota(String),
    #[error(
        "{entry}: workers must list worker ids or prefixes ending in '*' (leave it out for \
         any worker id)"
    )]
    Workers { entry: String },
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    tokens: Vec<RawEntry>,
    /// Namespace (or `*`: every namespace not listed) → its quota.
    #[serde(default)]
    quotas: std::collections::BTreeMap<String, Quota>,
}

/// What one namespace may hold, over the whole server (each shard enforces its share:
/// the quota divided by the shards, rounded up — keys and runs hash evenly over them).
/// None: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quota {
    /// Bytes of KV keys and values.
    #[serde(default)]
    pub kv_bytes: Option<u64>,
    /// Action and workflow runs in flight (not finished).
    #[serde(default)]
    pub live_runs: Option<u64>,
    /// WebAssembly slots its runs may hold at once on each shard (of 4).
    #[serde(default)]
    pub wasm_slots: Option<u32>,
}

/// The auth file's quotas: per namespace, and for every other namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    by_namespace: std::collections::BTreeMap<String, Quota>,
    others: Option<Quota>,
}

impl Quotas {
    /// The quota of `namespace`, if one applies.
    pub fn of(&self, namespace: &str) -> Option<&Quota> {
        self.by_namespace.get(namespace).or(self.others.as_ref())
    }

    pub fn is_empty(&self) -> bool {
        self.by_namespace.is_empty() && self.others.is_none()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    token: String,
    role: Role,
    namespaces: Vec<String>,
    #[serde(default)]
    name: Option<String>,
    /// Worker ids the token may act as (`Principal::workers`).
    #[serde(default)]
    workers: Option<Vec<String>>,
}

// Never show a token, even in a debug print.
impl std::fmt::Debug for RawEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawEntry")
            .field("role", &self.role)
            .field("namespaces", &self.namespaces)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// The validated auth file: each token's digest and what it grants, and the namespaces'
/// quotas.
#[derive(Debug, Clone)]
pub struct AuthTable {
    digests: Vec<TokenDigest>,
    principals: Vec<Principal>,
    quotas: Quotas,
}

impl AuthTable {
    pub fn parse(text: &str, format: FileFormat) -> Result<AuthTable, AuthFileError> {
        let raw: RawFile = match format {
            FileFormat::Yaml if exceeds(text, AUTH_YAML_LIMITS).is_some() => {
                return Err(AuthFileError::Parse(format!(
                    "it nests collections more than {YAML_NESTING_MAX} levels deep, or is \
                     larger than {AUTH_FILE_EXPANDED_BYTES_MAX} bytes once its YAML aliases \
                     are expanded"
                )));
            }
            FileFormat::Yaml => {
                serde_yaml::from_str(text).map_err(|e| AuthFileError::Parse(e.to_string()))?
            }
            FileFormat::Toml => {
                toml::from_str(text).map_err(|e| AuthFileError::Parse(e.to_string()))?
            }
        };
        Self::validate(raw)
    }

    fn validate(raw: RawFile) -> Result<AuthTable, AuthFileError> {
        if raw.tokens.is_empty() {
            return Err(AuthFileError::NoTokens);
        }
        if raw.tokens.len() > AUTH_TOKENS_MAX {
            return Err(AuthFileError::TooMany(raw.tokens.len()));
        }
        let mut quotas = raw.quotas;
        if quotas.keys().any(|ns| ns.is_empty()) {
            return Err(AuthFileError::Quota(
                "a quota for an empty namespace name".into(),
            ));
        }
        if let Some((ns, _)) = quotas.iter().find(|(_, q)| {
            q.kv_bytes == Some(0) || q.live_runs == Some(0) || q.wasm_slots == Some(0)
        }) {
            return Err(AuthFileError::Quota(format!(
                "namespace \"{ns}\": a quota of 0 (leave the field out for no limit)"
            )));
        }
        let others = quotas.remove("*");
        let mut table = AuthTable {
            digests: Vec::with_capacity(raw.tokens.len()),
            principals: Vec::with_capacity(raw.tokens.len()),
            quotas: Quotas {
                by_namespace: quotas,
                others,
            },
        };
        for (i, entry) in raw.tokens.into_iter().enumerate() {
            let name = entry
                .name
                .clone()
                .unwrap_or_else(|| format!("token #{}", i + 1));
            let label = format!("token #{} ({})", i + 1, name);
            let mut principal = Self::entry(entry.role, entry.namespaces, name, &label)?;
            if let Some(workers) = &entry.workers
                && (workers.is_empty() || workers.iter().any(|w| w.is_empty() || w == "*"))
            {
                return Err(AuthFileError::Workers { entry: label });
            }
            principal.workers = entry.workers;
            if entry.token.is_empty() {
                return Err(AuthFileError::EmptyToken { entry: label });
            }
            if entry.token.len() > TOKEN_BYTES_MAX {
                return Err(AuthFileError::LongToken { entry: label });
            }
            let d = digest(&entry.token);
            if let Some(j) = table.digests.iter().position(|x| *x == d) {
                return Err(AuthFileError::Duplicate {
                    entry: label,
                    first: format!("token #{}", j + 1),
                });
            }
            table.digests.push(d);
            table.principals.push(principal);
        }
        Ok(table)
    }

    fn entry(
        role: Role,
        namespaces: Vec<String>,
        name: String,
        label: &str,
    ) -> Result<Principal, AuthFileError> {
        if namespaces.is_empty() {
            return Err(AuthFileError::NoNamespaces {
                entry: label.into(),
            });
        }
        if namespaces.iter().any(|n| n.is_empty()) {
            return Err(AuthFileError::EmptyNamespace {
                entry: label.into(),
            });
        }
        let namespaces = if namespaces.iter().any(|n| n == "*") {
            Namespaces::All
        } else {
            Namespaces::Only(namespaces)
        };
        Ok(Principal {
            name,
            role,
            namespaces,
            workers: None,
        })
    }

    pub fn len(&self) -> usize {
        self.principals.len()
    }

    pub fn quotas(&self) -> &Quotas {
        &self.quotas
    }

    pub fn is_empty(&self) -> bool {
        self.principals.is_empty()
    }

    /// The index of the entry whose token is `token`. Compares the token's digest with
    /// every entry's in constant time, all of them whatever matched: the time taken says
    /// nothing about how close a guess was, nor which entry matched.
    pub fn lookup(&self, token: &str) -> Option<usize> {
        if token.len() > TOKEN_BYTES_MAX {
            return None;
        }
        let presented = digest(token);
        let mut found = 0u32;
        let mut hit = subtle::Choice::from(0);
        for (i, d) in self.digests.iter().enumerate() {
            let eq = presented.ct_eq(d);
            found.conditional_assign(&(i as u32), eq);
            hit |= eq;
        }
        bool::from(hit).then_some(found as usize)
    }

    pub fn principal(&self, index: usize) -> &Principal {
        &self.principals[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &str = r#"
tokens:
  - token: "s3cret-admin"
    role: admin
    namespaces: ["*"]
  - token: "payments-client"
    role: client
    namespaces: ["payments", "billing"]
    name: payments-app
  - token: "payments-worker"
    role: worker
    namespaces: ["payments"]
"#;

    const TOML: &str = r#"
[[tokens]]
token = "s3cret-admin"
role = "admin"
namespaces = ["*"]

[[tokens]]
token = "payments-client"
role = "client"
namespaces = ["payments", "billing"]
name = "payments-app"

[[tokens]]
token = "payments-worker"
role = "worker"
namespaces = ["payments"]
"#;

    fn check_example(table: &AuthTable) {
        assert_eq!(table.len(), 3);
        let admin = table.principal(table.lookup("s3cret-admin").unwrap());
        assert_eq!(admin.role, Role::Admin);
        assert_eq!(admin.namespaces, Namespaces::All);
        assert_eq!(admin.name, "token #1");
        let client = table.principal(table.lookup("payments-client").unwrap());
        assert_eq!(client.role, Role::Client);
        assert_eq!(client.name, "payments-app");
        assert!(client.namespaces.allows("billing"));
        assert!(!client.namespaces.allows("default"));
        let worker = table.principal(table.lookup("payments-worker").unwrap());
        assert_eq!(worker.role, Role::Worker);
        assert_eq!(table.lookup("payments-worke"), None);
        assert_eq!(table.lookup(""), None);
        assert_eq!(table.lookup("S3CRET-ADMIN"), None);
    }

    #[test]
    fn yaml_and_toml_files_give_the_same_table() {
        check_example(&AuthTable::parse(YAML, FileFormat::Yaml).unwrap());
        check_example(&AuthTable::parse(TOML, FileFormat::Toml).unwrap());
    }

    #[test]
    fn the_format_follows_the_extension() {
        use std::path::Path;
        assert_eq!(
            FileFormat::of_path(Path::new("a/auth.toml")),
            FileFormat::Toml
        );
        assert_eq!(
            FileFormat::of_path(Path::new("auth.yaml")),
            FileFormat::Yaml
        );
        assert_eq!(FileFormat::of_path(Path::new("auth.yml")), FileFormat::Yaml);
        assert_eq!(FileFormat::of_path(Path::new("auth")), FileFormat::Yaml);
    }

    fn refused(yaml: &str) -> String {
        AuthTable::parse(yaml, FileFormat::Yaml)
            .expect_err("the file should be refused")
            .to_string()
    }

    #[test]
    fn an_unknown_role_is_refused() {
        let e = refused("tokens:\n  - {token: a, role: root, namespaces: [x]}\n");
        assert!(e.contains("unknown variant `root`"), "{e}");
    }

    #[test]
    fn an_empty_token_is_refused() {
        let e = refused("tokens:\n  - {token: '', role: admin, namespaces: ['*']}\n");
        assert_eq!(e, "token #1 (token #1): the token is empty");
    }

    #[test]
    fn a_duplicate_token_is_refused_without_showing_it() {
        let e = refused(
            "tokens:\n  - {token: same, role: admin, namespaces: ['*']}\n  \
             - {token: same, role: client, namespaces: [a], name: app}\n",
        );
        assert_eq!(
            e,
            "token #2 (app): the same token as token #1; each token must be unique"
        );
        assert!(!e.contains("same,"));
    }

    #[test]
    fn missing_or_empty_namespaces_are_refused() {
        let e = refused("tokens:\n  - {token: a, role: client, namespaces: []}\n");
        assert!(e.contains("no namespaces"), "{e}");
        let e = refused("tokens:\n  - {token: a, role: client, namespaces: ['']}\n");
        assert!(e.contains("empty namespace"), "{e}");
        let e = refused("tokens:\n  - {token: a, role: client}\n");
        assert!(e.contains("missing field `namespaces`"), "{e}");
    }

    #[test]
    fn quotas_per_namespace_and_for_the_others() {
        let yaml = "tokens:\n  - {token: a, role: admin, namespaces: [\"*\"]}\nquotas:\n  \
                    payments: {kv_bytes: 1000, live_runs: 10}\n  \"*\": {live_runs: 5}\n";
        let table = AuthTable::parse(yaml, FileFormat::Yaml).unwrap();
        let q = table.quotas();
        assert_eq!(q.of("payments").unwrap().kv_bytes, Some(1000));
        assert_eq!(q.of("other").unwrap().live_runs, Some(5));
        assert_eq!(q.of("other").unwrap().kv_bytes, None);
        let bad = "tokens:\n  - {token: a, role: admin, namespaces: [\"*\"]}\nquotas:\n  \
                   p: {live_runs: 0}\n";
        assert!(matches!(
            AuthTable::parse(bad, FileFormat::Yaml),
            Err(AuthFileError::Quota(_))
        ));
        let unknown = "tokens:\n  - {token: a, role: admin, namespaces: [\"*\"]}\nquotas:\n  \
                       p: {runs: 3}\n";
        assert!(AuthTable::parse(unknown, FileFormat::Yaml).is_err());
    }

    #[test]
    fn workers_lists_ids_and_prefixes() {
        let yaml = "tokens:\n  - {token: w, role: worker, namespaces: [p], workers: [\"gpu-*\"]}\n";
        let table = AuthTable::parse(yaml, FileFormat::Yaml).unwrap();
        let p = table.principal(0);
        assert!(p.may_act_as("gpu-1") && !p.may_act_as("cpu-1"));
        for bad in ["[]", "[\"\"]", "[\"*\"]"] {
            let yaml = format!(
                "tokens:\n  - {{token: w, role: worker, namespaces: [p], workers: {bad}}}\n"
            );
            let e = AuthTable::parse(&yaml, FileFormat::Yaml).unwrap_err();
            assert!(matches!(e, AuthFileError::Workers { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_fields_and_syntax_errors_are_refused() {
        let e = refused("tokens:\n  - {token: a, role: client, namespace: [x]}\n");
        assert!(e.contains("unknown field `namespace`"), "{e}");
        let e = refused("tokens: [\n");
        assert!(e.starts_with("cannot parse it"), "{e}");
        let e = AuthTable::parse("[[tokens]\n", FileFormat::Toml)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cannot parse it"), "{e}");
        // Refused before serde_yaml reads it (libyaml is quadratic in such nesting).
        let e = refused(&format!("tokens: {}\n", "[".repeat(1 << 20)));
        assert!(e.contains("more than 128 levels deep"), "{e}");
    }

    #[test]
    fn a_file_without_tokens_is_refused() {
        assert_eq!(refused("tokens: []\n"), AuthFileError::NoTokens.to_string());
        assert_eq!(refused("{}\n"), AuthFileError::NoTokens.to_string());
    }

    #[test]
    fn a_debug_print_never_shows_a_token() {
        let raw: RawFile = serde_yaml::from_str(YAML).unwrap();
        let shown = format!("{raw:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        let table = AuthTable::parse(YAML, FileFormat::Yaml).unwrap();
        assert!(!format!("{table:?}").contains("s3cret"));
    }
}
