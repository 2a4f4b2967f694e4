//! Pacing through a real `retry-budget proxy` on loopback: on by default,
//! an upstream that announces none left holds the next first attempt until
//! its reset, a reset the budget cannot wait for stops the action unsent
//! (429, `paced`), `--pace-header` names a pair, `--no-pace` turns it off.
//! Real time, so only lower bounds on it.

mod support;

use std::time::Duration;

use support::{get, send, Proxy, Reply, Upstream};

/// 200, announcing `r` left of 10 in a window that resets in `t` seconds
/// (IETF `RateLimit` fields) on the first request, nothing after.
fn announcing(r: u32, t: u32) -> impl Fn(&str, usize) -> Reply + Send + Sync + 'static {
    move |_, n| {
        let mut reply = Reply::status(200);
        if n == 0 {
            reply
                .headers
                .push(("ratelimit", format!("\"default\";r={r};t={t}")));
            reply
                .headers
                .push(("ratelimit-policy", format!("\"default\";q=10;w={t}")));
        }
        reply
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_next_request_waits_for_the_announced_reset() {
    let upstream = Upstream::start(announcing(0, 2));
    let proxy = Proxy::start(&upstream, &[]);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    let second = send(get(&proxy.url("/a"))).await;
    assert_eq!(second.status, 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2);
    let gap = seen[1].at.duration_since(seen[0].at);
    assert!(gap >= Duration::from_secs(2), "{gap:?}");
    assert_eq!(
        proxy
            .metric("retry_budget_paces_total{result=\"waited\"}")
            .await,
        1.0
    );
    assert_eq!(
        proxy
            .metric("retry_budget_wait_seconds_count{basis=\"pace\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reset_past_the_budget_is_answered_429_paced_with_nothing_sent() {
    let upstream = Upstream::start(announcing(0, 40));
    let proxy = Proxy::start(&upstream, &[]);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    let paced = send(get(&proxy.url("/a"))).await;
    assert_eq!(paced.status, 429);
    assert_eq!(paced.header("retry-budget-outcome"), "paced");
    let secs: u64 = paced.header("retry-after").parse().unwrap();
    // The reset, plus the spread (at most 100 ms), rounded up.
    assert!((30..=41).contains(&secs), "{secs}");
    assert!(
        paced.text().contains("Limit default: 0 left"),
        "{}",
        paced.text()
    );
    assert_eq!(upstream.count(), 1, "nothing sent");
    assert_eq!(
        proxy
            .metric("retry_budget_actions_total{outcome=\"paced\",category=\"rate_limit\"}")
            .await,
        1.0
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pace_header_pair_is_read_and_no_pace_turns_pacing_off() {
    let reply = |_: &str, n: usize| {
        let mut reply = Reply::status(200);
        if n == 0 {
            reply.headers.push(("x-left", "0".into()));
            reply.headers.push(("x-reset", "40".into()));
        }
        reply
    };
    let upstream = Upstream::start(reply);
    let proxy = Proxy::start(&upstream, &["--pace-header", "x-left,x-reset=seconds"]);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    let paced = send(get(&proxy.url("/a"))).await;
    assert_eq!(paced.header("retry-budget-outcome"), "paced");
    assert_eq!(upstream.count(), 1);

    let upstream = Upstream::start(announcing(0, 40));
    let proxy = Proxy::start(&upstream, &["--no-pace"]);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    assert_eq!(upstream.count(), 2, "not paced");
    assert_eq!(
        proxy
            .metric("retry_budget_paces_total{result=\"stopped\"}")
            .await,
        0.0
    );
}
