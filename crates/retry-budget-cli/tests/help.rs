//! `get` and `proxy` read the budget and signal flags from one definition:
//! their `--help` shows the shared section identically.

use std::process::Command;

const HEADING: &str = "Budget and signals (shared by get and proxy):";

fn help(command: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .args([command, "--help"])
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "{command} --help failed");
    String::from_utf8(output.stdout).expect("help is UTF-8")
}

/// The shared section, from its heading to the next heading (a line that
/// is not indented), one entry per flag with its text on one line: clap
/// lays out a command's whole help in one of two shapes (one line per
/// flag, or blank-line separated when any flag has a long text), which is
/// layout, not text.
fn shared_section(help: &str) -> Vec<String> {
    let start = help
        .find(HEADING)
        .unwrap_or_else(|| panic!("no shared section in:\n{help}"));
    let mut entries: Vec<String> = Vec::new();
    for line in help[start..]
        .lines()
        .skip(1)
        .take_while(|line| line.is_empty() || line.starts_with(' '))
    {
        let text = line.split_whitespace().collect::<Vec<_>>().join(" ");
        if text.is_empty() {
            continue;
        }
        if text.starts_with('-') {
            entries.push(text);
        } else if let Some(last) = entries.last_mut() {
            last.push(' ');
            last.push_str(&text);
        }
    }
    entries.retain(|entry| !entry.starts_with("-h, --help"));
    entries
}

#[test]
fn get_and_proxy_show_the_shared_flags_identically() {
    let get = shared_section(&help("get"));
    let proxy = shared_section(&help("proxy"));
    assert_eq!(get, proxy);
    assert_eq!(get.len(), 11, "{get:#?}");
    for flag in [
        "--budget <DURATION>",
        "--max-attempts <N>",
        "--attempt-timeout <DURATION>",
        "--min-wait <DURATION>",
        "--untrusted-clock",
        "--cacert <FILE>",
        "--preset <API>",
        "--ratelimit-fields",
        "--reset-header",
        "--reset-max-interval <DURATION>",
        "--spread <DURATION>",
    ] {
        assert!(
            get.iter().any(|entry| entry.starts_with(flag)),
            "{flag} missing from:\n{get:#?}"
        );
    }
}

#[test]
fn a_bad_budget_value_is_worded_the_same_by_both_commands() {
    let run = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_retry-budget"))
            .args(args)
            .output()
            .expect("the binary runs");
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let get = run(&["get", "--max-attempts", "0", "http://127.0.0.1:9/"]);
    let proxy = run(&[
        "proxy",
        "--max-attempts",
        "0",
        "--upstream",
        "http://127.0.0.1:9",
    ]);
    assert!(get.contains("--max-attempts: "), "{get}");
    assert_eq!(get, proxy);
}
