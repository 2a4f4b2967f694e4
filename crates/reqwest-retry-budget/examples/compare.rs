//! The same loopback server script against three reqwest clients:
//! `reqwest-retry` 0.9 (its default `ExponentialBackoff`, 3 retries),
//! reqwest 0.13's own `retry` (`for_host` with a classifier retrying 429),
//! and `RetryBudgetMiddleware` (`Policy::default()`). Prints a markdown
//! table: the requests the server got, the gaps between them, the final
//! status, how long the caller waited, and what the caller was told.
//!
//! ```text
//! cargo run -p reqwest-retry-budget --example compare
//! ```
//!
//! Every run of every client gets a server of its own; they all run at
//! once, so the whole table takes as long as its slowest cell.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant, SystemTime};

use reqwest_middleware::ClientWithMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry_budget::{Policy, Report, RetryBudgetMiddleware};
use support::{response, Server};

/// A server script: the answer to the n-th request.
type Script = fn(usize) -> http::Response<&'static str>;

const SCENARIOS: [(&str, Script); 5] = [
    ("429 `Retry-After: 3`, then 200", |n| {
        response(if n == 0 { 429 } else { 200 }, Some("3"))
    }),
    ("429 `Retry-After: 30` (past a 20 s budget)", |_| {
        response(429, Some("30"))
    }),
    ("429 `Retry-After:` an HTTP-date 3 s ahead, then 200", |n| {
        if n > 0 {
            return response(200, None);
        }
        let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
        http::Response::builder()
            .status(429)
            .header("retry-after", date)
            .body("")
            .unwrap_or_default()
    }),
    ("always 429 `Retry-After: 1`", |_| response(429, Some("1"))),
    ("402", |_| response(402, None)),
];

#[derive(Clone, Copy)]
enum Client {
    ReqwestRetry,
    ReqwestOwn,
    Budget,
}

impl Client {
    const ALL: [Self; 3] = [Self::ReqwestRetry, Self::ReqwestOwn, Self::Budget];

    fn name(self) -> &'static str {
        match self {
            Self::ReqwestRetry => "reqwest-retry 0.9",
            Self::ReqwestOwn => "reqwest 0.13 `retry`",
            Self::Budget => "`RetryBudgetMiddleware`",
        }
    }

    fn build(self) -> ClientWithMiddleware {
        let builder = match self {
            Self::ReqwestRetry => reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(RetryTransientMiddleware::new_with_policy(
                    ExponentialBackoff::builder().build_with_max_retries(3),
                )),
            Self::ReqwestOwn => {
                let retry = reqwest::retry::for_host("127.0.0.1").classify_fn(|req_rep| {
                    if req_rep.status() == Some(http::StatusCode::TOO_MANY_REQUESTS) {
                        req_rep.retryable()
                    } else {
                        req_rep.success()
                    }
                });
                let client = reqwest::Client::builder()
                    .retry(retry)
                    .build()
                    .unwrap_or_default();
                reqwest_middleware::ClientBuilder::new(client)
            }
            Self::Budget => reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(RetryBudgetMiddleware::new(Policy::default())),
        };
        builder.build()
    }
}

/// One cell: what the server saw and what the caller got.
async fn run(client: Client, script: Script) -> [String; 5] {
    let server = Server::start(script).await;
    let started = Instant::now();
    let result = client.build().get(server.url("/palettes")).send().await;
    let waited = started.elapsed();
    let gaps = server
        .gaps()
        .iter()
        .map(|gap| format!("{gap:.2}"))
        .collect::<Vec<_>>()
        .join(" / ");
    let (status, told) = match result {
        Ok(response) => {
            let status = response.status().as_u16().to_string();
            let told = match response.extensions().get::<Report>() {
                Some(report) => format!(
                    "the status and a report: `{}`, {} of {} attempts",
                    report.outcome, report.attempts_started, report.max_attempts
                ),
                None => "the status only".to_owned(),
            };
            (status, told)
        }
        Err(error) => ("error".to_owned(), format!("an error: {error}")),
    };
    [
        server.count().to_string(),
        if gaps.is_empty() {
            "-".to_owned()
        } else {
            format!("{gaps} s")
        },
        status,
        format!("{:.2} s", waited.as_secs_f64()),
        told,
    ]
}

#[tokio::main]
async fn main() {
    let mut cells = Vec::new();
    for (scenario, script) in SCENARIOS {
        for client in Client::ALL {
            cells.push((scenario, client, tokio::spawn(run(client, script))));
        }
    }
    println!(
        "| scenario | client | requests | gaps | final status | caller waited | caller was told |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (scenario, client, cell) in cells {
        let row = match cell.await {
            Ok(row) => row.join(" | "),
            Err(error) => format!("the run failed: {error} | | | |"),
        };
        println!("| {scenario} | {} | {row} |", client.name());
    }
}
