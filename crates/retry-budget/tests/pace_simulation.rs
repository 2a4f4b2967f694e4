//! The placement measured: a burst of 60 actions from 6 concurrent clients
//! against a fixed-window limiter of 10 requests per 2 s (as
//! express-rate-limit: windows start at 0, `t` rounded up to whole
//! seconds), 25 ms each way, simulated event by event on exact instants.
//!
//! The quota's own minimum is 10 s (60 requests at 10 per 2 s); the done
//! criteria are at most 2 429s and a total within 1.3× of it. A 429 is
//! retried at the reset its own response announced, as the action does
//! with a reset header. The last test (`express_with_jitter`) models the
//! pacing script's express-rate-limit instead: windows per client starting
//! at their first request, requests racing over separate connections.

use std::time::{Duration, SystemTime};

use retry_budget::pace::{Pacer, PacerConfig, Placement, QuotaReader};

const ONE_WAY: Duration = Duration::from_millis(25);
const WINDOW: Duration = Duration::from_secs(2);
const QUOTA: u64 = 10;
const ACTIONS: usize = 60;
const CLIENTS: usize = 6;

/// A limiter: what it answers a request arriving at `at`.
trait Limiter {
    fn arrive(&mut self, at: Duration) -> (u16, Vec<(&'static str, Vec<u8>)>);

    /// The calendar reading at `at`, for Unix-time resets.
    fn calendar(&self, _at: Duration) -> Option<SystemTime> {
        None
    }
}

/// flask-limiter's fixed window: 10 per 2 s from the first request after
/// the previous window expired, announced as `X-RateLimit-Reset` in whole
/// Unix seconds rounded up (late by up to a second); the calendar is off
/// whole seconds by 0.3 s.
struct Flask {
    window: Option<(Duration, u64)>,
    /// The lateness announced, summed over the windows.
    late: Duration,
}

const UNIX_BASE: Duration = Duration::from_millis(1_700_000_000_300);

impl Limiter for Flask {
    fn arrive(&mut self, at: Duration) -> (u16, Vec<(&'static str, Vec<u8>)>) {
        let (start, taken) = match self.window {
            Some((start, taken)) if at < start + WINDOW => (start, taken),
            _ => {
                let end = UNIX_BASE + at + WINDOW;
                self.late += Duration::from_secs(end.as_secs() + 1) - end;
                (at, 0)
            }
        };
        self.window = Some((start, taken + 1));
        let (status, r) = if taken < QUOTA {
            (200, QUOTA - taken - 1)
        } else {
            (429, 0)
        };
        let reset = (UNIX_BASE + start + WINDOW).as_secs() + 1;
        let headers = vec![
            ("x-ratelimit-limit", b"10".to_vec()),
            ("x-ratelimit-remaining", r.to_string().into_bytes()),
            ("x-ratelimit-reset", reset.to_string().into_bytes()),
            // On every response, 2xx too: no hold.
            ("retry-after", b"2".to_vec()),
        ];
        (status, headers)
    }

    fn calendar(&self, at: Duration) -> Option<SystemTime> {
        Some(SystemTime::UNIX_EPOCH + UNIX_BASE + at)
    }
}

/// A fixed window of 10 per 2 s from 0 (express-rate-limit's memory store),
/// `t` rounded up to whole seconds, with or without `RateLimit-Policy`.
struct FixedWindow {
    taken: Vec<u64>,
    with_policy: bool,
}

impl Limiter for FixedWindow {
    fn arrive(&mut self, at: Duration) -> (u16, Vec<(&'static str, Vec<u8>)>) {
        let window = (at.as_nanos() / WINDOW.as_nanos()) as usize;
        if self.taken.len() <= window {
            self.taken.resize(window + 1, 0);
        }
        let taken = self.taken[window];
        self.taken[window] += 1;
        let end = WINDOW * (window as u32 + 1);
        let t = (end - at).as_secs_f64().ceil() as u64;
        let (status, r) = if taken < QUOTA {
            (200, QUOTA - taken - 1)
        } else {
            (429, 0)
        };
        let mut headers = vec![(
            "ratelimit",
            format!("\"10-per-2s\";r={r};t={t}").into_bytes(),
        )];
        if self.with_policy {
            headers.push(("ratelimit-policy", b"\"10-per-2s\";q=10;w=2".to_vec()));
        }
        (status, headers)
    }
}

/// A token bucket of 10 refilling 5 per second, announcing the whole
/// tokens left and the seconds until full, rounded up.
struct TokenBucket {
    tokens: f64,
    last: Duration,
}

impl Limiter for TokenBucket {
    fn arrive(&mut self, at: Duration) -> (u16, Vec<(&'static str, Vec<u8>)>) {
        self.tokens = (self.tokens + (at - self.last).as_secs_f64() * 5.0).min(10.0);
        self.last = at;
        let status = if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            200
        } else {
            429
        };
        let r = self.tokens.floor() as u64;
        let t = ((10.0 - self.tokens) / 5.0).ceil() as u64;
        (
            status,
            vec![("ratelimit", format!("\"bucket\";r={r};t={t}").into_bytes())],
        )
    }
}

/// The fake OpenAI of `benches/pacing/fake_openai.py`: a request window
/// of 10 per 2 s and a token window of 24,000 per 6 s at 1,000 a request,
/// each starting at the first request after the previous one ended;
/// `x-ratelimit-remaining|reset-requests|tokens` (Go durations, to the ms,
/// rounded up) on every response; a refused request takes nothing.
struct FakeOpenAi {
    requests: (u64, Duration),
    tokens: (u64, Duration),
}

const TOKENS: u64 = 24_000;
const TOKEN_WINDOW: Duration = Duration::from_secs(6);
const COST: u64 = 1_000;

fn go_duration(d: Duration) -> Vec<u8> {
    let ms = d.as_nanos().div_ceil(1_000_000) as u64;
    if ms < 1000 {
        format!("{ms}ms").into_bytes()
    } else {
        format!("{}.{:03}s", ms / 1000, ms % 1000).into_bytes()
    }
}

impl Limiter for FakeOpenAi {
    fn arrive(&mut self, at: Duration) -> (u16, Vec<(&'static str, Vec<u8>)>) {
        if at >= self.requests.1 {
            self.requests = (0, at + WINDOW);
        }
        if at >= self.tokens.1 {
            self.tokens = (0, at + TOKEN_WINDOW);
        }
        let fits = self.requests.0 < QUOTA && self.tokens.0 + COST <= TOKENS;
        if fits {
            self.requests.0 += 1;
            self.tokens.0 += COST;
        }
        let headers = vec![
            (
                "x-ratelimit-remaining-requests",
                (QUOTA - self.requests.0).to_string().into_bytes(),
            ),
            (
                "x-ratelimit-reset-requests",
                go_duration(self.requests.1 - at),
            ),
            (
                "x-ratelimit-remaining-tokens",
                (TOKENS - self.tokens.0).to_string().into_bytes(),
            ),
            ("x-ratelimit-reset-tokens", go_duration(self.tokens.1 - at)),
        ];
        (if fits { 200 } else { 429 }, headers)
    }
}

#[derive(Debug, Clone, Copy)]
enum Client {
    /// Asks the pacer at this instant (a new action).
    Idle(Duration),
    /// Sends at this instant (`first`: the action's first attempt).
    Sends(Duration),
    /// Its request, sent at `sent`, reaches the limiter at `sent + ONE_WAY`
    /// and its answer the client at `sent + 2 ONE_WAY`.
    InFlight {
        sent: Duration,
    },
    Done,
}

struct Outcome {
    rejected: u32,
    total: Duration,
    succeeded: usize,
}

/// The burst through `proxies` pacers that do not share (clients spread
/// over them in turn).
fn run(placement: Placement, limiter: &mut dyn Limiter, proxies: usize) -> Outcome {
    let reader = QuotaReader::new();
    let mut pacers: Vec<Pacer> = (0..proxies)
        .map(|seed| {
            let config = PacerConfig {
                placement,
                ..PacerConfig::default()
            };
            Pacer::with_seed(config, seed as u64)
        })
        .collect();
    let mut clients = [Client::Idle(Duration::ZERO); CLIENTS];
    let (mut started, mut succeeded, mut rejected) = (0, 0, 0);
    let mut total = Duration::ZERO;
    // The limiter's arrivals are processed in time order with the rest:
    // each client's next event is at a known instant.
    loop {
        let next = clients
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match *c {
                Client::Idle(at) | Client::Sends(at) => Some((at, i)),
                Client::InFlight { sent } => Some((sent + ONE_WAY, i)),
                Client::Done => None,
            })
            .min();
        let Some((now, i)) = next else { break };
        let pacer = &mut pacers[i % proxies];
        clients[i] = match clients[i] {
            Client::Idle(_) if started == ACTIONS => Client::Done,
            Client::Idle(_) => {
                started += 1;
                Client::Sends(pacer.admit(now).at)
            }
            Client::Sends(_) => Client::InFlight { sent: now },
            Client::InFlight { sent } => {
                // At the limiter now; the answer is read ONE_WAY later
                // (observed here with its receipt instant: nothing else
                // this client does falls in between).
                let (status, headers) = limiter.arrive(now);
                let received = now + ONE_WAY;
                let reading = reader.read(
                    headers.iter().map(|(n, v)| (*n, &v[..])),
                    limiter.calendar(received),
                );
                pacer.observe(sent, received, &reading.states);
                if status == 429 {
                    rejected += 1;
                    // Retried at the latest reset announced (the preset
                    // reads them all; the longest counts).
                    let reset = reading.states.iter().map(|s| s.reset).max().unwrap();
                    Client::Sends(received + reset)
                } else {
                    succeeded += 1;
                    total = total.max(received);
                    Client::Idle(received)
                }
            }
            Client::Done => Client::Done,
        };
    }
    Outcome {
        rejected,
        total,
        succeeded,
    }
}

fn fixed(with_policy: bool) -> FixedWindow {
    FixedWindow {
        taken: Vec::new(),
        with_policy,
    }
}

fn bucket() -> TokenBucket {
    TokenBucket {
        tokens: 10.0,
        last: Duration::ZERO,
    }
}

fn check(label: &str, placement: Placement, limiter: &mut dyn Limiter, proxies: usize) -> Outcome {
    let outcome = run(placement, limiter, proxies);
    eprintln!(
        "{label} {placement:?} proxies={proxies}: {} 429s, {} succeeded, total {:?}",
        outcome.rejected, outcome.succeeded, outcome.total
    );
    assert_eq!(outcome.succeeded, ACTIONS);
    outcome
}

/// The done criteria: at most `max_429` 429s, within 1.3 x 10 s.
fn assert_done(outcome: &Outcome, max_429: u32) {
    assert!(outcome.rejected <= max_429, "{} 429s", outcome.rejected);
    assert!(
        outcome.total <= Duration::from_secs(13),
        "{:?}",
        outcome.total
    );
}

#[test]
fn one_proxy_against_a_fixed_window() {
    for placement in [Placement::Even, Placement::Burst] {
        for with_policy in [true, false] {
            let label = if with_policy { "fixed+policy" } else { "fixed" };
            assert_done(&check(label, placement, &mut fixed(with_policy), 1), 2);
        }
    }
}

#[test]
fn one_proxy_against_a_token_bucket() {
    for placement in [Placement::Even, Placement::Burst] {
        assert_done(&check("bucket", placement, &mut bucket(), 1), 2);
    }
}

#[test]
fn one_proxy_against_a_limiter_that_announces_its_reset_late() {
    for placement in [Placement::Even, Placement::Burst] {
        let mut flask = Flask {
            window: None,
            late: Duration::ZERO,
        };
        let outcome = check("flask", placement, &mut flask, 1);
        eprintln!("  lateness announced: {:?}", flask.late);
        assert!(outcome.rejected <= 2, "{} 429s", outcome.rejected);
        assert!(
            outcome.total <= Duration::from_secs(13) + flask.late,
            "{:?}",
            outcome.total
        );
    }
}

#[test]
fn two_proxies_that_do_not_share() {
    for placement in [Placement::Even, Placement::Burst] {
        let outcome = check("fixed+policy", placement, &mut fixed(true), 2);
        eprintln!("  (measured only: the fleet shares through Redis in the adapter)");
        assert_eq!(outcome.succeeded, ACTIONS);
    }
}

#[test]
fn one_proxy_against_the_fake_openai() {
    // The quota's own minimum: 14 s (the token window takes 24 of the 60
    // per 6 s, the request window 10 per 2 s inside it).
    for placement in [Placement::Even, Placement::Burst] {
        let mut openai = FakeOpenAi {
            requests: (0, Duration::ZERO),
            tokens: (0, Duration::ZERO),
        };
        let outcome = check("openai", placement, &mut openai, 1);
        assert!(outcome.rejected <= 2, "{} 429s", outcome.rejected);
        assert!(
            outcome.total <= Duration::from_secs(14).mul_f64(1.3),
            "{:?}",
            outcome.total
        );
    }
}

/// What happens next in [`express_with_jitter`], at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// Client `.0` asks the pacer for a new action.
    Ask(usize),
    /// Client `.0` sends the attempt whose start was recorded at `.1`.
    Send(usize, Duration),
    /// Its request, sent at `.1`, reaches the limiter.
    Arrive(usize, Duration),
    /// The answer to the request sent at `.1` is read: status, `r`, `t`.
    Read(usize, Duration, u16, u64, u64),
}

/// express-rate-limit's memory store as the pacing script meets it: a
/// window of 10 per 2 s per client starting at the first request after the
/// previous one ended, `t` rounded up to whole seconds, draft-8 fields;
/// the clients' requests go over separate connections, each way taking
/// 0.2 to 3 ms drawn from `seed` (so that requests sent close together
/// reach the limiter, and their answers the pacer, in either order), a
/// send 0.05 to 1.5 ms after its admitted instant; a 429 is retried after
/// the `t` it announced. The pacer is used as the layer uses it: each
/// send moves its start to the instant sent, a retry's start is recorded
/// when it is planned. Returns the 429s and the total time.
fn express_with_jitter(seed: u64) -> (u32, Duration) {
    use retry_budget::pace::Admission;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    let mut rng = fastrand::Rng::with_seed(seed);
    let mut between = |lo: u64, hi: u64| Duration::from_micros(rng.u64(lo..hi));
    let reader = QuotaReader::new();
    let mut pacer = Pacer::with_seed(PacerConfig::default(), seed);
    let (mut end, mut used) = (Duration::ZERO, 0_u64);
    let mut steps = BinaryHeap::new();
    for client in 0..CLIENTS {
        steps.push(Reverse((between(0, 3000), Step::Ask(client))));
    }
    let (mut started, mut rejected, mut total) = (0, 0, Duration::ZERO);
    while let Some(Reverse((now, step))) = steps.pop() {
        let next = match step {
            Step::Ask(_) if started == ACTIONS => continue,
            Step::Ask(client) => {
                started += 1;
                let at = pacer.admit(now).at;
                (at + between(50, 1500), Step::Send(client, at))
            }
            Step::Send(client, recorded) => {
                let recorded = Admission {
                    at: recorded,
                    reason: None,
                };
                pacer.sent(&recorded, now);
                (now + between(200, 3000), Step::Arrive(client, now))
            }
            Step::Arrive(client, sent) => {
                if end <= now {
                    (end, used) = (now + WINDOW, 0);
                }
                used += 1;
                let status = if used <= QUOTA { 200 } else { 429 };
                let t = (end - now).as_secs_f64().ceil() as u64;
                let read = Step::Read(client, sent, status, QUOTA.saturating_sub(used), t);
                (now + between(200, 3000), read)
            }
            Step::Read(client, sent, status, r, t) => {
                let fields = [
                    ("ratelimit", format!("\"10-in-2sec\"; r={r}; t={t}")),
                    ("ratelimit-policy", "\"10-in-2sec\"; q=10; w=2".to_owned()),
                ];
                let reading = reader.read(fields.iter().map(|(n, v)| (*n, v.as_bytes())), None);
                pacer.observe(sent, now, &reading.states);
                if status == 429 {
                    rejected += 1;
                    let wait = Duration::from_secs(t);
                    let retry = pacer.retry_planned(now, wait);
                    (now + wait, Step::Send(client, retry.at))
                } else {
                    total = total.max(now);
                    (now + between(100, 1000), Step::Ask(client))
                }
            }
        };
        steps.push(Reverse(next));
    }
    (rejected, total)
}

#[test]
fn one_proxy_against_express_with_requests_racing() {
    // Before each start was counted from the instant it was sent, raced
    // answers kept from raising the count, starts in flight taken from a
    // raced answer's count and retries counted, this model (over 2,000
    // seeds) gave 1 to 7 429s with 42 % of them, 5 or more with 34 %.
    let mut worst = (0, Duration::ZERO);
    for seed in 0..300 {
        let (rejected, total) = express_with_jitter(seed);
        assert!(rejected <= 2, "seed {seed}: {rejected} 429s");
        assert!(total <= Duration::from_secs(13), "seed {seed}: {total:?}");
        worst = (worst.0.max(rejected), worst.1.max(total));
    }
    eprintln!(
        "express, requests racing, 300 seeds: at most {} 429s, {:?}",
        worst.0, worst.1
    );
}
