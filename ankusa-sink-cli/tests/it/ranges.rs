//! Extreme numbers (issue 64, finding 6): every numeric flag and `[dispatch]` key has a
//! range, checked at parse: exit 2 naming the flag or the key. Each of these used to panic
//! at start (exit 101), stop the scheduler mid-run, or be taken as it was.

use super::{run, temp_file, text};

const HUGE: &str = "18446744073709551615";

#[test]
fn a_numeric_flag_out_of_its_range_exits_2_naming_the_flag() {
    let forward = |flag: &str, value: &str| {
        let arg = format!("{flag}={value}");
        run(&["forward", "--sink", "log", "--input", "/dev/null", &arg])
    };
    for (flag, value) in [
        ("--concurrency", HUGE),
        ("--concurrency", "1000001"),
        ("--concurrency", "0"),
        // clap reads a negative value only as `--flag=-1`.
        ("--concurrency", "-1"),
        ("--max-unacked", HUGE),
        ("--max-unacked", "1000001"),
        ("--max-unacked-bytes", HUGE),
        ("--max-line-bytes", HUGE),
        ("--breaker-open", HUGE),
        ("--breaker-open", "9223372036854775807"),
        ("--breaker-open", "86401"),
        ("--breaker-open", "-1"),
        ("--drain-timeout", HUGE),
        ("--max-elapsed", HUGE),
        ("--attempt-timeout", HUGE),
        ("--max-attempts", "4294967295"),
        ("--tenant-concurrency", "4294967295"),
        ("--breaker-failures", "4294967295"),
        ("--rate", "1e-300"),
    ] {
        let out = forward(flag, value);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flag}={value}: {err}");
        assert!(err.contains(flag), "{flag}={value}: {err}");
    }
    let out = run(&["deliver", "--sink", "log", "--attempt", "4294967295"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("--attempt"));
}

#[test]
fn the_ends_of_the_flag_ranges_are_taken() {
    let out = run(&[
        "forward",
        "--sink",
        "log",
        "--input",
        "/dev/null",
        "--concurrency",
        "1000000",
        "--breaker-open",
        "86400",
        "--drain-timeout",
        "86400",
        "--max-elapsed",
        "31536000",
        "--max-unacked",
        "1000000",
        "--tenant-concurrency",
        "1000000",
        "--breaker-failures",
        "1000000",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn a_dispatch_key_out_of_its_range_exits_2_naming_the_key() {
    for (key, value) in [
        ("rate_per_second", "1e-300"),
        ("breaker_open_seconds", "9223372036854775807"),
        ("concurrency", "9223372036854775807"),
        ("tenant_concurrency", "4294967295"),
        ("breaker_failures", "4294967295"),
    ] {
        let sink = temp_file(
            "range.toml",
            &format!("type = \"log\"\n[dispatch]\n{key} = {value}\n"),
        );
        let spec = sink.to_str().unwrap();
        let out = run(&["forward", "--sink", spec, "--input", "/dev/null"]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{key} = {value}: {err}");
        assert!(err.contains(key), "{key} = {value}: {err}");
    }
}
