//! Pacing through a real `retry-budget proxy` on loopback: on by default,
//! an upstream that announces none left holds the next first attempt until
//! its reset, a reset the budget cannot wait for stops the action unsent
//! (429, `paced`), `--pace-header` names a pair, `--no-pace` turns it off;
//! with `--hold-off-redis` two proxies take one window's allowance from one
//! count on a real Redis (started by the test on a free port; without a
//! `redis-server` those tests say so and pass, unless
//! `RETRY_BUDGET_REQUIRE_REDIS` is set), and go on alone when it stops.
//! Real time, so only lower bounds on it.

mod support;

use std::time::{Duration, Instant};

use support::{get, send, Proxy, RedisServer, Reply, Upstream};

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

/// 200, announcing `r` left of 10 in a window that resets in 4 s on every
/// response.
fn always_announcing(r: u32) -> impl Fn(&str, usize) -> Reply + Send + Sync + 'static {
    move |_, _| {
        let mut reply = Reply::status(200);
        reply
            .headers
            .push(("ratelimit", format!("\"default\";r={r};t=4")));
        reply
            .headers
            .push(("ratelimit-policy", "\"default\";q=10;w=4".to_owned()));
        reply
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_proxies_sharing_redis_take_one_window_from_one_count() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    // Every response says: 2 left until the reset, 4 s away.
    let upstream = Upstream::start(always_announcing(2));
    let flags = [
        "--hold-off-redis",
        &redis.url(),
        "--hold-off-namespace",
        "pace-e2e",
    ];
    let (a, b) = (
        Proxy::start(&upstream, &flags),
        Proxy::start(&upstream, &flags),
    );
    // Each proxy learns the window from a response of its own.
    assert_eq!(send(get(&a.url("/a"))).await.status, 200);
    assert_eq!(send(get(&b.url("/b"))).await.status, 200);
    let learned = Instant::now();
    // Each holds 2 left; the fleet's count starts at 2 with the first
    // take: one through A, one through B.
    assert_eq!(send(get(&a.url("/a"))).await.status, 200);
    assert_eq!(send(get(&b.url("/b"))).await.status, 200);
    // A alone would still count one left; the fleet has none: A holds
    // this one until the window's end, about 4 s after it was learned.
    assert_eq!(send(get(&a.url("/a"))).await.status, 200);
    let waited = learned.elapsed();
    assert!(waited >= Duration::from_secs(3), "{waited:?}");
    assert_eq!(upstream.count(), 5);
    assert!(
        a.metric("retry_budget_paces_total{result=\"waited\"}")
            .await
            >= 1.0
    );
    for proxy in [&a, &b] {
        let text = proxy.metrics().await;
        assert_eq!(
            support::metric(&text, "retry_budget_pace_store_available{store=\"redis\"}"),
            1.0,
            "{text}"
        );
        assert!(
            text.contains("retry_budget_pace_remaining{upstream=\"http://"),
            "{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_stopped_the_proxy_paces_alone_and_ready_says_so() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let upstream = Upstream::start(always_announcing(100));
    let flags = [
        "--hold-off-redis",
        &redis.url(),
        "--hold-off-namespace",
        "pace-down",
    ];
    let proxy = Proxy::start(&upstream, &flags);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    let available = "retry_budget_pace_store_available{store=\"redis\"}";
    // The store is first reached in the background: on a loaded machine
    // after the first answers.
    assert_eq!(proxy.metric_reaching(available, 1.0).await, 1.0);
    redis.stop();
    // Redis gone: every request still goes through, paced by this proxy
    // alone.
    for _ in 0..3 {
        assert_eq!(send(get(&proxy.url("/a"))).await.status, 200);
    }
    assert_eq!(upstream.count(), 5);
    let text = proxy.metrics().await;
    assert_eq!(support::metric(&text, available), 0.0, "{text}");
    assert!(
        support::metric(
            &text,
            "retry_budget_pace_store_failures_total{store=\"redis\"}"
        ) >= 1.0,
        "{text}"
    );
    let ready = send(get(&format!("http://{}/ready", proxy.admin))).await;
    assert_eq!(ready.status, 200);
    assert!(
        ready.text().contains("shared store unreachable"),
        "{}",
        ready.text()
    );
}
