//! Per-call instruction counts and their ratios, from **one** run of the
//! instruction-count bench, read from its JSON summaries on stdin:
//!
//! ```text
//! cargo bench -p retry-budget-benches --bench instructions -- --output-format=json \
//!   | cargo run -q -p retry-budget-benches --example instruction_ratios
//! ```
//!
//! The input is that run's output, nothing older: a variant missing from it
//! (a filtered run) or present twice (two runs concatenated), or summaries
//! from two different bench binaries, are refused with exit code 1, never
//! filled in from an earlier run.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::ExitCode;

use retry_budget_benches::{CALLS, RATIOS};
use serde_json::Value;

/// Every variant of `benches/instructions.rs`.
const VARIANTS: [&str; 12] = [
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
    "retry_budget_post",
    "retry_budget_post_pending",
];

/// One benchmark's summary: its function, its bench binary, when it
/// started, and its instruction count (callgrind's `Ir`).
fn parse(line: &str) -> Result<(String, String, String, u64), String> {
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
    Ok((function, field("benchmark_exe")?, field("started_at")?, ir))
}

fn main() -> ExitCode {
    let mut counts = BTreeMap::new();
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
            Ok((function, exe, at, ir)) => {
                if counts.insert(function.clone(), ir).is_some() {
                    problems.push(format!("{function}: twice in the input (two runs?)"));
                }
                *exes.entry(exe).or_insert(0) += 1;
                started.push(at);
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
    println!("\ninstructions per call (callgrind Ir / {CALLS} calls):");
    let per_call = |name: &str| counts[name] as f64 / CALLS as f64;
    for variant in VARIANTS {
        println!("  {variant:<30} {:>8.0}", per_call(variant));
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
