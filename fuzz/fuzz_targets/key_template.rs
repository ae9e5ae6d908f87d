//! Key templates from a sink file (`KeyTemplate::parse` and its renders): Kafka record
//! keys, AMQP routing keys, Pub/Sub ordering keys.
//!
//! Input: the template, then NUL-separated field values (id, source id, tenant, dedupe
//! key). Invariants: no panic; the template keeps its text; a static template renders its
//! literal text for any hook; a render with empty values is the literal text; `render_for`
//! is the full render whenever it answers.
#![no_main]

use ankusa_message::template::{AbsentTenant, KeyTemplate, Placeholder, TemplateFields};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut parts = text.split('\0');
    let template = parts.next().unwrap_or_default();
    let mut next = || parts.next().unwrap_or_default();
    let (id, source_id, tenant, dedupe) = (next(), next(), next(), next());
    for absent in [AbsentTenant::Empty, AbsentTenant::Default] {
        let Ok(t) = KeyTemplate::parse(template, absent) else {
            continue;
        };
        assert_eq!(t.as_str(), template, "a template lost its text");
        let fields = TemplateFields {
            id,
            source_id,
            tenant_id: (!tenant.is_empty()).then_some(tenant),
            dedupe_key: (!dedupe.is_empty()).then_some(dedupe),
        };
        let key = t.render_fields(&fields);
        let empty = TemplateFields {
            tenant_id: Some(""),
            ..TemplateFields::default()
        };
        assert_eq!(
            t.render_fields(&empty),
            t.literal_text(),
            "empty values render more"
        );
        if t.is_static() {
            assert_eq!(key, t.literal_text(), "a static key depends on the hook");
        }
        let uses_any = [
            Placeholder::TenantId,
            Placeholder::SourceId,
            Placeholder::Id,
            Placeholder::DedupeKey,
        ]
        .into_iter()
        .any(|p| t.uses(p));
        assert_eq!(t.is_static(), !uses_any, "static and placeholders disagree");
        if let Some(k) = t.render_for(source_id, fields.tenant_id) {
            assert_eq!(k, key, "render_for and render disagree");
        }
        let literal = KeyTemplate::literal(template, absent);
        assert_eq!(
            literal.render_fields(&fields),
            template,
            "a literal key changed"
        );
    }
});
