//! A claim is on disk before its reference is returned. A local store's check-in is run
//! under `strace` (a child process: this test binary's probe test), and the trace shows,
//! in this order: the pack written to a staging file, that file fsynced, renamed to the
//! pack's key, the pack's directory fsynced, and only then the reference in the caller's
//! hands.

use ankusa_claimcheck::{ClaimConfig, ClaimItem, ClaimStore};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;

/// The probe test's name, for `--exact`.
const PROBE: &str = "durability::probe_check_in_then_mark";
/// The directory the probe works in (its store, and the marker it opens).
const DIR_ENV: &str = "ANKUSA_CLAIM_SYNC_PROBE_DIR";
/// The name of the (absent) file the probe opens once `check_in` returned.
const MARKER: &str = "reference-returned-";

/// Not a test of its own: run under `strace` by the test below.
#[test]
#[ignore = "a probe: claim_is_synced_before_its_reference_is_returned runs it under strace"]
fn probe_check_in_then_mark() {
    let Some(dir) = std::env::var_os(DIR_ENV).map(PathBuf::from) else {
        eprintln!("{PROBE}: only run by claim_is_synced_before_its_reference_is_returned");
        return;
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let claim = rt.block_on(async {
        let store = ClaimStore::local(dir.join("root"), ClaimConfig::default()).unwrap();
        store
            .check_in(ClaimItem::new("acme", vec![7u8; 4096]))
            .await
            .unwrap()
    });
    // The reference is in hand: mark the moment in the trace with the open of a file that
    // does not exist, named after the claim.
    let id = crate::ulid_of(&claim);
    assert!(std::fs::File::open(dir.join(format!("{MARKER}{id}"))).is_err());
}

/// One system call of the trace: name, arguments, result, in completion order.
#[derive(Debug)]
struct Call {
    name: String,
    args: String,
    ret: String,
}

/// The calls of an `strace -f -o` log, each `<unfinished ...>` joined with its
/// `<... resumed>` half (threads interleave).
fn calls(log: &str) -> Vec<Call> {
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        let rest = rest.trim_start();
        let whole = if let Some(start) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), start.to_owned());
            continue;
        } else if let Some(tail) = rest.strip_prefix("<... ") {
            let Some((_, tail)) = tail.split_once(" resumed>") else {
                continue;
            };
            format!("{}{tail}", pending.remove(pid).unwrap_or_default())
        } else {
            rest.to_owned()
        };
        // `name(args)<padding> = result`.
        let Some(eq) = whole.rfind(" = ") else {
            continue;
        };
        let (Some(open), Some(close)) = (whole.find('('), whole[..eq].rfind(')')) else {
            continue;
        };
        out.push(Call {
            name: whole[..open].to_owned(),
            args: whole[open + 1..close].to_owned(),
            ret: whole[eq + 3..].trim().to_owned(),
        });
    }
    out
}

/// The index of the first call after `from` that `pred` accepts.
fn first_after(calls: &[Call], from: usize, what: &str, pred: impl Fn(&Call) -> bool) -> usize {
    calls
        .iter()
        .enumerate()
        .skip(from + 1)
        .find(|(_, c)| pred(c))
        .map(|(i, _)| i)
        .unwrap_or_else(|| panic!("no {what} after call {from}: {calls:#?}"))
}

/// The file descriptor an `openat` returned.
fn fd(c: &Call) -> String {
    c.ret
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[test]
fn claim_is_synced_before_its_reference_is_returned() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("strace.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-o"])
        .arg(&log)
        .args([
            "-e",
            "trace=openat,fsync,fdatasync,rename,renameat,renameat2,link,linkat",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", PROBE, "--ignored", "--test-threads=1"])
        .env(DIR_ENV, dir.path())
        .output()
        .expect("strace runs (scripts/services/strace.sh installs it)");
    assert!(
        out.status.success(),
        "the probe under strace: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let calls = calls(&std::fs::read_to_string(&log).unwrap());

    // The marker names the claim; the pack's key ends with the claim id (position 0).
    let marker = calls
        .iter()
        .position(|c| c.name == "openat" && c.args.contains(MARKER))
        .expect("the probe's marker");
    let id = calls[marker].args.split(MARKER).nth(1).unwrap();
    let id = &id[..26];
    let is_pack =
        |path: &str| path.contains("/claims/tenant=acme/dt=") && path.ends_with(&format!("/{id}"));

    // 1. The staging file `<key>#<n>`, created (a first try fails while its directories
    // do not exist yet).
    let staged = calls
        .iter()
        .position(|c| {
            c.name == "openat"
                && c.args.contains("O_CREAT")
                && c.args.contains(&format!("/{id}#"))
                && !c.ret.starts_with('-')
        })
        .expect("the pack's staging file");
    let staged_fd = fd(&calls[staged]);
    let staged_path = calls[staged].args.split('"').nth(1).unwrap().to_owned();
    // 2. Its data fsynced.
    let synced = first_after(&calls, staged, "fsync of the staging file", |c| {
        matches!(c.name.as_str(), "fsync" | "fdatasync") && c.args == staged_fd && c.ret == "0"
    });
    // 3. Renamed (or linked) to the pack's key.
    let published = first_after(&calls, synced, "rename to the pack's key", |c| {
        c.name.starts_with("rename") || c.name.starts_with("link")
    });
    let quoted: Vec<&str> = calls[published]
        .args
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    assert_eq!(quoted.len(), 2, "{:?}", calls[published]);
    assert_eq!(quoted[0], staged_path);
    assert!(is_pack(quoted[1]), "{:?}", calls[published]);
    assert_eq!(calls[published].ret, "0");
    // 4. The pack's directory opened and fsynced: the new name is durable too.
    let pack_dir = quoted[1].rsplit_once('/').unwrap().0.to_owned();
    let opened = first_after(&calls, published, "open of the pack's directory", |c| {
        c.name == "openat"
            && c.args.split('"').nth(1) == Some(pack_dir.as_str())
            && !c.ret.starts_with('-')
    });
    let dir_fd = fd(&calls[opened]);
    let dir_synced = first_after(&calls, opened, "fsync of the pack's directory", |c| {
        matches!(c.name.as_str(), "fsync" | "fdatasync") && c.args == dir_fd && c.ret == "0"
    });
    // 5. All of it before the reference was returned.
    assert!(
        dir_synced < marker,
        "the reference was returned (call {marker}) before the directory fsync (call \
         {dir_synced})"
    );
}
