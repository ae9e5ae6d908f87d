//! Every config error exits 2 and names the problem.

use super::{run, temp_file, text};

fn config_error(toml: &str) -> String {
    let f = temp_file("sink.toml", toml);
    let out = run(&["info", "--sink", f.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    text(&out.stderr)
}

#[test]
fn config_errors_name_the_field() {
    assert!(config_error("messages = true").contains("missing field `type`"));
    assert!(config_error("type = \"pigeon\"").contains("unknown sink type `pigeon`"));
    assert!(config_error("type = \"log\"\nmesages = true").contains("unknown field `mesages`"));
    let e = config_error("type = \"log\"\nmessages = \"${ANKUSA_TEST_UNSET_VAR}\"");
    assert!(
        e.contains("messages: environment variable ANKUSA_TEST_UNSET_VAR is not set"),
        "{e}"
    );
    let e = config_error("type = \"log\"\nmessages = [\"hunter2");
    assert!(
        e.contains("not valid TOML") && !e.contains("hunter2"),
        "{e}"
    );
    let out = run(&["info", "--sink", "/nonexistent/sink.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot read sink config"));
}

#[test]
fn a_config_file_equals_the_embedded_default() {
    let f = temp_file("log.toml", "type = \"log\"\n");
    let out = run(&["info", "--sink", f.to_str().unwrap(), "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("\"durable\":false"));
}
