//! `ankusa-sink dead-letters stats|list`: what never got delivered, and why, read from a
//! dead-letter file or from the source a dead-letter sink feeds, without taking any.

use crate::from_source::OpenError;
use crate::lines::{InputLine, read_line};
use crate::output::escape_control;
use crate::{DeadLettersArgs, DeadLettersCommand, UsageError};
use ankusa_dispatch::DeadLetterInfo;
use ankusa_dispatch::record::{PairRecord, PairState, RecordFilter, reason_key};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

/// Longest record or line read, in bytes (a longer one counts as not a dead letter).
const MAX_RECORD: usize = 64 * 1024 * 1024;

/// One dead letter, as these commands show it: never its body or headers.
struct Entry {
    id: String,
    tenant: Option<String>,
    info: DeadLetterInfo,
}

/// What was read.
#[derive(Default)]
struct Read {
    /// The dead letters the filters matched.
    entries: Vec<Entry>,
    /// Dead letters the filters left out.
    filtered_out: u64,
    /// Records of a source record that could not be decoded (`raw_base64`), kept as they
    /// came: no sink, no hook.
    undecodable: u64,
    /// Records or lines that are not dead letters (parked records, envelopes, garbage).
    not_dead_letters: u64,
    /// Reading ended at the source's window: more records wait past it.
    window_full: bool,
}

impl Read {
    fn take(&mut self, bytes: &[u8], filter: &RecordFilter) {
        match PairRecord::parse(bytes) {
            Ok(r) if r.state == PairState::Dead => {
                if filter.matches(&r.envelope, &r.info) {
                    self.entries.push(Entry {
                        id: r.envelope.id().to_owned(),
                        tenant: r.envelope.tenant_id().map(str::to_owned),
                        info: r.info,
                    });
                } else {
                    self.filtered_out += 1;
                }
            }
            Ok(_) => self.not_dead_letters += 1,
            Err(_) if is_raw(bytes) => self.undecodable += 1,
            Err(_) => self.not_dead_letters += 1,
        }
    }
}

/// Whether `bytes` is the dead letter of an undecodable source record (its raw bytes).
fn is_raw(bytes: &[u8]) -> bool {
    let body = match ankusa_message::decode(bytes) {
        Ok(m) => match m.body {
            ankusa_message::MessageBody::Inline(b) => b.to_vec(),
            ankusa_message::MessageBody::Claim(_) => return false,
        },
        Err(_) => bytes.to_vec(),
    };
    serde_json::from_slice::<serde_json::Value>(&body)
        .is_ok_and(|v| v.get("raw_base64").is_some() && v.get("dead_letter").is_some())
}

pub(crate) async fn run(c: DeadLettersCommand) -> Result<ExitCode, UsageError> {
    let (stats, a) = match c {
        DeadLettersCommand::Stats(a) => (true, a),
        DeadLettersCommand::List(a) => (false, a),
    };
    let read = match read(&a).await {
        Ok(read) => read,
        Err(OpenError::Usage(e)) => return Err(e),
        Err(OpenError::Unavailable(why)) => return Ok(crate::source_unavailable(&why)),
    };
    let mut out = std::io::stdout().lock();
    let written = if stats {
        write_stats(&mut out, &read, a.json)
    } else {
        write_list(&mut out, &read, a.json)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            eprintln!("ankusa-sink: writing to stdout: {e}");
            Ok(ExitCode::from(crate::EXIT_OUTPUT))
        }
    }
}

/// Read every dead letter of `--input` or `--from`.
async fn read(a: &DeadLettersArgs) -> Result<Read, OpenError> {
    let filter = a.filter.filter();
    let mut read = Read::default();
    if let Some(input) = &a.input {
        let file = crate::deliver::open_input(input)?;
        let mut r = std::io::BufReader::with_capacity(64 * 1024, file);
        loop {
            match read_line(&mut r, MAX_RECORD) {
                Ok(None) => break,
                Ok(Some(InputLine::Bytes(b))) if b.iter().all(u8::is_ascii_whitespace) => {}
                Ok(Some(InputLine::Bytes(b))) => read.take(&b, &filter),
                Ok(Some(InputLine::TooLong)) => read.not_dead_letters += 1,
                Err(e) => return Err(UsageError(format!("reading {input}: {e}")).into()),
            }
        }
        return Ok(read);
    }
    let from = a.from.as_ref().expect("clap requires --from or --input");
    let config =
        crate::from_source::read_config(from, "--from", &from.display().to_string()).await?;
    // Every record read is held unacknowledged until the end: the window (and RabbitMQ's
    // prefetch, which follows the concurrency) must hold them all.
    let options = crate::from_source::options(
        a.max_records,
        1 << 40,
        Duration::from_secs(30),
        usize::try_from(a.max_records.min(u64::from(u16::MAX))).unwrap_or(1),
    );
    let source = config
        .open(&options)
        .await
        .map_err(|e| OpenError::of(from.display(), e))?;
    let stop = ankusa_dispatch::forward::ForwardStop::default();
    let browsed = ankusa_dispatch::forward::browse(
        source,
        Duration::from_secs(3),
        Duration::from_secs(10),
        &stop,
        |record| {
            if record.payload.len() > MAX_RECORD {
                read.not_dead_letters += 1;
            } else {
                read.take(&record.payload, &filter);
            }
        },
    )
    .await
    .map_err(|e| UsageError(format!("{}: {e}", from.display())))?;
    read.window_full = browsed.window_full;
    Ok(read)
}

