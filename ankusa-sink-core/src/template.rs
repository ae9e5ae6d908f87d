//! Keys computed from a hook's identity: Kafka record keys, AMQP routing keys, Pub/Sub
//! ordering keys. One grammar for every adapter.
//!
//! A template is literal text with the placeholders `{tenant_id}`, `{source_id}`, `{id}` and
//! `{dedupe_key}`; `{{` and `}}` are literal braces. A template without placeholders is a
//! static key.

use crate::envelope::Envelope;

/// A value a template can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Placeholder {
    /// `{tenant_id}`.
    TenantId,
    /// `{source_id}`.
    SourceId,
    /// `{id}`: the hook id.
    Id,
    /// `{dedupe_key}`.
    DedupeKey,
}

/// Why a template was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// A `{` without its `}`.
    #[error("unclosed {{ in {0:?}")]
    Unclosed(String),
    /// A `}` that closes nothing.
    #[error("unmatched }} in {0:?} (write }}}} for a brace)")]
    Unmatched(String),
    /// A placeholder that names nothing.
    #[error(
        "unknown placeholder {{{name}}} in {template:?}: use {{tenant_id}}, {{source_id}}, {{id}} or {{dedupe_key}}"
    )]
    Unknown {
        /// The name between the braces.
        name: String,
        /// The template.
        template: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Placeholder),
}

/// The values a template renders from; [`TemplateFields::of`] takes them from an envelope.
#[derive(Debug, Clone, Copy, Default)]
pub struct TemplateFields<'a> {
    /// The hook id.
    pub id: &'a str,
    /// The source id.
    pub source_id: &'a str,
    /// The tenant, if any.
    pub tenant_id: Option<&'a str>,
    /// The dedupe key, if any.
    pub dedupe_key: Option<&'a str>,
}

impl<'a> TemplateFields<'a> {
    /// The fields of `env`.
    pub fn of(env: &'a Envelope) -> Self {
        TemplateFields {
            id: env.id(),
            source_id: env.source_id(),
            tenant_id: env.tenant_id(),
            dedupe_key: env.dedupe_key(),
        }
    }
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<Part>,
}

impl Template {
    /// Parse a template.
    pub fn parse(template: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut chars = template.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '{' if chars.peek() == Some(&'{') => {
                    chars.next();
                    text.push('{');
                }
                '}' if chars.peek() == Some(&'}') => {
                    chars.next();
                    text.push('}');
                }
                '{' => {
                    let mut name = String::new();
                    loop {
                        match chars.next() {
                            Some('}') => break,
                            Some(c) => name.push(c),
                            None => return Err(TemplateError::Unclosed(template.to_owned())),
                        }
                    }
                    let field = match name.as_str() {
                        "tenant_id" => Placeholder::TenantId,
                        "source_id" => Placeholder::SourceId,
                        "id" => Placeholder::Id,
                        "dedupe_key" => Placeholder::DedupeKey,
                        _ => {
                            return Err(TemplateError::Unknown {
                                name,
                                template: template.to_owned(),
                            });
                        }
                    };
                    if !text.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut text)));
                    }
                    parts.push(Part::Field(field));
                }
                '}' => return Err(TemplateError::Unmatched(template.to_owned())),
                c => text.push(c),
            }
        }
        if !text.is_empty() {
            parts.push(Part::Text(text));
        }
        Ok(Template {
            source: template.to_owned(),
            parts,
        })
    }

    /// A static key taken as it is: braces are not placeholders.
    pub fn literal(key: impl Into<String>) -> Self {
        let source = key.into();
        let parts = if source.is_empty() {
            Vec::new()
        } else {
            vec![Part::Text(source.clone())]
        };
        Template { source, parts }
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the key is the same for every hook.
    pub fn is_static(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// Whether the template names `p`.
    pub fn uses(&self, p: Placeholder) -> bool {
        self.parts.contains(&Part::Field(p))
    }

    /// The literal text alone, placeholders left out (for length checks).
    pub fn literal_text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                Part::Field(_) => None,
            })
            .collect()
    }

    /// Render: an absent tenant becomes `absent_tenant`, an absent dedupe key the empty
    /// string.
    pub fn render(&self, f: &TemplateFields<'_>, absent_tenant: &str) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Field(Placeholder::TenantId) => {
                    out.push_str(f.tenant_id.unwrap_or(absent_tenant))
                }
                Part::Field(Placeholder::SourceId) => out.push_str(f.source_id),
                Part::Field(Placeholder::Id) => out.push_str(f.id),
                Part::Field(Placeholder::DedupeKey) => out.push_str(f.dedupe_key.unwrap_or("")),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(tenant: Option<&str>) -> Envelope {
        Envelope::builder("h1", "stripe", "{}")
            .tenant(tenant.map(str::to_owned))
            .dedupe_key("evt_1")
            .build()
            .unwrap()
    }

    #[test]
    fn renders_every_placeholder_and_escapes() {
        let t = Template::parse("{{x}}/{tenant_id}/{source_id}/{id}/{dedupe_key}").unwrap();
        let e = env(Some("acme"));
        assert_eq!(
            t.render(&TemplateFields::of(&e), ""),
            "{x}/acme/stripe/h1/evt_1"
        );
        let e = env(None);
        assert_eq!(
            t.render(&TemplateFields::of(&e), "default"),
            "{x}/default/stripe/h1/evt_1"
        );
        assert!(!t.is_static() && t.uses(Placeholder::Id) && t.uses(Placeholder::TenantId));
        assert_eq!(t.literal_text(), "{x}////");
        assert_eq!(
            t.as_str(),
            "{{x}}/{tenant_id}/{source_id}/{id}/{dedupe_key}"
        );
    }

    #[test]
    fn static_and_literal_keys() {
        let t = Template::parse("fixed").unwrap();
        assert!(t.is_static());
        assert_eq!(t.render(&TemplateFields::default(), ""), "fixed");
        let l = Template::literal("a{b}");
        assert!(l.is_static());
        assert_eq!(l.render(&TemplateFields::default(), ""), "a{b}");
        assert_eq!(
            Template::literal("").render(&TemplateFields::default(), ""),
            ""
        );
    }

    #[test]
    fn bad_templates_are_clear_errors() {
        assert_eq!(
            Template::parse("a{id"),
            Err(TemplateError::Unclosed("a{id".into()))
        );
        assert_eq!(
            Template::parse("a}b"),
            Err(TemplateError::Unmatched("a}b".into()))
        );
        let e = Template::parse("{nope}").unwrap_err();
        assert!(e.to_string().contains("unknown placeholder {nope}"), "{e}");
    }
}
