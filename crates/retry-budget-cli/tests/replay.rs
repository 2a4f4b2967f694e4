//! `retry-budget replay`, run as a built binary on the repository's fixture.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

const KEYS: [&str; 11] = [
    "attempts_started",
    "events",
    "id",
    "last_status",
    "message",
    "outcome",
    "request_s",
    "starts_s",
    "stopped_at_s",
    "wait_s",
    "waits_s",
];

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/B62-16-schedules.json")
}

fn replay(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .arg("replay")
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("stdout is UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("stderr is UTF-8")
}

/// A file in the system's temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, contents: &str) -> Self {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let unique = format!(
            "retry-budget-cli-{}-{}-{name}",
            std::process::id(),
            COUNT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(unique);
        std::fs::write(&path, contents).expect("temp file written");
        Self(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn fixture_json() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture()).unwrap()).unwrap()
}

/// Exit status 2 and exactly one line on stderr, which is returned.
fn fails_with_one_line(output: &Output) -> String {
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(output.stdout.is_empty(), "{output:?}");
    let err = stderr(output);
    assert!(err.ends_with('\n'), "{err:?}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    err
}

#[test]
fn json_lines_have_exactly_the_documented_keys() {
    let output = replay(&[fixture().to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let lines: Vec<Value> = text
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), 15);

    let given = fixture_json();
    for (line, case) in lines.iter().zip(given["cases"].as_array().unwrap()) {
        let mut keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(keys, KEYS);
        assert_eq!(line["id"], case["id"], "cases in the fixture's order");
        for event in line["events"].as_array().unwrap() {
            assert!(
                event["at_s"].is_number() && event["kind"].is_string(),
                "{event}"
            );
        }
        assert!(line["message"].is_string());
    }

    let a = &lines[0];
    assert_eq!(a["id"], "schedule_a_delay_seconds");
    assert_eq!(a["outcome"], "success");
    assert_eq!(a["stopped_at_s"], 14.0);
    assert_eq!(a["starts_s"], serde_json::json!([0.0, 5.0, 11.0]));
    assert_eq!(a["waits_s"], serde_json::json!([[2.0, 5.0], [7.0, 11.0]]));

    let invalid = lines.last().unwrap();
    assert_eq!(invalid["outcome"], "invalid_data");
    assert_eq!(invalid["stopped_at_s"], Value::Null);
    assert_eq!(invalid["last_status"], Value::Null);
}

#[test]
fn check_passes_on_the_given_fixture() {
    let output = replay(&["--check", fixture().to_str().unwrap()]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert_eq!(text, "check: all 15 cases match their expectations\n");
}

#[test]
fn check_names_the_case_and_field_that_differ() {
    let mut doc = fixture_json();
    doc["cases"][0]["expect"]["starts_s"][1] = 6.into();
    doc["cases"][8]["expect"]["outcome"] = "success".into();
    let changed = TempFile::new("changed.json", &doc.to_string());

    let output = replay(&["--check", changed.path()]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            "schedule_a_delay_seconds: starts_s[1]: expected 6, got 5.0",
            "wait_exceeds_budget: outcome: expected \"success\", got \"budget_exhausted\"",
            "check: 2 of 15 cases differ from their expectations (2 fields)",
        ]
    );
}

#[test]
fn malformed_file_exits_2_with_one_line() {
    let broken = TempFile::new("broken.json", "{\"cases\": [");
    let err = fails_with_one_line(&replay(&[broken.path()]));
    assert!(
        err.contains(broken.path()) && err.contains("not valid JSON"),
        "{err}"
    );
}

#[test]
fn invalid_field_exits_2_naming_the_case_and_field() {
    let mut doc = fixture_json();
    doc["cases"][3]["attempts"][0]["duration_s"] = (-1).into();
    let invalid = TempFile::new("invalid.json", &doc.to_string());
    let err = fails_with_one_line(&replay(&["--check", invalid.path()]));
    assert!(err.contains("missing_header"), "{err}");
    assert!(err.contains("attempts[0].duration_s"), "{err}");
}

#[test]
fn missing_file_exits_2_with_one_line() {
    let missing = std::env::temp_dir().join(format!(
        "retry-budget-cli-{}-does-not-exist.json",
        std::process::id()
    ));
    let err = fails_with_one_line(&replay(&[missing.to_str().unwrap()]));
    assert!(
        err.contains("cannot read") && err.contains("does-not-exist.json"),
        "{err}"
    );
}

/// The table's rows, as trimmed cells.
fn rows(table: &str) -> Vec<Vec<&str>> {
    table
        .lines()
        .filter(|line| line.contains(" | "))
        .map(|line| line.split('|').map(str::trim).collect())
        .collect()
}

#[test]
fn table_shows_the_schedules_step_by_step() {
    let output = replay(&["--format", "table", fixture().to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let rows = rows(&text);

    let schedule_a = [
        [
            "attempt 1",
            "0–2",
            "429; Retry-After 3",
            "next start 5, reservation to 9",
        ],
        ["wait", "2–5", "3 s", "no request in flight"],
        [
            "attempt 2",
            "5–7",
            "429; Retry-After 4",
            "next start 11, reservation to 15",
        ],
        ["wait", "7–11", "4 s", "no request in flight"],
        [
            "attempt 3",
            "11–14",
            "200",
            "stop: success; 6 s of budget left",
        ],
    ];
    let start = rows
        .iter()
        .position(|r| r[..] == schedule_a[0])
        .unwrap_or_else(|| panic!("Schedule A's first row is missing:\n{text}"));
    assert_eq!(rows[start..start + 5], schedule_a.map(Vec::from), "{text}");

    let schedule_b = [
        "attempt 1",
        "0–2",
        "429; Retry-After Mon, 01 Jan 2024 12:00:06 GMT",
        "date − receipt = 4 s; next start 6, reservation to 10",
    ];
    assert!(rows.iter().any(|r| r[..] == schedule_b), "{text}");
    assert!(
        rows.iter().any(|r| r[..]
            == [
                "wait",
                "2–17",
                "15 s; timer fired 5 s late",
                "stop: budget_exhausted; 3 s of budget left"
            ]),
        "{text}"
    );

    // Every case has its heading and its visible status.
    for case in fixture_json()["cases"].as_array().unwrap() {
        let id = case["id"].as_str().unwrap();
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{id}: "))),
            "{id}"
        );
    }
    assert!(text.contains(
        "Stopped: the retry budget cannot fit the next request.\n\
         Last response: 429. Attempts: 1 / 3. Elapsed: 2 s.\n\
         The service asked to wait 30 s; no retry was sent."
    ));
}

#[test]
fn input_larger_than_64_mib_is_refused() {
    // An endless device: read through a bounded reader, then refused.
    let output = replay(&["/dev/zero"]);
    let err = fails_with_one_line(&output);
    assert!(
        err.contains("/dev/zero is larger than 64 MiB, the most replay reads"),
        "{err}"
    );

    // A regular file one byte over: refused from its size (sparse, so the
    // test writes nothing).
    let big = TempFile::new("big.json", "");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&big.0)
        .unwrap()
        .set_len(64 * 1024 * 1024 + 1)
        .unwrap();
    let err = fails_with_one_line(&replay(&[big.path()]));
    assert!(err.contains("is larger than 64 MiB"), "{err}");
}