/// Counts of one dimension, largest first.
fn ranked(counts: BTreeMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

/// A Unix ms as RFC 3339 (milliseconds, UTC); a value no calendar date holds, as it is.
fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

/// The UTC hour of a Unix ms, `2026-12-07T21:00Z`.
fn hour(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:00Z").to_string())
        .unwrap_or_else(|| ms.to_string())
}

#[derive(Serialize)]
struct Stats {
    dead_letters: u64,
    filtered_out: u64,
    undecodable: u64,
    not_dead_letters: u64,
    window_full: bool,
    by_sink: BTreeMap<String, u64>,
    by_class: BTreeMap<String, u64>,
    by_reason: BTreeMap<String, u64>,
    by_tenant: BTreeMap<String, u64>,
    by_hour: BTreeMap<String, u64>,
}

fn stats(read: &Read) -> Stats {
    let mut s = Stats {
        dead_letters: read.entries.len() as u64,
        filtered_out: read.filtered_out,
        undecodable: read.undecodable,
        not_dead_letters: read.not_dead_letters,
        window_full: read.window_full,
        by_sink: BTreeMap::new(),
        by_class: BTreeMap::new(),
        by_reason: BTreeMap::new(),
        by_tenant: BTreeMap::new(),
        by_hour: BTreeMap::new(),
    };
    for e in &read.entries {
        let i = &e.info;
        *s.by_sink.entry(i.sink.clone()).or_default() += 1;
        *s.by_class.entry(i.class.clone()).or_default() += 1;
        *s.by_reason.entry(reason_key(&i.reason)).or_default() += 1;
        *s.by_tenant
            .entry(e.tenant.clone().unwrap_or_else(|| "-".to_owned()))
            .or_default() += 1;
        *s.by_hour.entry(hour(i.last_attempt_ms)).or_default() += 1;
    }
    s
}

fn write_stats(out: &mut impl std::io::Write, read: &Read, json: bool) -> std::io::Result<()> {
    let s = stats(read);
    if json {
        serde_json::to_writer(&mut *out, &s)?;
        return writeln!(out);
    }
    writeln!(out, "dead letters: {}", s.dead_letters)?;
    for (title, counts) in [
        ("sink", &s.by_sink),
        ("class", &s.by_class),
        ("reason", &s.by_reason),
        ("tenant", &s.by_tenant),
        ("hour (UTC, last attempt)", &s.by_hour),
    ] {
        if counts.is_empty() {
            continue;
        }
        writeln!(out, "by {title}:")?;
        let rows = ranked(counts.clone());
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        for (k, n) in rows {
            writeln!(out, "  {:<width$}  {n:>8}", escape_control(&k))?;
        }
    }
    notes(out, read)
}

/// What was read besides the dead letters shown.
fn notes(out: &mut impl std::io::Write, read: &Read) -> std::io::Result<()> {
    if read.filtered_out > 0 {
        writeln!(out, "left out by the filters: {}", read.filtered_out)?;
    }
    if read.undecodable > 0 {
        writeln!(
            out,
            "undecodable source records (kept raw, no sink): {}",
            read.undecodable
        )?;
    }
    if read.not_dead_letters > 0 {
        writeln!(
            out,
            "records that are not dead letters: {}",
            read.not_dead_letters
        )?;
    }
    if read.window_full {
        writeln!(
            out,
            "more records wait past the {} read: raise --max-records to see them",
            read.entries.len() as u64
                + read.filtered_out
                + read.undecodable
                + read.not_dead_letters
        )?;
    }
    Ok(())
}

#[derive(Serialize)]
struct ListLine<'a> {
    id: &'a str,
    sink: &'a str,
    class: &'a str,
    error_class: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant_id: Option<&'a str>,
    attempts: u32,
    first_attempt: String,
    last_attempt: String,
    reason: &'a str,
}

