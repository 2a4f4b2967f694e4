//! `retry-budget replay FILE`: the given schedules, replayed through the
//! core's arithmetic model ([`retry_budget::schedule`]).
//!
//! Output is JSON Lines (one [`CaseResult::to_json`] object per case) or, with
//! `--format table`, one readable table per case. `--check` compares each
//! result with the case's `expect` object instead. The expectation is taken
//! out of the case before it is replayed, so only the check ever reads it.
//!
//! Exit status: 0 on success (and when every case matches), 1 when `--check`
//! finds a difference or stdout fails, 2 when the file cannot be read, is
//! larger than [`MAX_INPUT`] (64 MiB), or is not a valid fixture.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use retry_budget::schedule::{self, CaseResult, Fixture};
use serde_json::Value;

mod table;

/// The arguments of `retry-budget replay`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fixture document (e.g. tests/fixtures/B62-16-schedules.json).
    file: PathBuf,
    /// How to print the results.
    #[arg(long, value_enum, default_value_t = Format::Json)]
    format: Format,
    /// Compare every case with its `expect` object; print each difference and
    /// a summary; exit 1 if any case differs.
    #[arg(long, conflicts_with = "format")]
    check: bool,
}

/// The output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Format {
    /// JSON Lines: one object per case.
    #[value(alias = "jsonl")]
    Json,
    /// One table per case, followed by its visible status.
    Table,
}

/// Runs the command and returns the process's exit status.
pub fn run(args: &Args) -> ExitCode {
    let fixture = match load(&args.file) {
        Ok(fixture) => fixture,
        Err(message) => {
            eprintln!("retry-budget: {message}");
            return ExitCode::from(2);
        }
    };
    let mut out = String::new();
    let mut tally = Tally::default();
    for mut case in fixture.cases {
        // The replay never sees the expectation; only the check below does.
        let expect = case.expect.take();
        let result = schedule::run_case(&case);
        if args.check {
            tally.check(&result, expect.as_ref(), &mut out);
            continue;
        }
        match args.format {
            Format::Json => {
                out.push_str(&result.to_json().to_string());
                out.push('\n');
            }
            Format::Table => {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(&table::render(case.title.as_deref(), &result));
            }
        }
    }
    if args.check {
        out.push_str(&tally.summary());
    }
    let status = if tally.differing == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    };
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => status,
        // A closed pipe (`| head`) is the reader's choice, not a failure.
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => status,
        Err(e) => {
            eprintln!("retry-budget: cannot write the results: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The largest input `replay` reads: 64 MiB (the given fixture is a few
/// kilobytes). Larger input, or endless input such as `/dev/zero`, is
/// refused after reading at most this much.
pub const MAX_INPUT: u64 = 64 * 1024 * 1024;

/// Reads and parses the fixture; the error is one line naming the file (and,
/// for an invalid document, the case and field).
fn load(path: &Path) -> Result<Fixture, String> {
    let shown = path.display();
    let text = read_bounded(path, MAX_INPUT)?;
    schedule::parse(&text).map_err(|e| {
        let detail = e.to_string();
        let detail: Vec<&str> = detail.lines().map(str::trim).collect();
        format!("{shown} is not a valid fixture: {}", detail.join(" "))
    })
}

/// The file's text, if it is at most `limit` bytes of UTF-8. A regular
/// file's size is checked before reading; anything else (a pipe, a device)
/// is read through a bounded reader, so an endless input costs at most
/// `limit + 1` bytes.
fn read_bounded(path: &Path, limit: u64) -> Result<String, String> {
    let shown = path.display();
    let too_large = || {
        format!(
            "{shown} is larger than {} MiB, the most replay reads",
            limit / (1024 * 1024)
        )
    };
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() > limit)
    {
        return Err(too_large());
    }
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {shown}: {e}"))?;
    if bytes.len() as u64 > limit {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| format!("cannot read {shown}: not UTF-8 ({e})"))
}

/// What `--check` has found so far.
#[derive(Debug, Default)]
struct Tally {
    cases: usize,
    differing: usize,
    fields: usize,
}

impl Tally {
    /// Compares one result with its expectation and appends one line per
    /// differing field: `case_id: field: expected X, got Y`.
    fn check(&mut self, result: &CaseResult, expect: Option<&Value>, out: &mut String) {
        self.cases += 1;
        let Some(expect) = expect else {
            self.differing += 1;
            out.push_str(&format!(
                "{}: no expect object to check against\n",
                result.id
            ));
            return;
        };
        let found = schedule::mismatches(&result.to_json(), expect);
        for mismatch in &found {
            out.push_str(&format!("{}: {mismatch}\n", result.id));
        }
        if !found.is_empty() {
            self.differing += 1;
            self.fields += found.len();
        }
    }

    /// The summary line.
    fn summary(&self) -> String {
        let Self {
            cases,
            differing,
            fields,
        } = self;
        if *differing == 0 {
            format!("check: all {cases} cases match their expectations\n")
        } else {
            format!(
                "check: {differing} of {cases} cases differ from their expectations ({fields} fields)\n"
            )
        }
    }
}
