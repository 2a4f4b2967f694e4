//! The operators' files under `deploy/` (the Grafana dashboard, the
//! Prometheus alerting rules) name only metrics the proxy exports: a
//! running proxy is driven until its metric families have series (a 429
//! waited out, a first attempt held off, an unreachable hold-off store),
//! its `/metrics` scraped, and every metric name in the files' PromQL
//! looked up in the scrape.

mod support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::{get, metric, send, Proxy, Reply, Upstream, PATIENCE};

/// Series that Prometheus itself writes for each scrape, not the proxy.
const PROMETHEUS_OWN: &[&str] = &["up"];

/// PromQL words that are not metric names: operators, modifiers,
/// aggregations (which may stand before `by`/`without`), number words.
const KEYWORDS: &[&str] = &[
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "atan2",
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
    "inf",
    "nan",
];

/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names one PromQL expression selects. Hand-written: no
/// PromQL parser is among the project's dependencies, and names are all
/// this needs. Skips strings, label matchers (`{...}`), ranges (`[...]`),
/// Grafana variables (`$job`), numbers and durations, function calls
/// (a word before `(`), keywords, and the label lists of `by (...)` and
/// its kin. Grafana's `label_values(METRIC, LABEL)` yields `METRIC`'s names.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let expr = expr.trim();
    if let Some(args) = expr
        .strip_prefix("label_values(")
        .and_then(|rest| rest.strip_suffix(')'))
    {
        // `label_values(LABEL)` names no metric.
        return match args.rfind(',') {
            Some(comma) => metric_names(&args[..comma]),
            None => BTreeSet::new(),
        };
    }
    let chars: Vec<char> = expr.chars().collect();
    let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' | '\'' | '`' => i = skip_string(&chars, i),
            '{' => i = skip_to(&chars, i, '{', '}'),
            '[' => i = skip_to(&chars, i, '[', ']'),
            '$' => {
                i += 1;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
            }
            c if c.is_ascii_digit() || c == '.' => {
                i += 1;
                while i < chars.len() && (word_char(chars[i]) || chars[i] == '.') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let start = i;
                while i < chars.len() && word_char(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let mut next = i;
                while next < chars.len() && chars[next].is_whitespace() {
                    next += 1;
                }
                let before_paren = chars.get(next) == Some(&'(');
                if LABEL_LISTS.contains(&word.to_ascii_lowercase().as_str()) {
                    if before_paren {
                        i = skip_to(&chars, next, '(', ')');
                    }
                } else if !before_paren && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    names.insert(word);
                }
            }
            _ => i += 1,
        }
    }
    names
}

