//! `--format table`: one readable table per case, in the spirit of the source
//! document's schedules (step, elapsed interval, observation, decision),
//! followed by the visible status.
//!
//! The rows are read off the report's event trail; nothing here decides
//! anything, it only describes what the core recorded.
//!
//! ```text
//! step      | elapsed | observation        | decision
//! ----------+---------+--------------------+-----------------------------------------
//! attempt 1 | 0–2     | 429; Retry-After 3 | next start 5, reservation to 9
//! wait      | 2–5     | 3 s                | no request in flight
//! ```

use std::time::Duration;

use retry_budget::schedule::CaseResult;
use retry_budget::{
    trail::{Event, EventKind, RetryAfterSeen, WaitBasis},
    trail_text::kind_name,
    Secs,
};

const HEADER: [&str; 4] = ["step", "elapsed", "observation", "decision"];

/// One case as text: a heading, the table and the visible status, ending in a
/// newline.
pub fn render(title: Option<&str>, result: &CaseResult) -> String {
    let mut out = match title {
        Some(title) => format!("{}: {title}\n\n", result.id),
        None => format!("{}\n\n", result.id),
    };
    match &result.result {
        Ok(report) => out.push_str(&grid(&rows(&report.events))),
        Err(_) => out.push_str("(no steps: the given data cannot be replayed)\n"),
    }
    out.push('\n');
    let json = result.to_json();
    out.push_str(json["message"].as_str().unwrap_or_default());
    out.push('\n');
    out
}

/// One line of the table.
#[derive(Debug)]
struct Row {
    step: String,
    from: Duration,
    to: Option<Duration>,
    observation: String,
    decision: String,
}

impl Row {
    fn new(step: impl Into<String>, from: Duration) -> Self {
        Self {
            step: step.into(),
            from,
            to: None,
            observation: String::new(),
            decision: String::new(),
        }
    }

    fn cells(&self) -> [String; 4] {
        let elapsed = match self.to {
            Some(to) if to != self.from => format!("{}–{}", n(self.from), n(to)),
            _ => n(self.from),
        };
        [
            self.step.clone(),
            elapsed,
            self.observation.clone(),
            self.decision.clone(),
        ]
    }
}

/// Groups the trail into rows: one per attempt (start to response), one per
/// wait (planned to woken), and a row for a caller who leaves between them.
fn rows(events: &[Event]) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut open: Option<Row> = None;
    let mut last_retry_after: Option<&RetryAfterSeen> = None;
    for event in events {
        let at = event.at;
        match &event.kind {
            EventKind::AttemptStarted { attempt, .. } => {
                rows.extend(open.take());
                open = Some(Row::new(format!("attempt {attempt}"), at));
            }
            EventKind::Response {
                status,
                retry_after,
                ..
            } => {
                let row = open.get_or_insert_with(|| Row::new("response", at));
                row.to = Some(at);
                row.observation = response(*status, retry_after);
                last_retry_after = Some(retry_after);
            }
            EventKind::WaitPlanned {
                wait,
                until,
                reservation_end,
                basis,
            } => {
                let next = format!(
                    "next start {}, reservation to {}",
                    n(*until),
                    n(*reservation_end)
                );
                let reason = match (basis, last_retry_after) {
                    (WaitBasis::Server { requested }, Some(RetryAfterSeen::Date { .. })) => {
                        format!("date − receipt = {}; ", Secs(*requested))
                    }
                    (WaitBasis::Server { .. }, _) => String::new(),
                    (WaitBasis::Fallback { completed }, _) => {
                        let plural = if *completed == 1 { "" } else { "s" };
                        format!(
                            "fallback after {completed} attempt{plural}: {}; ",
                            Secs(*wait)
                        )
                    }
                    // A basis this table does not know yet: the numbers
                    // below still say when and until when.
                    _ => String::new(),
                };
                let floor = match basis {
                    WaitBasis::Server { requested } if wait > requested => {
                        format!("raised to the {} floor; ", Secs(*wait))
                    }
                    _ => String::new(),
                };
                let row = open.get_or_insert_with(|| Row::new("response", at));
                row.decision = format!("{reason}{floor}{next}");
                rows.extend(open.take());
                let mut wait_row = Row::new("wait", at);
                wait_row.decision = "no request in flight".into();
                open = Some(wait_row);
            }
            EventKind::Woke {
                waited_from,
                late_by,
            } => {
                let row = open.get_or_insert_with(|| Row::new("wait", *waited_from));
                row.to = Some(at);
                row.observation = Secs(at.saturating_sub(*waited_from)).to_string();
                if !late_by.is_zero() {
                    row.observation += &format!("; timer fired {} late", Secs(*late_by));
                }
            }
            EventKind::CallerLeft { waited_from } => match open.as_mut() {
                Some(row) if row.to.is_none() => {
                    row.to = Some(at);
                    row.observation = match waited_from {
                        Some(from) => format!("{}; caller left", Secs(at.saturating_sub(*from))),
                        None => "caller left before any response".into(),
                    };
                }
                _ => {
                    rows.extend(open.take());
                    let mut row = Row::new("caller left", at);
                    row.to = Some(at);
                    open = Some(row);
                }
            },
            EventKind::AttemptTimedOut { .. } => {
                let row = open.get_or_insert_with(|| Row::new("attempt", at));
                row.to = Some(at);
                row.observation = "no response within the per-attempt cap".into();
            }
            EventKind::TransportFailed { .. } => {
                let row = open.get_or_insert_with(|| Row::new("attempt", at));
                row.to = Some(at);
                row.observation = "transport failed before any response".into();
            }
            EventKind::Stopped { outcome } => {
                let row = open.get_or_insert_with(|| Row::new("stop", at));
                row.decision = format!(
                    "stop: {outcome}; {} of budget left",
                    Secs(event.remaining_budget)
                );
                rows.extend(open.take());
            }
            // A kind added later still shows up, if only by name.
            _ => {
                rows.extend(open.take());
                let mut row = Row::new("event", at);
                row.observation = kind_name(&event.kind).to_owned();
                rows.push(row);
            }
        }
    }
    rows.extend(open);
    rows
}

/// The observation of a response: its status and the `Retry-After` it
/// carried, as received.
fn response(status: u16, retry_after: &RetryAfterSeen) -> String {
    match retry_after {
        RetryAfterSeen::Missing => status.to_string(),
        RetryAfterSeen::Seconds { value } => {
            format!("{status}; Retry-After {}", value.as_secs())
        }
        RetryAfterSeen::Date { date } => {
            format!("{status}; Retry-After {}", httpdate::fmt_http_date(*date))
        }
        RetryAfterSeen::Invalid { raw } => format!("{status}; Retry-After {raw} (invalid)"),
        RetryAfterSeen::Unmeasured { raw } => {
            format!("{status}; Retry-After {raw} (no trusted clock)")
        }
    }
}

/// Seconds as a bare number (`2`, `4.5`).
fn n(d: Duration) -> String {
    d.as_secs_f64().to_string()
}

/// The rows as aligned text, with a header and a rule.
fn grid(rows: &[Row]) -> String {
    let cells: Vec<[String; 4]> = rows.iter().map(Row::cells).collect();
    let mut widths = HEADER.map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 4]| {
        let padded: Vec<String> = cells
            .iter()
            .zip(widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        format!("{}\n", padded.join(" | ").trim_end())
    };
    let mut out = line(HEADER);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&rule.join("-+-"));
    out.push('\n');
    for row in &cells {
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3]]));
    }
    out
}
