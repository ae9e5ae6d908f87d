//! Keys computed from a hook's identity: Kafka record keys, AMQP routing keys, Pub/Sub
//! ordering keys. One grammar for every adapter.
//!
//! A template is literal text with the placeholders `{tenant_id}`, `{source_id}`, `{id}` and
//! `{dedupe_key}`; `{{` and `}}` are literal braces. A template without placeholders is a
//! static key.
//!
//! Adapters hold a [`KeyTemplate`]: parsed once, at configuration, with the adapter's
//! [`AbsentTenant`] rule. [`Template`] is the grammar underneath.

use ankusa_sink_core::Envelope;

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

impl Placeholder {
    /// The placeholder as written in a template: `{tenant_id}`, `{source_id}`, `{id}`,
    /// `{dedupe_key}`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Placeholder::TenantId => "{tenant_id}",
            Placeholder::SourceId => "{source_id}",
            Placeholder::Id => "{id}",
            Placeholder::DedupeKey => "{dedupe_key}",
        }
    }
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

/// What `{tenant_id}` renders as for a hook without a tenant. Each adapter picks one when
/// it parses its key and keeps it: the bytes a destination already sees stay the same.
///
/// | Adapter | Key | Rule |
/// | --- | --- | --- |
/// | Kafka | record key | [`Empty`](AbsentTenant::Empty) |
/// | Pub/Sub | ordering key | [`Empty`](AbsentTenant::Empty) |
/// | AMQP | routing key | [`Default`](AbsentTenant::Default) (a topic exchange needs a word) |
///
/// A new adapter takes [`Empty`](AbsentTenant::Empty) unless its destination refuses an
/// empty segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AbsentTenant {
    /// The empty string.
    #[default]
    Empty,
    /// `default`, the name of the tenantless partition ([`TENANTLESS`](ankusa_sink_core::TENANTLESS)).
    Default,
}

impl AbsentTenant {
    /// The text `{tenant_id}` renders as without a tenant: `""` or `"default"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            AbsentTenant::Empty => "",
            AbsentTenant::Default => ankusa_sink_core::TENANTLESS,
        }
    }
}

/// A destination key computed from a hook (a Kafka record key, an AMQP routing key, a
/// Pub/Sub ordering key): a [`Template`] parsed once, at configuration, with its
/// [`AbsentTenant`] rule.
///
/// # Behavior
/// - `{tenant_id}` renders the hook's tenant, or the [`AbsentTenant`] text without one;
///   `{dedupe_key}` renders the dedupe key or nothing; `{source_id}` and `{id}` render
///   themselves; `{{` and `}}` are literal braces.
/// - [`literal`](Self::literal) keys take braces as text (AMQP's `routing_key`).
/// - Destination rules on the rendered values (AMQP refuses `.`, `*` and `#` from a
///   hook's values in topic routing) use [`inserted_char`](Self::inserted_char).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    template: Template,
    absent_tenant: AbsentTenant,
}

impl KeyTemplate {
    /// Parse `template` (see the [module docs](self) for the grammar).
    pub fn parse(template: &str, absent_tenant: AbsentTenant) -> Result<Self, TemplateError> {
        Ok(KeyTemplate {
            template: Template::parse(template)?,
            absent_tenant,
        })
    }

    /// A static key taken as it is: braces are not placeholders.
    pub fn literal(key: impl Into<String>, absent_tenant: AbsentTenant) -> Self {
        KeyTemplate {
            template: Template::literal(key),
            absent_tenant,
        }
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        self.template.as_str()
    }

    /// The rule for an absent tenant.
    pub fn absent_tenant(&self) -> AbsentTenant {
        self.absent_tenant
    }

    /// Whether the key is the same for every hook.
    pub fn is_static(&self) -> bool {
        self.template.is_static()
    }

    /// Whether the template names `p`.
    pub fn uses(&self, p: Placeholder) -> bool {
        self.template.uses(p)
    }

    /// The literal text alone, placeholders left out (for length checks at configuration).
    pub fn literal_text(&self) -> String {
        self.template.literal_text()
    }

    /// The key of `env`.
    pub fn render(&self, env: &Envelope) -> String {
        self.render_fields(&TemplateFields::of(env))
    }

    /// The key of these fields (a description's sample, a key without a whole envelope).
    pub fn render_fields(&self, fields: &TemplateFields<'_>) -> String {
        self.template.render(fields, self.absent_tenant.as_str())
    }

