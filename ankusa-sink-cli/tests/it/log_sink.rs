//! The embedded default: gen, forward, deliver, info, check, describe with the log sink.

use super::{assert_delivered, bin, forward_log, json_lines, run, temp_file, text};
use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;
use std::time::Duration;

#[test]
fn gen_then_forward_reports_every_hook() {
    let out = run(&["gen", "--count", "25", "--size", "100", "--tenant", "acme"]);
    assert!(out.status.success());
    let lines = text(&out.stdout);
    assert_eq!(lines.lines().count(), 25);
    let input = temp_file("hooks.jsonl", &lines);
    let out = forward_log(&input, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let outcomes = json_lines(&out.stdout);
    assert_eq!(outcomes.len(), 25);
    for o in &outcomes {
        // Exactly {"id","sink","outcome","attempts"} for a delivered hook.
        assert_eq!(o.as_object().unwrap().len(), 4, "{o}");
        assert_eq!(o["sink"], "log");
        assert_eq!(o["outcome"], "ok");
        assert_eq!(o["attempts"], 1);
    }
    let stderr = text(&out.stderr);
    assert!(stderr.contains("delivered 25 failed 0"), "{stderr}");
    assert!(stderr.contains("hooks/s"), "{stderr}");
}

#[test]
fn deliver_one_and_capabilities() {
    let body = temp_file("body.json", "{\"a\":1}");
    let out = run(&[
        "deliver",
        "--sink",
        "log",
        "--body",
        body.to_str().unwrap(),
        "--id",
        "h-1",
        "--source-id",
        "stripe",
        "--tenant",
        "acme",
        "--header",
        "X-Event: paid",
        "--content-type",
        "application/json",
        "--dedupe-key",
        "evt_1",
        "--replay-id",
        "r1",
        "--attempt",
        "2",
        "--json",
    ]);
    assert_delivered(&out, "h-1", "log", 1);

    let out = run(&["info", "--sink", "log", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"type":"log","durable":false,"inline_max_bytes":null,"batched":false,
            "capabilities": {"durable": false, "ok_means": "sent", "inline_max_bytes": null,
                "batched": false, "max_message": null, "ordering": {"kind": "none"},
                "dedupe_window_s": null, "batch": null, "auth": ["none"]}})
    );
    // Nothing to check is not a pass: its own exit code.
    let out = run(&["check", "--sink", "log"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        text(&out.stdout).contains("not checked"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["describe", "--sink", "log", "--source-id", "s"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout).trim(), "null");
}

#[test]
fn bad_input_is_a_clear_error_and_loses_nothing() {
    let good = text(&run(&["gen", "--count", "3"]).stdout);
    let mut lines: Vec<&str> = good.lines().collect();
    lines.insert(1, "{not json");
    let input = temp_file("mixed.jsonl", &lines.join("\n"));
    let out = forward_log(&input, &["--json"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("delivered 3 failed 0"), "{stderr}");
    let stdout = text(&out.stdout);
    let lines = json_lines(&out.stdout);
    assert_eq!(
        lines.len(),
        4,
        "the valid hooks are still delivered: {stdout}"
    );
    let invalid: Vec<_> = lines.iter().filter(|l| l["outcome"] == "invalid").collect();
    assert_eq!(invalid.len(), 1, "{stdout}");
    assert_eq!(invalid[0]["line"], 2);
    assert!(
        invalid[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("not JSON"),
        "{stdout}"
    );
    // Without --json the same report goes to stderr.
    let out = forward_log(&input, &[]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("input line 2: not JSON"), "{stderr}");

    let out = run(&["deliver", "--sink", "log", "--tenant", "a.b"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("invalid tenant id"));
    let out = run(&["deliver", "--sink", "log", "--header", "no-colon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("expected `name: value`"));
    let out = run(&["forward", "--sink", "log", "--concurrency", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = run(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2), "clap usage errors exit 2");
}

/// Peak resident memory of a running process, from /proc.
fn vm_hwm_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn forward_of_100k_hooks_stays_in_bounded_memory() {
    const N: usize = 100_000;
    // Generate straight into the forward's stdin: ~95 MB of JSON lines in all.
    let mut gen_cmd = bin()
        .args(["gen", "--count", &N.to_string(), "--size", "600"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut fwd = bin()
        .args(["forward", "--sink", "log", "--concurrency", "64"])
        .stdin(gen_cmd.stdout.take().unwrap())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = fwd.id();
    let mut peak = 0;
    loop {
        if let Some(kb) = vm_hwm_kb(pid) {
            peak = peak.max(kb);
        }
        if fwd.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(gen_cmd.wait().unwrap().success());
    let mut summary = String::new();
    BufReader::new(fwd.stderr.take().unwrap())
        .read_line(&mut summary)
        .unwrap();
    assert!(fwd.wait().unwrap().success());
    assert!(
        summary.starts_with(&format!("delivered {N} failed 0")),
        "{summary}"
    );
    // The input is ~95 MB; a forward that buffered it would peak far above this.
    assert!(peak > 0 && peak < 40 * 1024, "peak RSS {peak} kB");
    let _ = std::io::stderr().write_all(format!("forward 100k: peak RSS {peak} kB\n").as_bytes());
}

/// `messages = true` writes each hook as one Message v1 line on stdout: read back and
/// decoded with core's own decoder, every line is a hook of the input, whole (tenant or
/// none, dedupe key, the forwarded headers only, any body bytes, inline), and every input
/// hook is there exactly once.
#[test]
fn messages_on_stdout_decode_as_message_v1_of_every_input_hook() {
    use ankusa_message::MessageBody;
    use ankusa_sink_core::{Ctx, Envelope};
    use std::collections::BTreeMap;

    let mut input = String::new();
    let mut want: BTreeMap<String, Envelope> = BTreeMap::new();
    for i in 0..40u32 {
        let body: Vec<u8> = match i % 4 {
            0 => format!(r#"{{"n":{i},"text":"é\"\\"}}"#).into_bytes(),
            1 => (0..=255u8).cycle().skip(i as usize).take(300).collect(),
            2 => Vec::new(),
            _ => vec![b'z'; 70_000 + i as usize],
        };
        let mut b = Envelope::builder(format!("hook-{i:02}"), format!("src-{}", i % 3), body)
            .received_at(1_700_000_000_000 + i64::from(i))
            .header("X-Event", format!("e{i}"))
            .header("Authorization", "Bearer planted-secret")
            .header("x-event", "second");
        if i % 2 == 0 {
            b = b.tenant_id("acme").dedupe_key(format!("evt_{i}"));
        }
        if i % 4 == 0 {
            b = b.content_type("application/json");
        }
        let env = b.build().unwrap();
        input.push_str(&serde_json::to_string(&env).unwrap());
        input.push('\n');
        want.insert(env.id().to_owned(), env);
    }
    let hooks = temp_file("hooks.jsonl", &input);
    let sink = temp_file("log.toml", "type = \"log\"\nmessages = true\n");
    let out = run(&[
        "forward",
        "--sink",
        sink.to_str().unwrap(),
        "--input",
        hooks.to_str().unwrap(),
        "--concurrency",
        "8",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("delivered 40 failed 0"),
        "{}",
        text(&out.stderr)
    );
    let stdout = out.stdout;
    assert!(stdout.ends_with(b"\n"));
    let mut seen = BTreeMap::new();
    for line in stdout[..stdout.len() - 1].split(|&b| b == b'\n') {
        let m = ankusa_message::decode(line)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)));
        let env = want
            .get(&m.id)
            .unwrap_or_else(|| panic!("not an input hook: {}", m.id));
        assert_eq!(m.source_id, env.source_id());
        assert_eq!(m.tenant_id.as_deref(), env.tenant_id());
        assert_eq!(m.received_at, env.received_at());
        assert_eq!(m.content_type.as_deref(), env.content_type());
        assert_eq!(m.size, env.size());
        assert_eq!(m.dedupe_key.as_deref(), env.dedupe_key());
        assert_eq!(m.replay_id, None);
        assert_eq!(m.idempotency_key, env.idempotency_key());
        assert_eq!(m.sha256, env.body_sha256());
        assert_eq!(m.body, MessageBody::Inline(env.body().clone()), "{}", m.id);
        let headers: Vec<(String, String)> =
            ankusa_message::forwarded_headers(env, &Ctx::for_envelope(env))
                .into_iter()
                .map(|(n, v)| (n.into_owned(), v.into_owned()))
                .collect();
        assert_eq!(m.headers, headers, "{}", m.id);
        // One name, both values in arrival order; never the credential.
        let i: u32 = m.id.trim_start_matches("hook-").parse().unwrap();
        assert_eq!(
            m.headers,
            [("x-event".to_owned(), format!("e{i}, second"))],
            "{}",
            m.id
        );
        assert!(seen.insert(m.id.clone(), ()).is_none(), "{} twice", m.id);
    }
    assert_eq!(seen.len(), want.len());
    assert!(!text(&stdout).contains("planted-secret"));
}
