//! `${ENV_VAR}` references in string values, and which variables a config may read.

use crate::config_error::ConfigError;

/// Which environment variables a config may read, through `${VAR}` references in any
/// string and the HTTP sink's `{ env = "VAR" }` secrets.
///
/// A config is trusted input: with [`EnvAccess::Any`] it can read every variable of the
/// process (and send it wherever its URL points). Configs written by someone else (a
/// tenant, an API caller) must be parsed with [`EnvAccess::None`] or
/// [`EnvAccess::Prefix`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EnvAccess {
    /// Any variable (operator-written configs; what `from_toml_str` uses).
    Any,
    /// None: a reference is an error naming the key.
    None,
    /// Only variables whose name starts with this prefix (e.g. `ANKUSA_TENANT_42_`).
    Prefix(String),
}

impl EnvAccess {
    fn allows(&self, name: &str) -> bool {
        match self {
            EnvAccess::Any => true,
            EnvAccess::None => false,
            EnvAccess::Prefix(p) => name.starts_with(p.as_str()),
        }
    }
}

/// Replace every `${NAME}` in every string of `value` with the environment variable `NAME`.
/// `$${` stays a literal `${`. A missing variable is an error naming it and the key path.
pub(crate) fn expand(
    value: &mut toml::Value,
    path: &str,
    access: &EnvAccess,
) -> Result<(), ConfigError> {
    expand_with(value, path, access, &|name| std::env::var(name).ok())
}

