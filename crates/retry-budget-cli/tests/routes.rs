//! Routes: several upstreams behind one proxy, chosen by path prefix or by
//! host, each with its own policy; requests no route takes refused with
//! nothing sent; the config file checked (`--check-config`) and reloaded
//! on SIGHUP under load. Loopback upstreams, the proxy as the built binary.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use support::{get, send, send_with, Proxy, Reply, Upstream};

/// A config file of its own for each test.
fn write_config(name: &str, text: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "retry-budget-routes-{}-{name}.toml",
        std::process::id()
    ));
    std::fs::write(&path, text).expect("the config file is written");
    path
}

/// The listeners of every test's file: ports the system chooses.
const LISTENERS: &str = "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nworkers = 2\n";

/// One raw HTTP/1.1 request; the status line's code.
fn raw_status(proxy: &Proxy, request: &str) -> u16 {
    let mut stream = TcpStream::connect(proxy.addr).expect("the proxy accepts");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    stream.read_exact(&mut answer).unwrap();
    std::str::from_utf8(&answer[9..12])
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn prefix_and_host_routes_reach_their_upstreams_and_the_rest_is_refused() {
    let a = Upstream::start(|_, _| Reply::status(200).body("a"));
    let b = Upstream::start(|_, _| Reply::status(200).body("b"));
    let file = write_config(
        "match",
        &format!(
            "{LISTENERS}
[[route]]
name = \"a\"
match.prefix = \"/a/\"
upstream = \"{}/v1\"

[[route]]
name = \"b\"
match.host = \"b.test\"
upstream = \"{}\"
",
            a.url(),
            b.url()
        ),
    );
    let proxy = Proxy::start_config(&file);

    let answer = send(get(&proxy.url("/a/items?x=1"))).await;
    assert_eq!((answer.status, answer.text().as_str()), (200, "a"));
    assert_eq!(a.seen()[0].path, "/v1/items", "the prefix stripped");
    assert_eq!(a.seen()[0].header("host"), Some(&*a.addr.to_string()));

    let by_host = Request::get(proxy.url("/items"))
        .header("host", "B.test:8080")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let answer = send(by_host).await;
    assert_eq!((answer.status, answer.text().as_str()), (200, "b"));
    assert_eq!(b.seen()[0].path, "/items", "a host route keeps the path");

    // An HTTP_PROXY-style absolute-form target selects by its host too.
    let absolute = "GET http://b.test/abs HTTP/1.1\r\nHost: b.test\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_status(&proxy, absolute), 200);
    assert_eq!(b.seen()[1].path, "/abs");

    // Refused, nothing sent: no prefix matches (also not a prefix's
    // look-alike), an absolute-form target for a host no route names.
    for path in ["/other", "/ab/items", "/"] {
        let answer = send(get(&proxy.url(path))).await;
        assert_eq!(answer.status, 404, "{path}");
        assert!(answer.text().contains("no route"), "{}", answer.text());
    }
    let unknown =
        "GET http://elsewhere.test/x HTTP/1.1\r\nHost: elsewhere.test\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_status(&proxy, unknown), 421);
    assert_eq!((a.count(), b.count()), (1, 2), "nothing more was sent");
    let line = proxy.wait_line(" outcome=");
    assert!(line.contains(" route=a "), "{line}");
    for (series, value) in [
        (
            "retry_budget_route_actions_total{route=\"a\",outcome=\"success\"}",
            1.0,
        ),
        (
            "retry_budget_route_actions_total{route=\"b\",outcome=\"success\"}",
            2.0,
        ),
        (
            "retry_budget_route_upstream_responses_total{route=\"b\",status=\"200\"}",
            2.0,
        ),
    ] {
        assert_eq!(
            proxy.metric_reaching(series, value).await,
            value,
            "{series}"
        );
    }
    proxy.signal("TERM");
    assert_eq!(proxy.wait_exit().code(), Some(0));
}

#[tokio::test]
async fn ready_lists_a_route_whose_upstream_fails_and_stays_ready() {
    let up = Upstream::start(|_, _| Reply::status(200));
    // A port nothing listens on: every attempt is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let down = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let file = write_config(
        "ready",
        &format!(
            "{LISTENERS}
[[route]]
name = \"up\"
match.prefix = \"/up\"
upstream = \"{}\"

[[route]]
name = \"down\"
match.prefix = \"/down\"
upstream = \"{down}\"
attempts = 1
",
            up.url()
        ),
    );
    let proxy = Proxy::start_config(&file);
    let ready = || send(get(&format!("http://{}/ready", proxy.admin)));
    assert_eq!(ready().await.text(), "ready\n");
    assert_eq!(send(get(&proxy.url("/up/x"))).await.status, 200);
    let failed = send(get(&proxy.url("/down/x"))).await;
    assert_eq!(failed.header("retry-budget-outcome"), "transport_error");
    let answer = ready().await;
    assert_eq!(
        answer.status, 200,
        "one failing route does not make it unready"
    );
    assert_eq!(answer.text(), "ready\nfailing routes: down\n");
    assert_eq!(
        proxy
            .metric("retry_budget_route_failing{route=\"down\"}")
            .await,
        1.0
    );
    proxy.signal("TERM");
    proxy.wait_exit();
}

