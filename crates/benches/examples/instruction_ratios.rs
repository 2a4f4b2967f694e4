//! Per-call instruction counts and their ratios, from **one** run of the
//! instruction-count bench, read from its JSON summaries on stdin:
//!
//! ```text
//! cargo bench -p retry-budget-benches --bench instructions -- --output-format=json \
//!   | cargo run -q -p retry-budget-benches --example instruction_ratios
//! ```
//!
//! It also counts the clock reads per call (`clock_gettime`, which both
//! `Instant::now` and `SystemTime::now` end in) from the callgrind files of
//! the same run (each summary names its output directory). Callgrind counts
//! calls in the setup too, so that count is over the warm-up and the
//! measured calls together.
//!
//! The input is that run's output, nothing older: a variant missing from it
//! (a filtered run) or present twice (two runs concatenated), or summaries
//! from two different bench binaries, are refused with exit code 1, never
//! filled in from an earlier run.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::ExitCode;

use std::path::Path;

use retry_budget_benches::{CALLS, RATIOS, WARM_UP};
use serde_json::Value;

/// Every variant of `benches/instructions.rs`.
const VARIANTS: [&str; 23] = [
    "bare",
    "bare_pending",
    "bare_plus_copy",
    "bare_plus_copy_pending",
    "tower_retry",
    "tower_retry_pending",
    "tower_retry_timeout",
    "tower_retry_timeout_pending",
    "retry_budget_get",
    "retry_budget_get_pending",
    "retry_budget_get_when_retried",
    "retry_budget_get_when_retried_pending",
    "tower_retry_reporting",
    "tower_retry_extended",
    "retry_budget_get_extended",
    "retry_budget_post",
    "retry_budget_post_pending",
    "tower_retry_production",
    "tower_retry_timeout_production_pending",
    "tower_retry_reporting_production",
    "retry_budget_get_production",
    "retry_budget_get_production_pending",
    "retry_budget_get_production_observed",
];

/// What one benchmark's summary says.
struct Summary {
    function: String,
    exe: String,
    started_at: String,
    output_dir: String,
    /// Callgrind's `Ir`.
    instructions: u64,
}

fn parse(line: &str) -> Result<Summary, String> {
    let summary: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let field = |name: &str| {
        summary[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("no `{name}` in a summary"))
    };
    let function = field("function_name")?;
    let profile = summary["profiles"]
        .as_array()
        .and_then(|profiles| profiles.iter().find(|p| p["tool"] == "Callgrind"))
        .ok_or_else(|| format!("{function}: no callgrind profile"))?;
    let ir = profile["data"]["total"]["metrics"]["Ir"]["values"]["new"]
        .as_u64()
        .ok_or_else(|| format!("{function}: no instruction count (Ir)"))?;
    Ok(Summary {
        exe: field("benchmark_exe")?,
        started_at: field("started_at")?,
        output_dir: field("output_dir")?,
        function,
        instructions: ir,
    })
}

/// Calls to `clock_gettime` in the callgrind files of `dir` (`cfn=` lines,
/// with or without name compression, each followed by its `calls=` line).
fn clock_reads(dir: &Path) -> Option<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).ok()? {
        let path = entry.ok()?.path();
        if path.extension().is_none_or(|e| e != "out") {
            continue;
        }
        let text = std::fs::read_to_string(&path).ok()?;
        let mut names = BTreeMap::new();
        let mut callee_is_clock = false;
        for line in text.lines() {
            if let Some(callee) = line.strip_prefix("cfn=") {
                let name = match callee.strip_prefix('(').and_then(|c| c.split_once(')')) {
                    Some((id, rest)) if !rest.trim().is_empty() => {
                        names.insert(id.to_owned(), rest.trim().to_owned());
                        rest.trim().to_owned()
                    }
                    Some((id, _)) => names.get(id).cloned().unwrap_or_default(),
                    None => callee.trim().to_owned(),
                };
                callee_is_clock = name.starts_with("clock_gettime");
            } else if let Some(calls) = line.strip_prefix("calls=") {
                if callee_is_clock {
                    total += calls.split_whitespace().next()?.parse::<u64>().ok()?;
                }
                callee_is_clock = false;
            }
        }
    }
    Some(total)
}

fn main() -> ExitCode {
    let mut counts = BTreeMap::new();
    let mut dirs = BTreeMap::new();
    let mut exes = BTreeMap::new();
    let mut started = Vec::new();
    let mut problems = Vec::new();
    for line in std::io::stdin().lock().lines() {
        let line = match line {
            Ok(line) if line.trim().is_empty() => continue,
            Ok(line) => line,
            Err(e) => {
                problems.push(format!("stdin: {e}"));
                break;
            }
        };
        match parse(&line) {
            Ok(summary) => {
                let function = summary.function;
                if counts
                    .insert(function.clone(), summary.instructions)
                    .is_some()
                {
                    problems.push(format!("{function}: twice in the input (two runs?)"));
                }
                dirs.insert(function, summary.output_dir);
                *exes.entry(summary.exe).or_insert(0) += 1;
                started.push(summary.started_at);
            }
            Err(e) => problems.push(e),
        }
    }
    if exes.len() > 1 {
        problems.push(format!(
            "summaries from {} bench binaries: {:?}",
            exes.len(),
            exes.keys()
        ));
    }
    for variant in VARIANTS {
        if !counts.contains_key(variant) {
            problems.push(format!(
                "{variant}: missing (run the bench without a filter)"
            ));
        }
    }
    if !problems.is_empty() {
        eprintln!("refused: these are not the summaries of one complete run:");
        for problem in problems {
            eprintln!("  {problem}");
        }
        return ExitCode::FAILURE;
    }

    started.sort();
    println!(
        "one run of benches/instructions.rs, {} to {}",
        started.first().map_or("?", String::as_str),
        started.last().map_or("?", String::as_str)
    );
    println!(
        "\n  {:<38} {:>12} {:>12}",
        "variant", "instructions", "clock reads"
    );
    println!("  {:<38} {:>12} {:>12}", "", "per call", "per call");
    let per_call = |name: &str| counts[name] as f64 / CALLS as f64;
    for variant in VARIANTS {
        // Run from the workspace root, as cargo runs the example, the
        // summaries' relative output directories resolve.
        let reads = clock_reads(Path::new(&dirs[variant])).map_or_else(
            || "?".to_owned(),
            |n| format!("{:.2}", n as f64 / (CALLS + WARM_UP) as f64),
        );
        println!("  {variant:<38} {:>12.0} {reads:>12}", per_call(variant));
    }
    println!("\nratios:");
    let mut missed = 0;
    for ratio in RATIOS {
        let value = per_call(ratio.numerator) / per_call(ratio.denominator);
        let verdict = match ratio.goal {
            Some(goal) if value <= goal => format!("goal <= {goal:.2}: met"),
            Some(goal) => {
                missed += 1;
                format!("goal <= {goal:.2}: NOT met")
            }
            None => "no goal".to_owned(),
        };
        println!(
            "  {} / {} = {value:.3}  {verdict} ({})",
            ratio.numerator, ratio.denominator, ratio.meaning
        );
    }
    println!("\ngoals missed: {missed}");
    ExitCode::SUCCESS
}