    /// The key for every hook of `source_id` and `tenant_id`, or `None` when it depends on
    /// more: the hook's id or dedupe key, or a tenant that is not known (`None` while the
    /// template names `{tenant_id}`). For AsyncAPI channel addresses.
    pub fn render_for(&self, source_id: &str, tenant_id: Option<&str>) -> Option<String> {
        if self.uses(Placeholder::Id)
            || self.uses(Placeholder::DedupeKey)
            || (self.uses(Placeholder::TenantId) && tenant_id.is_none())
        {
            return None;
        }
        Some(self.render_fields(&TemplateFields {
            source_id,
            tenant_id,
            ..TemplateFields::default()
        }))
    }

    /// The first character matching `refused` in a value this template inserts for `env`,
    /// with its placeholder, in template order; the literal text is not looked at (it was
    /// the operator's to write). An absent tenant's text is never looked at either.
    pub fn inserted_char(
        &self,
        env: &Envelope,
        refused: impl Fn(char) -> bool,
    ) -> Option<(Placeholder, char)> {
        let f = TemplateFields::of(env);
        self.template.parts.iter().find_map(|part| {
            let Part::Field(p) = part else { return None };
            let value = match p {
                Placeholder::TenantId => f.tenant_id,
                Placeholder::SourceId => Some(f.source_id),
                Placeholder::Id => Some(f.id),
                Placeholder::DedupeKey => f.dedupe_key,
            }?;
            value.chars().find(|c| refused(*c)).map(|c| (*p, c))
        })
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
    fn key_templates_keep_each_adapters_absent_tenant() {
        let kafka = KeyTemplate::parse("{tenant_id}/{source_id}", AbsentTenant::Empty).unwrap();
        let amqp =
            KeyTemplate::parse("ankusa.{tenant_id}.{source_id}", AbsentTenant::Default).unwrap();
        assert_eq!(kafka.render(&env(Some("acme"))), "acme/stripe");
        assert_eq!(kafka.render(&env(None)), "/stripe");
        assert_eq!(amqp.render(&env(None)), "ankusa.default.stripe");
        assert_eq!(amqp.render(&env(Some("acme"))), "ankusa.acme.stripe");
        assert_eq!(amqp.absent_tenant(), AbsentTenant::Default);
        assert_eq!(AbsentTenant::default().as_str(), "");
        assert!(!kafka.is_static() && kafka.uses(Placeholder::TenantId));
        assert_eq!(kafka.as_str(), "{tenant_id}/{source_id}");
        assert_eq!(amqp.literal_text(), "ankusa..");

        // Keys for a description: known only when they depend on source and tenant alone.
        assert_eq!(kafka.render_for("s", Some("t")).as_deref(), Some("t/s"));
        assert_eq!(kafka.render_for("s", None), None);
        let by_id = KeyTemplate::parse("{id}", AbsentTenant::Empty).unwrap();
        assert_eq!(by_id.render_for("s", Some("t")), None);
        let by_source = KeyTemplate::parse("x.{source_id}", AbsentTenant::Default).unwrap();
        assert_eq!(by_source.render_for("s", None).as_deref(), Some("x.s"));

        let lit = KeyTemplate::literal("a.{b}", AbsentTenant::Default);
        assert!(lit.is_static());
        assert_eq!(lit.render(&env(None)), "a.{b}");
    }

    #[test]
    fn inserted_characters_are_found_in_values_only() {
        let topic = |c: char| matches!(c, '.' | '*' | '#');
        let t = KeyTemplate::parse(
            "a.{tenant_id}.{source_id}.{dedupe_key}",
            AbsentTenant::Default,
        )
        .unwrap();
        assert_eq!(t.inserted_char(&env(None), topic), None);
        let dotted = Envelope::builder("h.1", "str*pe", "")
            .dedupe_key("e#1")
            .build()
            .unwrap();
        assert_eq!(
            t.inserted_char(&dotted, topic),
            Some((Placeholder::SourceId, '*'))
        );
        let by_id = KeyTemplate::parse("{id}", AbsentTenant::Empty).unwrap();
        assert_eq!(
            by_id.inserted_char(&dotted, topic),
            Some((Placeholder::Id, '.'))
        );
        assert_eq!(Placeholder::Id.as_str(), "{id}");
        assert_eq!(
            KeyTemplate::literal("a.*", AbsentTenant::Default).inserted_char(&dotted, topic),
            None
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