#[tokio::test]
async fn only_host_routes_refuse_an_unknown_host_with_421() {
    let b = Upstream::start(|_, _| Reply::status(200));
    let file = write_config(
        "hosts",
        &format!(
            "{LISTENERS}
[[route]]
name = \"b\"
match.host = \"b.test\"
upstream = \"{}\"
",
            b.url()
        ),
    );
    let proxy = Proxy::start_config(&file);
    let answer = send(get(&proxy.url("/x"))).await;
    assert_eq!(answer.status, 421, "Host is the proxy's own address");
    assert_eq!(b.count(), 0);
    proxy.signal("TERM");
    proxy.wait_exit();
}

#[tokio::test]
async fn each_route_has_its_own_policy() {
    // Each upstream answers its first request with a 429 asking for 3 s.
    let reply = |_: &str, n: usize| match n {
        0 => Reply::status(429).retry_after("3"),
        _ => Reply::status(200),
    };
    let (three, one) = (Upstream::start(reply), Upstream::start(reply));
    let file = write_config(
        "policies",
        &format!(
            "{LISTENERS}
[[route]]
name = \"patient\"
match.prefix = \"/three\"
upstream = \"{}\"
attempts = 3

[[route]]
name = \"once\"
match.prefix = \"/one\"
upstream = \"{}\"
attempts = 1
",
            three.url(),
            one.url()
        ),
    );
    let proxy = Proxy::start_config(&file);
    let (waited, sent_once) = tokio::join!(
        send(get(&proxy.url("/three/x"))),
        send(get(&proxy.url("/one/x")))
    );
    assert_eq!(waited.status, 200);
    assert_eq!(waited.header("retry-budget-attempts"), "2");
    let seen = three.seen();
    assert!(
        seen[1].at.duration_since(seen[0].at) >= Duration::from_secs(3),
        "the Retry-After was waited"
    );
    assert_eq!(sent_once.status, 429);
    assert_eq!(sent_once.header("retry-budget-attempts"), "1");
    assert_eq!(
        sent_once.header("retry-budget-outcome"),
        "attempts_exhausted"
    );
    assert_eq!((three.count(), one.count()), (2, 1));
    proxy.signal("TERM");
    proxy.wait_exit();
}

#[tokio::test]
async fn each_route_speaks_its_own_http_version_upstream() {
    let h2 = Upstream::start_h2(|_, _| Reply::status(200).body("h2"));
    let h1 = Upstream::start(|_, _| Reply::status(200).body("h1"));
    let file = write_config(
        "versions",
        &format!(
            "{LISTENERS}
[[route]]
name = \"grpcish\"
match.prefix = \"/two\"
upstream = \"{}\"
http2 = true

[[route]]
name = \"plain\"
match.prefix = \"/one\"
upstream = \"{}\"
",
            h2.url(),
            h1.url()
        ),
    );
    let proxy = Proxy::start_config(&file);
    for (path, body) in [("/two/x", "h2"), ("/one/x", "h1"), ("/two/y", "h2")] {
        let answer = send(get(&proxy.url(path))).await;
        assert_eq!(
            (answer.status, answer.text().as_str()),
            (200, body),
            "{path}"
        );
    }
    assert_eq!((h2.count(), h1.count()), (2, 1));
    proxy.signal("TERM");
    proxy.wait_exit();
}

