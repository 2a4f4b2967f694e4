//! `retry-budget demo [--case ID]`: a scripted server on a loopback port
//! plays one case of the given schedules in real time, and `get` runs
//! against it with the case's policy, showing the live trail and the final
//! status. No set-up: the fixture is built into the binary.
//!
//! The server only plays the case's attempts (the n-th request gets, after
//! the scripted duration, the scripted status and `Retry-After`); it never
//! reads `expect`. Cases that a real connection cannot play honestly are
//! listed by `--list` with the reason, and refused.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retry_budget::schedule::{self, Case};
use retry_budget::Secs;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::get::progress::{Console, INDENT};
use crate::get::{self, Options, Target};

/// The given schedules (`data/B62-16-schedules.json`).
const FIXTURE: &str = include_str!("../../data/B62-16-schedules.json");
/// The case played without `--case`.
const DEFAULT_CASE: &str = "schedule_a_delay_seconds";
/// An attempt that ends closer than this to its cap would race the deadline
/// over a real connection.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);

/// The arguments of `retry-budget demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The fixture case to play (see --list) [default: schedule_a_delay_seconds]
    #[arg(long, value_name = "ID")]
    case: Option<String>,
    /// List the cases that can be played, and those that cannot (with why).
    #[arg(long, conflicts_with = "case")]
    list: bool,
    /// Print the report as one JSON object on stdout (instead of the body).
    #[arg(long)]
    json: bool,
}