pub(crate) fn expand_with(
    value: &mut toml::Value,
    path: &str,
    access: &EnvAccess,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    let guarded = |name: &str| -> Result<Option<String>, ConfigError> {
        if access.allows(name) {
            Ok(lookup(name))
        } else {
            Err(ConfigError::Env {
                path: path.to_owned(),
                detail: "this config may not read environment variables (or not that one)".into(),
            })
        }
    };
    match value {
        // The HTTP sink's `{ env = "VAR" }` secret reads a variable when the sink is built:
        // hold it to the same rule. Any table with an `env` key counts, whatever else it
        // holds (`{ env = "X", pad = 1 }`) or whatever `env` is: the guard must not depend
        // on what a parser downstream happens to accept.
        toml::Value::Table(t) if *access != EnvAccess::Any && t.contains_key("env") => {
            match t.get("env") {
                Some(toml::Value::String(name)) if t.len() == 1 => {
                    guarded(name)?;
                }
                _ => {
                    return Err(ConfigError::Env {
                        path: path.to_owned(),
                        detail: "this config may not read environment variables \
                                 (a table with an `env` key is an environment reference)"
                            .into(),
                    });
                }
            }
        }
        toml::Value::String(s) if s.contains("${") => {
            *s = expand_str(s, path, &guarded)?;
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                expand_with(v, &format!("{path}[{i}]"), access, lookup)?;
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                expand_with(v, &join(path, k), access, lookup)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

fn expand_str(
    s: &str,
    path: &str,
    lookup: &dyn Fn(&str) -> Result<Option<String>, ConfigError>,
) -> Result<String, ConfigError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$${") {
            out.push_str("${");
            rest = t;
        } else if let Some(t) = tail.strip_prefix("${") {
            let end = t.find('}').ok_or_else(|| ConfigError::Env {
                path: path.to_owned(),
                detail: "unterminated ${".into(),
            })?;
            let name = &t[..end];
            let valid =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !valid {
                // Not echoed: this may be a literal secret that happens to contain `${`.
                return Err(ConfigError::Env {
                    path: path.to_owned(),
                    detail: "invalid variable reference (a name is letters, digits and _; \
                             write $${ for a literal ${)"
                        .into(),
                });
            }
            let v = lookup(name)?.ok_or_else(|| ConfigError::Env {
                path: path.to_owned(),
                detail: format!("environment variable {name} is not set"),
            })?;
            out.push_str(&v);
            rest = &t[end + 1..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cr3t".to_owned())
    }

    #[test]
    fn references_expand_and_escape() {
        let mut v: toml::Value = toml::from_str(
            r#"a = "x-${TOKEN}-y"
b = ["${TOKEN}"]
c = "cost $5 and $${LITERAL}"
[d]
e = "${TOKEN}""#,
        )
        .unwrap();
        expand_with(&mut v, "", &EnvAccess::Any, &lookup).unwrap();
        assert_eq!(v["a"].as_str(), Some("x-s3cr3t-y"));
        assert_eq!(v["b"][0].as_str(), Some("s3cr3t"));
        assert_eq!(v["c"].as_str(), Some("cost $5 and ${LITERAL}"));
        assert_eq!(v["d"]["e"].as_str(), Some("s3cr3t"));
    }

    #[test]
    fn missing_and_malformed_references_name_the_key() {
        for (text, want) in [
            (
                r#"k = "${NOPE}""#,
                "k: environment variable NOPE is not set",
            ),
            (r#"k = "${TOKEN""#, "k: unterminated ${"),
            (
                r#"k = "${A-B}""#,
                "k: invalid variable reference (a name is letters, digits and _; write $${ for a literal ${)",
            ),
            (
                r#"[t]
k = ["${NOPE}"]"#,
                "t.k[0]: environment variable NOPE is not set",
            ),
        ] {
            let mut v: toml::Value = toml::from_str(text).unwrap();
            let err = expand_with(&mut v, "", &EnvAccess::Any, &lookup).unwrap_err();
            assert!(err.to_string().ends_with(want), "{err} vs {want}");
        }
    }

    #[test]
    fn restricted_access_refuses_references_and_env_secrets() {
        let none = EnvAccess::None;
        let prefix = EnvAccess::Prefix("TOK".into());
        for (text, access, want) in [
            (r#"k = "${TOKEN}""#, &none, None),
            (r#"k = "${TOKEN}""#, &prefix, Some("s3cr3t")),
            (r#"k = "${OTHER}""#, &prefix, None),
            (r#"k = "$${TOKEN}""#, &none, Some("${TOKEN}")),
        ] {
            let mut v: toml::Value = toml::from_str(text).unwrap();
            match (expand_with(&mut v, "", access, &lookup), want) {
                (Ok(()), Some(w)) => assert_eq!(v["k"].as_str(), Some(w), "{text}"),
                (Err(e), None) => {
                    assert!(
                        e.to_string()
                            .starts_with("sink config key k: this config may not"),
                        "{e}"
                    )
                }
                (r, w) => panic!("{text}: {r:?} vs {w:?}"),
            }
        }
        // The HTTP sink's `{ env = "VAR" }` form is held to the same rule.
        let text = "[t]\nsecret = { env = \"AWS_SECRET_ACCESS_KEY\" }";
        let mut v: toml::Value = toml::from_str(text).unwrap();
        let e = expand_with(&mut v, "", &none, &lookup).unwrap_err();
        assert!(e.to_string().contains("t.secret"), "{e}");
        let mut v: toml::Value = toml::from_str(text).unwrap();
        expand_with(&mut v, "", &EnvAccess::Any, &lookup).unwrap();
        // A table with an `env` key and anything else, or an `env` that is not a string,
        // is refused too, under either restriction, even with an allowed name.
        for text in [
            "[t]\nsecret = { env = \"TOKEN\", pad = 1 }",
            "[t]\nsecret = { env = { env = \"TOKEN\" } }",
            "[t]\nsecret = { env = [\"TOKEN\"] }",
        ] {
            for access in [&none, &prefix] {
                let mut v: toml::Value = toml::from_str(text).unwrap();
                let e = expand_with(&mut v, "", access, &lookup).unwrap_err();
                assert!(e.to_string().contains("t.secret"), "{text}: {e}");
            }
        }
    }
}