#[tokio::test]
async fn a_path_never_leaves_its_routes_upstream_prefix() {
    let a = Upstream::start(|_, _| Reply::status(200));
    let b = Upstream::start(|_, _| Reply::status(200));
    let file = write_config(
        "safety",
        &format!(
            "{LISTENERS}
[[route]]
name = \"a\"
match.prefix = \"/a\"
upstream = \"{}/v1\"

[[route]]
name = \"b\"
match.prefix = \"/b\"
upstream = \"{}/internal\"
",
            a.url(),
            b.url()
        ),
    );
    let proxy = Proxy::start_config(&file);
    for (given, sent) in [
        ("/a/../b/secret", "/v1/b/secret"),
        ("/a/%2e%2e/%2e%2e/admin", "/v1/admin"),
        ("/a", "/v1/"),
    ] {
        let raw = format!("GET {given} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        assert_eq!(raw_status(&proxy, &raw), 200, "{given}");
        assert_eq!(a.seen().last().unwrap().path, sent, "{given}");
    }
    let hidden = "GET /a/..%2fb HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_eq!(raw_status(&proxy, hidden), 400);
    assert_eq!(
        (a.count(), b.count()),
        (3, 0),
        "nothing reached the other route"
    );
    proxy.signal("TERM");
    proxy.wait_exit();
}

fn one_route(a: &Upstream, name: &str) -> String {
    format!(
        "{LISTENERS}
[[route]]
name = \"{name}\"
match.prefix = \"/api\"
upstream = \"{}\"
",
        a.url()
    )
}

#[tokio::test]
async fn sighup_reloads_under_load_and_an_invalid_file_is_kept_out() {
    let old = Upstream::start(|path, n| match (path, n) {
        // The action in flight at the reload: a 1 s wait first.
        ("/slow", 0) => Reply::status(429).retry_after("1"),
        _ => Reply::status(200).body("old"),
    });
    let new = Upstream::start(|_, _| Reply::status(200).body("new"));
    let file = write_config("reload", &one_route(&old, "old"));
    let proxy = Arc::new(Proxy::start_config(&file));

    // A client loop on kept-alive connections, through the reload.
    let stop = Arc::new(AtomicUsize::new(0));
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let (proxy, stop) = (proxy.clone(), stop.clone());
            tokio::spawn(async move {
                let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
                let mut bodies = Vec::new();
                while stop.load(Ordering::SeqCst) == 0 {
                    let answer = send_with(&client, get(&proxy.url("/api/x"))).await;
                    assert_eq!(answer.status, 200, "{}", answer.text());
                    bodies.push(answer.text());
                }
                bodies
            })
        })
        .collect();
    let in_flight = tokio::spawn(send(get(&proxy.url("/api/slow"))));
    old.wait_for(2).await;
    while !old.seen().iter().any(|s| s.path == "/slow") {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    std::fs::write(&file, one_route(&new, "new")).unwrap();
    proxy.signal("HUP");
    proxy.wait_line("reloaded: 1 route(s): new");
    let before = new.count();
    new.wait_for(before + 20).await;

    // Broken: refused, the running routes kept, said so.
    std::fs::write(
        &file,
        format!("{LISTENERS}\n[[route]]\nname = \"x\"\nmatch.prefix = \"/api\"\nupstream = \"ftp://nowhere\"\n"),
    )
    .unwrap();
    proxy.signal("HUP");
    let warning = proxy.wait_line("WARN SIGHUP");
    assert!(warning.contains(":8:12: upstream: "), "{warning}");
    let before = new.count();
    new.wait_for(before + 20).await;

    stop.store(1, Ordering::SeqCst);
    let mut seen_old = 0;
    let mut seen_new = 0;
    for each in loops {
        for body in each.await.expect("no request lost, no connection reset") {
            match body.as_str() {
                "old" => seen_old += 1,
                "new" => seen_new += 1,
                other => panic!("{other}"),
            }
        }
    }
    assert!(
        seen_old > 0 && seen_new > 0,
        "{seen_old} old, {seen_new} new"
    );
    // The action in flight at the reload finished on its old route.
    let answer = in_flight.await.unwrap();
    assert_eq!((answer.status, answer.text().as_str()), (200, "old"));
    assert_eq!(answer.header("retry-budget-attempts"), "2");
    let ok = proxy
        .metric("retry_budget_config_reloads_total{result=\"ok\"}")
        .await;
    let invalid = proxy
        .metric("retry_budget_config_reloads_total{result=\"invalid\"}")
        .await;
    assert_eq!((ok, invalid), (1.0, 1.0));
    proxy.signal("TERM");
    assert_eq!(proxy.wait_exit().code(), Some(0), "{}", proxy.stderr());
}