/// Runs the command and returns the process's exit status.
pub fn run(args: &Args) -> ExitCode {
    let cases = match schedule::parse(FIXTURE) {
        Ok(fixture) => fixture.cases,
        Err(e) => {
            eprintln!("retry-budget: the built-in fixture is not valid: {e}");
            return ExitCode::FAILURE;
        }
    };
    if args.list {
        print!("{}", list(&cases));
        return ExitCode::SUCCESS;
    }
    let id = args.case.as_deref().unwrap_or(DEFAULT_CASE);
    let Some(mut case) = cases.into_iter().find(|c| c.id == id) else {
        return crate::common::run::usage_error(&format!(
            "no case {id:?} in the fixture (see: retry-budget demo --list)"
        ));
    };
    if let Some(reason) = unplayable(&case) {
        return crate::common::run::usage_error(&format!(
            "case {} cannot be played over a real connection: {reason}",
            case.id
        ));
    }
    // The server plays the attempts; the expectation stays out of reach.
    case.expect = None;
    let runtime = match crate::common::run::runtime() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("retry-budget: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(play(case, args.json))
}

/// Why a case cannot be played honestly over a real connection, if so.
fn unplayable(case: &Case) -> Option<String> {
    if !case.calendar_jumps.is_empty() {
        return Some(
            "it moves the client's calendar clock during the run, and a demo cannot set the system clock"
                .into(),
        );
    }
    if case.wake_late_by.iter().any(|late| !late.is_zero()) {
        return Some(
            "it needs a timer to fire late on purpose, and a real timer cannot be made late".into(),
        );
    }
    let cap = case.policy.attempt_cap();
    if let Some((i, a)) = case
        .attempts
        .iter()
        .enumerate()
        .find(|(_, a)| a.duration <= cap && cap - a.duration < DEADLINE_MARGIN)
    {
        return Some(format!(
            "attempt {} lasts {}, right at the {} per-attempt cap: over a real connection the reply lands a few ms after the deadline, so it would time out instead",
            i + 1,
            Secs(a.duration),
            Secs(cap)
        ));
    }
    None
}

/// What a real connection changes in a playable case, if anything.
fn notes(case: &Case) -> Vec<String> {
    let mut notes = Vec::new();
    let cap = case.policy.attempt_cap();
    if let Some(i) = case.attempts.iter().position(|a| a.duration > cap) {
        notes.push(format!(
            "attempt {} outlasts the {} cap: the arithmetic model calls this invalid_data; here the cap is a real deadline, so it ends as attempt_timeout",
            i + 1,
            Secs(cap)
        ));
    }
    if let Some(at) = case.leave_at {
        notes.push(format!(
            "the user leaving is played by cancelling the request at {}",
            Secs(at)
        ));
    }
    if !case.clock_trusted {
        notes.push("played with no trusted calendar clock (as get --untrusted-clock)".into());
    }
    if case.clock_trusted && case.attempts.iter().any(|a| date_offset(case, a).is_some()) {
        notes.push(
            "its HTTP-dates are moved onto the real clock, rounded up to whole seconds, so a wait may be up to 1 s longer"
                .into(),
        );
    }
    notes
}

/// The `--list` text.
fn list(cases: &[Case]) -> String {
    let (played, refused): (Vec<&Case>, Vec<&Case>) =
        cases.iter().partition(|c| unplayable(c).is_none());
    let width = |cases: &[&Case]| cases.iter().map(|c| c.id.len()).max().unwrap_or(0);
    let mut out = String::from(
        "Cases that `retry-budget demo --case ID` plays in real time (about how long):\n",
    );
    let w = width(&played);
    for case in &played {
        // How long it takes, as the arithmetic model says.
        let time = schedule::run_case(case)
            .result
            .map_or_else(|_| "-".to_owned(), |r| Secs(r.elapsed).to_string());
        let default = if case.id == DEFAULT_CASE {
            " (default)"
        } else {
            ""
        };
        out.push_str(&format!(
            "  {:w$}  {time:>5}  {}{default}\n",
            case.id,
            case.title.as_deref().unwrap_or("")
        ));
        for note in notes(case) {
            out.push_str(&format!("      note: {note}\n"));
        }
    }
    if !refused.is_empty() {
        out.push_str(
            "\nCases it does not play over a real connection (`retry-budget replay` covers them):\n",
        );
        let w = width(&refused);
        for case in &refused {
            let reason = unplayable(case).unwrap_or_default();
            out.push_str(&format!("  {:w$}  {reason}\n", case.id));
        }
    }
    out
}

/// Plays `case`: the server, the request, the scripted leave.
async fn play(case: Case, json: bool) -> ExitCode {
    let console = Console::stderr();
    let listener = match TcpListener::bind("127.0.0.1:0").await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("retry-budget: cannot listen on a loopback port: {e}");
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            eprintln!("retry-budget: cannot read the loopback port: {e}");
            return ExitCode::FAILURE;
        }
    };
    let case = Arc::new(case);
    let uri = match format!("http://{addr}/demo/{}", case.id).parse() {
        Ok(uri) => uri,
        Err(e) => {
            eprintln!("retry-budget: cannot build the demo URL: {e}");
            return ExitCode::FAILURE;
        }
    };

    console.line(&format!(
        "demo: case {}{}",
        case.id,
        case.title
            .as_deref()
            .map_or_else(String::new, |t| format!(": {t}"))
    ));
    console.line(&format!(
        "demo: a server on {addr} plays its {} scripted response{} in real time",
        case.attempts.len(),
        if case.attempts.len() == 1 { "" } else { "s" }
    ));
    for note in notes(&case) {
        console.line(&format!("demo: note: {note}"));
    }

    let server = tokio::spawn(serve(listener, case.clone(), console.clone()));
    let cancel = CancellationToken::new();
    let leave = case.leave_at.map(|at| {
        let cancel = cancel.clone();
        let console = console.clone();
        tokio::spawn(async move {
            tokio::time::sleep(at).await;
            console.line(&format!(
                "{INDENT} demo: the user leaves now (scripted at {})",
                Secs(at)
            ));
            cancel.cancel();
        })
    });

    let target = Target {
        method: http::Method::GET,
        uri,
        headers: Vec::new(),
        cacert: None,
    };
    let options = Options {
        policy: case.policy,
        trusted_clock: case.clock_trusted,
        json,
        verbose: false,
        signals: Default::default(),
        connect_to: Vec::new(),
    };
    let status = get::fetch(target, options, &console, cancel).await;
    server.abort();
    if let Some(leave) = leave {
        leave.abort();
    }
    status
}