fn write_list(out: &mut impl std::io::Write, read: &Read, json: bool) -> std::io::Result<()> {
    if !json {
        writeln!(
            out,
            "id\tsink\tclass\tattempts\tfirst_attempt\tlast_attempt\treason"
        )?;
    }
    for e in &read.entries {
        let i = &e.info;
        if json {
            serde_json::to_writer(
                &mut *out,
                &ListLine {
                    id: &e.id,
                    sink: &i.sink,
                    class: &i.class,
                    error_class: &i.error_class,
                    tenant_id: e.tenant.as_deref(),
                    attempts: i.attempts,
                    first_attempt: time(i.first_attempt_ms),
                    last_attempt: time(i.last_attempt_ms),
                    reason: &i.reason,
                },
            )?;
            writeln!(out)?;
        } else {
            writeln!(
                out,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                escape_control(&e.id),
                escape_control(&i.sink),
                escape_control(&i.class),
                i.attempts,
                time(i.first_attempt_ms),
                time(i.last_attempt_ms),
                escape_control(&i.reason)
            )?;
        }
    }
    if json {
        return Ok(());
    }
    notes(out, read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ankusa_sink_core::{Envelope, Failure, Reason};

    fn line(id: &str, sink: &str, tenant: &str, reason: &str, at: i64) -> String {
        let env = Envelope::builder(id, "s", "b")
            .tenant_id(tenant)
            .build()
            .unwrap();
        let f = Failure::permanent(Reason(reason.into()));
        ankusa_dispatch::record_line(&env, &DeadLetterInfo::new(sink, &f, 2, at - 5, at)).unwrap()
    }

    #[test]
    fn stats_count_by_each_dimension_and_set_apart_what_is_not_a_dead_letter() {
        let mut read = Read::default();
        let filter = RecordFilter::new();
        let at = 1_765_130_400_000; // 2025-12-07T18:00:00Z
        for l in [
            line("h1", "http", "acme", "HTTP 410 Gone", at),
            line("h2", "http", "acme", "HTTP 410 Gone", at + 3_600_000),
            line("h3", "kafka", "beta", "broker: too large: 2 MiB", at),
        ] {
            read.take(l.as_bytes(), &filter);
        }
        read.take(
            br#"{"raw_base64":"AA==","position":"t/0@1","dead_letter":{"sink":null}}"#,
            &filter,
        );
        read.take(b"not json", &filter);
        let s = stats(&read);
        assert_eq!(
            (s.dead_letters, s.undecodable, s.not_dead_letters),
            (3, 1, 1)
        );
        assert_eq!(s.by_sink["http"], 2);
        assert_eq!(s.by_reason["HTTP 410 Gone"], 2);
        assert_eq!(s.by_reason["broker"], 1, "the chain's values are left out");
        assert_eq!(s.by_tenant["beta"], 1);
        assert_eq!(s.by_hour["2025-12-07T18:00Z"], 2);
        assert_eq!(s.by_hour["2025-12-07T19:00Z"], 1);
        let mut text = Vec::new();
        write_stats(&mut text, &read, false).unwrap();
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.starts_with("dead letters: 3\nby sink:\n  http "),
            "{text}"
        );
        let mut list = Vec::new();
        write_list(&mut list, &read, true).unwrap();
        let first: serde_json::Value =
            serde_json::from_slice(list.split(|b| *b == b'\n').next().unwrap()).unwrap();
        assert_eq!(first["id"], "h1");
        assert_eq!(first["last_attempt"], "2025-12-07T18:00:00.000Z");
        assert_eq!(
            time(i64::MAX),
            i64::MAX.to_string(),
            "no panic past year 9999"
        );
        assert_eq!(hour(-1), "1969-12-31T23:00Z");
        assert!(first.get("body").is_none());
        let mut only = Read::default();
        let filter = RecordFilter::new().sink("http").between(Some(at + 1), None);
        for l in [
            line("h1", "http", "a", "x", at),
            line("h2", "http", "a", "x", at + 9),
        ] {
            only.take(l.as_bytes(), &filter);
        }
        assert_eq!((only.entries.len(), only.filtered_out), (1, 1));
        assert_eq!(only.entries[0].id, "h2");
    }
}
