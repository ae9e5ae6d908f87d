//! `${ENV_VAR}` references in string values.

use crate::config::ConfigError;

/// Replace every `${NAME}` in every string of `value` with the environment variable `NAME`.
/// `$${` stays a literal `${`. A missing variable is an error naming it and the key path.
pub(crate) fn expand(value: &mut toml::Value, path: &str) -> Result<(), ConfigError> {
    expand_with(value, path, &|name| std::env::var(name).ok())
}

pub(crate) fn expand_with(
    value: &mut toml::Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(), ConfigError> {
    match value {
        toml::Value::String(s) if s.contains("${") => {
            *s = expand_str(s, path, lookup)?;
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                expand_with(v, &format!("{path}[{i}]"), lookup)?;
            }
        }
        toml::Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                expand_with(v, &p, lookup)?;
            }
        }
        _ => {}
    }
    Ok(())
}

fn expand_str(
    s: &str,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
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
                return Err(ConfigError::Env {
                    path: path.to_owned(),
                    detail: format!("invalid variable name {name:?}"),
                });
            }
            let v = lookup(name).ok_or_else(|| ConfigError::Env {
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
        expand_with(&mut v, "", &lookup).unwrap();
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
            (r#"k = "${A-B}""#, "k: invalid variable name \"A-B\""),
            (
                r#"[t]
k = ["${NOPE}"]"#,
                "t.k[0]: environment variable NOPE is not set",
            ),
        ] {
            let mut v: toml::Value = toml::from_str(text).unwrap();
            let err = expand_with(&mut v, "", &lookup).unwrap_err();
            assert!(err.to_string().ends_with(want), "{err} vs {want}");
        }
    }
}