/// Two routes to one upstream, with a short budget: a hold-off asked by
/// the upstream stops their first attempts unsent.
fn twins(up: &Upstream, attempts: u32) -> String {
    let route = |name: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\nmatch.prefix = \"/{name}\"\nupstream = \"{}\"\n\
             attempts = {attempts}\nbudget = \"2s\"\nper_try_timeout = \"1s\"\n",
            up.url()
        )
    };
    format!("{LISTENERS}\n{}\n{}", route("api"), route("twin"))
}

#[tokio::test]
async fn a_hold_off_is_shared_by_the_routes_to_an_upstream_and_kept_by_a_reload() {
    let up = Upstream::start(|_, n| match n {
        0 => Reply::status(429).retry_after("30"),
        _ => Reply::status(200),
    });
    let file = write_config("kept", &twins(&up, 1));
    let proxy = Proxy::start_config(&file);
    assert_eq!(send(get(&proxy.url("/api/x"))).await.status, 429);
    let held = send(get(&proxy.url("/twin/x"))).await;
    assert_eq!(held.header("retry-budget-outcome"), "held_off", "shared");
    // A reload that changes the policy, not the hold-off's settings.
    std::fs::write(&file, twins(&up, 2)).unwrap();
    proxy.signal("HUP");
    proxy.wait_line("reloaded: 2 route(s)");
    for path in ["/api/x", "/twin/x"] {
        let held = send(get(&proxy.url(path))).await;
        assert_eq!(
            held.header("retry-budget-outcome"),
            "held_off",
            "{path}: kept"
        );
        assert_eq!(held.header("retry-budget-attempts"), "0");
    }
    assert_eq!(up.count(), 1, "nothing more was sent");
    proxy.signal("TERM");
    proxy.wait_exit();
}

fn check_config(path: &PathBuf) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .args(["proxy", "--check-config"])
        .arg(path)
        .output()
        .expect("the binary runs");
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code(), text(out.stdout), text(out.stderr))
}

#[test]
fn check_config_prints_the_routes_or_names_line_and_key() {
    let good = write_config(
        "good",
        "[[route]]
name = \"openai\"
match.prefix = \"/openai\"
upstream = \"https://api.openai.com/v1\"
attempts = 3
per_try_timeout = \"20s\"
budget = \"60s\"

[[route]]
name = \"inventory\"
match.host = \"inventory.internal\"
upstream = \"http://inventory.internal:8080\"
retry_on = [429, 503]
",
    );
    let (code, out, err) = check_config(&good);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("ok: 2 route(s)"), "{out}");
    assert!(out.contains("route openai: prefix /openai/ -> upstream https://api.openai.com/v1; preset openai; budget 60 s, at most 3 attempts, 20 s per attempt"), "{out}");
    assert!(
        out.contains(
            "route inventory: host inventory.internal -> upstream http://inventory.internal:8080"
        ),
        "{out}"
    );

    for (name, text, expected) in [
        (
            "unknown-key",
            "[[route]]\nname = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\nretries = 3\n",
            ":5:1: retries: unknown field `retries`",
        ),
        (
            "bad-duration",
            "[[route]]\nname = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\nper_try_timeout = \"soon\"\n",
            ":5:19: per_try_timeout: expected a duration such as 20s or 500ms",
        ),
        (
            "cap-over-budget",
            "[[route]]\nname = \"a\"\nmatch.prefix = \"/a\"\nupstream = \"http://a\"\nbudget = \"1s\"\n",
            ":5:1: budget: route \"a\": the per-attempt cap (4 s) is larger than the total budget (1 s)",
        ),
        (
            "two-matches",
            "[[route]]\nname = \"a\"\nmatch = { prefix = \"/a\", host = \"a\" }\nupstream = \"http://a\"\n",
            ":3:1: match: expected one of match.prefix and match.host",
        ),
        (
            "no-route",
            "listen = \"127.0.0.1:0\"\n",
            "expected at least one [[route]]",
        ),
    ] {
        let path = write_config(name, text);
        let (code, _, err) = check_config(&path);
        assert_eq!(code, Some(2), "{name}: {err}");
        let at = format!("{}{expected}", path.display());
        assert!(err.contains(&at) || (name == "no-route" && err.contains(expected)), "{name}: {err}");
    }
}