/// Accepts connections and plays the case, one scripted attempt per request.
async fn serve(listener: TcpListener, case: Arc<Case>, console: Console) {
    let seen = Arc::new(AtomicUsize::new(0));
    // The real calendar time that stands for the case's epoch: the first
    // request's arrival, rounded up to a whole second.
    let epoch = Arc::new(OnceLock::new());
    while let Ok((stream, _)) = listener.accept().await {
        let (case, console, seen, epoch) =
            (case.clone(), console.clone(), seen.clone(), epoch.clone());
        tokio::spawn(async move {
            let service = service_fn(move |_: Request<Incoming>| {
                let n = seen.fetch_add(1, Ordering::SeqCst);
                let epoch = *epoch.get_or_init(|| whole_second_after(SystemTime::now()));
                respond(case.clone(), console.clone(), n, epoch)
            });
            // A client that gives up mid-attempt closes the connection:
            // nothing to report.
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The scripted response to the `n`-th request (0-based).
async fn respond(
    case: Arc<Case>,
    console: Console,
    n: usize,
    epoch: SystemTime,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let Some(attempt) = case.attempts.get(n) else {
        console.line(&format!(
            "{INDENT} server: request {} is past the script: 500",
            n + 1
        ));
        return Ok(plain(500, None, "no scripted attempt left\n"));
    };
    let retry_after = attempt
        .retry_after
        .as_deref()
        .map(|raw| match date_offset(&case, attempt) {
            Some(offset) => shifted(epoch, offset),
            None => raw.to_owned(),
        });
    console.line(&format!(
        "{INDENT} server: request {} received; it answers {}{} in {}",
        n + 1,
        attempt.status,
        retry_after
            .as_deref()
            .map_or_else(String::new, |v| format!(" with Retry-After: {v}")),
        Secs(attempt.duration),
    ));
    tokio::time::sleep(attempt.duration).await;
    let body = format!(
        "demo {}: scripted response {} of {}: {}\n",
        case.id,
        n + 1,
        case.attempts.len(),
        attempt.status
    );
    Ok(plain(attempt.status, retry_after.as_deref(), &body))
}

fn plain(status: u16, retry_after: Option<&str>, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() =
        http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
    if let Some(value) = retry_after.and_then(|v| http::HeaderValue::from_str(v).ok()) {
        response
            .headers_mut()
            .insert(http::header::RETRY_AFTER, value);
    }
    response
}

/// For a `Retry-After` that is an HTTP-date: its signed offset from the
/// case's calendar epoch, in whole seconds.
fn date_offset(case: &Case, attempt: &schedule::ScriptedAttempt) -> Option<i64> {
    let date = httpdate::parse_http_date(attempt.retry_after.as_deref()?).ok()?;
    let offset = match date.duration_since(case.calendar_epoch) {
        Ok(after) => i64::try_from(after.as_secs()).ok()?,
        Err(before) => -i64::try_from(before.duration().as_secs()).ok()?,
    };
    Some(offset)
}

/// `epoch + offset` as an HTTP-date.
fn shifted(epoch: SystemTime, offset: i64) -> String {
    let magnitude = Duration::from_secs(offset.unsigned_abs());
    let date = if offset >= 0 {
        epoch.checked_add(magnitude)
    } else {
        epoch.checked_sub(magnitude)
    };
    httpdate::fmt_http_date(date.unwrap_or(epoch))
}

/// The first whole second at or after `now`, so that dates built on it are
/// never earlier than the case says.
fn whole_second_after(now: SystemTime) -> SystemTime {
    let since = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs() + u64::from(since.subsec_nanos() > 0);
    UNIX_EPOCH + Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases() -> Vec<Case> {
        schedule::parse(FIXTURE).unwrap().cases
    }

    fn case(id: &str) -> Case {
        cases().into_iter().find(|c| c.id == id).unwrap()
    }

    #[test]
    fn what_can_be_played() {
        let refused: Vec<String> = cases()
            .iter()
            .filter(|c| unplayable(c).is_some())
            .map(|c| c.id.clone())
            .collect();
        assert_eq!(
            refused,
            [
                "schedule_b_calendar_adjusted_during_wait",
                "wait_fits_attempt_does_not",
                "scheduler_wakes_late",
            ]
        );
        assert!(unplayable(&case(DEFAULT_CASE)).is_none());
        assert!(notes(&case(DEFAULT_CASE)).is_empty());
        assert_eq!(notes(&case("attempt_longer_than_cap")).len(), 1);
        assert_eq!(notes(&case("user_leaves_during_wait")).len(), 1);
        assert_eq!(notes(&case("schedule_b_http_date")).len(), 1);
    }

    #[test]
    fn dates_move_onto_the_real_clock() {
        let b = case("schedule_b_http_date");
        assert_eq!(date_offset(&b, &b.attempts[0]), Some(6));
        assert_eq!(date_offset(&b, &b.attempts[1]), Some(12));
        assert_eq!(date_offset(&b, &b.attempts[2]), None);
        let epoch = UNIX_EPOCH + Duration::from_secs(1_704_110_400);
        assert_eq!(shifted(epoch, 6), "Mon, 01 Jan 2024 12:00:06 GMT");
        assert_eq!(shifted(epoch, -6), "Mon, 01 Jan 2024 11:59:54 GMT");
        let t = UNIX_EPOCH + Duration::from_millis(1_500);
        assert_eq!(whole_second_after(t), UNIX_EPOCH + Duration::from_secs(2));
        let t = UNIX_EPOCH + Duration::from_secs(2);
        assert_eq!(whole_second_after(t), t);
    }

    #[test]
    fn the_list_names_every_case() {
        let text = list(&cases());
        for case in cases() {
            assert!(text.contains(&case.id), "{}", case.id);
        }
        let line = text
            .lines()
            .find(|l| l.contains(DEFAULT_CASE))
            .expect("the default case is listed");
        assert!(
            line.contains(" 14 s ") && line.ends_with("(default)"),
            "{line}"
        );
        assert!(text.contains("\n  scheduler_wakes_late  "), "{text}");
    }
}