/// The index after the string that starts at `start` (its quote).
fn skip_string(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '\\' if quote != '`' => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after the `close` that matches the `open` at `start`,
/// skipping strings.
fn skip_to(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        match chars[i] {
            '"' | '\'' | '`' => {
                i = skip_string(chars, i);
                continue;
            }
            c if c == open => depth += 1,
            c if c == close => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
    i
}

/// The sample names of a Prometheus/OpenMetrics text exposition: each
/// histogram's `_bucket`, `_sum` and `_count`, each counter's `_total`.
fn exported_names(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

/// The names `exprs` reference that are neither in `exposition` nor
/// Prometheus's own, each with the expression naming it.
fn unknown_names(exprs: &[String], exposition: &str) -> Vec<(String, String)> {
    let exported = exported_names(exposition);
    let mut unknown = Vec::new();
    for expr in exprs {
        for name in metric_names(expr) {
            if !exported.contains(&name) && !PROMETHEUS_OWN.contains(&name.as_str()) {
                unknown.push((name, expr.clone()));
            }
        }
    }
    unknown
}

/// The scrape of a proxy serving a config file's route, after one action
/// (the per-route series exist only for a file's routes).
async fn routes_scrape(upstream: &Upstream) -> String {
    let config = format!(
        "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n[[route]]\nname = \"api\"\n\
         match.prefix = \"/api\"\nupstream = \"{}\"\n",
        upstream.url()
    );
    let path = std::env::temp_dir().join(format!(
        "retry-budget-dashboard-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, config).unwrap();
    let proxy = Proxy::start_config(&path);
    assert_eq!(send(get(&proxy.url("/api/x"))).await.status, 200);
    proxy
        .metric_reaching(
            "retry_budget_route_actions_total{route=\"api\",outcome=\"success\"}",
            1.0,
        )
        .await;
    proxy.metrics().await
}

fn deploy_file(path: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every PromQL expression of the dashboard: its panels' `expr`s and its
/// template variables' queries.
fn dashboard_exprs() -> Vec<String> {
    fn walk(value: &serde_json::Value, key: Option<&str>, out: &mut Vec<String>) {
        match value {
            serde_json::Value::Object(map) => {
                for (k, v) in map {
                    walk(v, Some(k), out);
                }
            }
            serde_json::Value::Array(items) => {
                for v in items {
                    walk(v, key, out);
                }
            }
            // A datasource variable's query is a plugin's name.
            serde_json::Value::String(s)
                if matches!(key, Some("expr" | "query")) && s != "prometheus" =>
            {
                out.push(s.clone());
            }
            _ => {}
        }
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy_file("grafana/retry-budget-proxy.json")).expect("JSON");
    let mut exprs = Vec::new();
    walk(&dashboard, None, &mut exprs);
    exprs
}

/// Every rule's `expr` in the alerting rules. Hand-written: no YAML parser
/// is among the project's dependencies, and the file's `expr:` values are
/// plain or `|` block scalars, which this reads.
fn alert_exprs() -> Vec<String> {
    let text = deploy_file("prometheus/alerts.yml");
    let lines: Vec<&str> = text.lines().collect();
    let mut exprs = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let Some(value) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let value = value.trim();
        if value.starts_with('|') || value.starts_with('>') {
            let indent = line.len() - line.trim_start().len();
            let block: Vec<&str> = lines[n + 1..]
                .iter()
                .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
                .map(|l| l.trim())
                .collect();
            exprs.push(block.join(" "));
        } else {
            exprs.push(value.trim_matches(['"', '\'']).to_owned());
        }
    }
    exprs
}

#[test]
fn the_name_reader_finds_metrics_and_skips_everything_else() {
    let names = |expr: &str| metric_names(expr).into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (outcome, category) (rate(retry_budget_actions_total{job=~"$job",outcome="a{b}"}[$__rate_interval]))"#
        ),
        ["retry_budget_actions_total"]
    );
    assert_eq!(
        names("histogram_quantile(0.95, sum by (le, basis) (rate(x_bucket[5m]))) / on (job) group_left (instance) y offset 1h > 1e-3 and z"),
        ["x_bucket", "y", "z"]
    );
    assert_eq!(
        names(r#"label_values(retry_budget_actions_total{job=~"$job"}, instance)"#),
        ["retry_budget_actions_total"]
    );
    assert!(names("label_values(job)").is_empty());
    assert_eq!(names(r#"up{job="retry-budget"} == 0"#), ["up"]);
}

#[test]
fn a_made_up_name_is_caught() {
    let exposition = "# TYPE a counter\na_total{x=\"1\"} 2\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_sum 1.0\nh_count 1\n# EOF\n";
    let exprs = [
        "rate(a_total[5m]) + h_sum / h_count".to_owned(),
        "histogram_quantile(0.5, rate(h_bucket[5m]))".to_owned(),
        "up == 0".to_owned(),
    ];
    assert_eq!(unknown_names(&exprs, exposition), []);
    let wrong = [
        "rate(retry_budget_made_up_total[5m])".to_owned(),
        // The family's name without `_total` is not a sample's.
        "rate(a[5m])".to_owned(),
        // Nor is a histogram's own name.
        "h > 1".to_owned(),
    ];
    let unknown: Vec<String> = unknown_names(&wrong, exposition)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    assert_eq!(unknown, ["retry_budget_made_up_total", "a", "h"]);
}

#[test]
fn the_files_reference_the_metrics_they_are_about() {
    // Guards the readers themselves: an empty list would pass the scrape
    // check below vacuously.
    let dashboard: BTreeSet<String> = dashboard_exprs()
        .iter()
        .flat_map(|e| metric_names(e))
        .collect();
    for name in [
        "retry_budget_actions_total",
        "retry_budget_upstream_attempts_total",
        "retry_budget_wait_seconds_bucket",
        "retry_budget_hold_offs_total",
        "retry_budget_hold_off_store_available",
        "retry_budget_actions_in_flight",
        "retry_budget_actions_waiting",
        "retry_budget_route_actions_total",
        "retry_budget_route_upstream_responses_total",
        "retry_budget_route_failing",
    ] {
        assert!(dashboard.contains(name), "{name} not in {dashboard:?}");
    }
    let alerts: BTreeSet<String> = alert_exprs().iter().flat_map(|e| metric_names(e)).collect();
    assert_eq!(alert_exprs().len(), 6, "{:?}", alert_exprs());
    assert_eq!(
        alerts.into_iter().collect::<Vec<_>>(),
        [
            "retry_budget_actions_total",
            "retry_budget_hold_off_store_available",
            "retry_budget_route_failing",
            "retry_budget_route_upstream_responses_total",
            "retry_budget_upstream_responses_total",
            "up",
        ]
    );
}

#[tokio::test]
async fn the_dashboard_and_the_alerts_name_only_metrics_the_proxy_exports() {
    let upstream = Upstream::start(|path, n| match (path, n) {
        ("/limited", 0) => Reply::status(429).retry_after("3"),
        _ => Reply::status(200),
    });
    // A hold-off store nobody listens on: the store's series exist (and
    // say it is down), and each request goes on without it.
    let proxy = Proxy::start(&upstream, &["--hold-off-redis", "redis://127.0.0.1:1"]);

    // A 429 waited out and retried (3 s: time enough to send the next
    // request while the hold-off lasts, however busy the machine)...
    let limited_url = proxy.url("/limited");
    let limited = tokio::spawn(async move { send(get(&limited_url)).await });
    let start = Instant::now();
    while proxy.metric("retry_budget_actions_waiting").await < 1.0 {
        assert!(start.elapsed() < PATIENCE, "{}", proxy.metrics().await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...while another request's first attempt is held off behind it.
    let other = send(get(&proxy.url("/other"))).await;
    assert_eq!(other.status, 200);
    assert_eq!(limited.await.unwrap().status, 200);

    let mut exposition = proxy.metrics().await;
    exposition.push_str(&routes_scrape(&upstream).await);
    assert!(
        metric(
            &exposition,
            "retry_budget_upstream_attempts_total{attempt=\"retry\"}"
        ) >= 1.0
            && metric(
                &exposition,
                "retry_budget_hold_offs_total{result=\"waited\"}"
            ) >= 1.0,
        "the scenario did not run as planned:\n{exposition}"
    );
    let dashboard = dashboard_exprs();
    let alerts = alert_exprs();
    for (file, exprs) in [
        ("deploy/grafana/retry-budget-proxy.json", dashboard),
        ("deploy/prometheus/alerts.yml", alerts),
    ] {
        let unknown = unknown_names(&exprs, &exposition);
        assert!(
            unknown.is_empty(),
            "{file} names metrics the proxy does not export: {unknown:#?}\nthe scrape:\n{exposition}"
        );
    }
}

/// The text of a ConfigMap's `key: |` block scalar: its lines, their
/// common indentation removed (a hand-written reader: the test has no
/// YAML parser, and the manifest uses only this form).
fn block_scalar(yaml: &str, key: &str) -> String {
    let mut lines = yaml.lines().skip_while(|l| l.trim() != format!("{key}: |"));
    assert!(lines.next().is_some(), "no `{key}: |` block");
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.starts_with("    "))
        .collect();
    let indent = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    body.iter()
        .map(|l| l.get(indent..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_kubernetes_config_map_is_a_valid_config_file_the_deployment_mounts() {
    let config = block_scalar(&deploy_file("kubernetes/configmap.yaml"), "proxy.toml");
    let path = std::env::temp_dir().join(format!(
        "retry-budget-configmap-{}.toml",
        std::process::id()
    ));
    std::fs::write(&path, &config).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_retry-budget"))
        .args(["proxy", "--check-config"])
        .arg(&path)
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    for route in [
        "route openai: prefix /openai/ -> upstream https://api.openai.com/v1; preset openai",
        "route anthropic: prefix /anthropic/ -> upstream https://api.anthropic.com; preset anthropic",
        "route inventory: prefix /inventory/ -> upstream http://inventory.default.svc.cluster.local:8080; preset none",
    ] {
        assert!(stdout.contains(route), "{route}\n{stdout}");
    }
    let deployment = deploy_file("kubernetes/deployment.yaml");
    assert!(deployment.contains("- --config=/etc/retry-budget/proxy.toml"));
    assert!(deployment.contains("mountPath: /etc/retry-budget"));
    assert!(deploy_file("kubernetes/kustomization.yaml").contains("- configmap.yaml"));
}
