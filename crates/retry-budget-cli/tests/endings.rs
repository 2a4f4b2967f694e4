//! `retry-budget get` against hostile loopback servers: every ending of the
//! action, body included, is inside the budget and has its own exit status.
//!
//! The servers speak raw HTTP/1.1 over a std `TcpListener` (hyper would not
//! send a body shorter than its `Content-Length`). Every run is bounded: a
//! child still running after [`LIMIT`] is killed and the test fails, so a
//! body that escapes the budget fails the test instead of hanging it. No
//! upper bound on wall time is asserted: the proof that the deadline held
//! is the exit status (28), which the process could not reach otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long any run may take before it counts as escaping its budget.
const LIMIT: Duration = Duration::from_secs(60);

/// A loopback server: for each connection, reads the request head, then
/// lets `answer` write whatever it likes (an error ends the connection).
struct Raw {
    addr: SocketAddr,
    count: Arc<AtomicUsize>,
}

impl Raw {
    fn start(
        answer: impl Fn(usize, &mut TcpStream) -> std::io::Result<()> + Send + Sync + 'static,
    ) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
        let addr = listener.local_addr().expect("its address");
        let count = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(answer);
        let counter = count.clone();
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (answer, counter) = (answer.clone(), counter.clone());
                thread::spawn(move || {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match stream.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let _ = answer(n, &mut stream);
                });
            }
        });
        Self { addr, count }
    }

    fn url(&self) -> String {
        format!("http://{}/", self.addr)
    }

    fn count(&self) -> usize {
        self.count.load(Ordering::SeqCst)
    }
}

/// A chunked body that never ends: 1 KiB every 10 ms.
fn endless_chunked(stream: &mut TcpStream, head: &str) -> std::io::Result<()> {
    stream.write_all(head.as_bytes())?;
    let chunk = format!("400\r\n{}\r\n", "x".repeat(1024));
    loop {
        stream.write_all(chunk.as_bytes())?;
        thread::sleep(Duration::from_millis(10));
    }
}

/// What a bounded run gave.
struct Ran {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: String,
}

fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_retry-budget"));
    command
        .arg("get")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// Waits for `child`, killing it (and failing) after [`LIMIT`].
fn wait_bounded(child: &mut Child) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            return status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {LIMIT:?}: the action escaped its budget");
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn run(args: &[&str]) -> Ran {
    let mut child = command(args).spawn().expect("the binary runs");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = out.read_to_end(&mut bytes);
        bytes
    });
    let err = thread::spawn(move || {
        let mut text = String::new();
        let _ = err.read_to_string(&mut text);
        text
    });
    let status = wait_bounded(&mut child);
    Ran {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Stdout as the single JSON line of `--json`.
fn report(ran: &Ran) -> Value {
    let text = String::from_utf8(ran.stdout.clone()).expect("UTF-8");
    assert_eq!(text.lines().count(), 1, "{text:?}");
    serde_json::from_str(&text).expect("JSON")
}

#[test]
fn a_dribbling_body_stops_at_the_attempts_deadline() {
    // 1000 bytes announced, one sent per second: 1000 s without a deadline.
    let server = Raw::start(|_, stream| {
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")?;
        loop {
            stream.write_all(b"x")?;
            thread::sleep(Duration::from_secs(1));
        }
    });
    let started = Instant::now();
    let ran = run(&[&server.url(), "--budget", "10s", "--attempt-timeout", "2s"]);
    assert_eq!(ran.status.code(), Some(28), "{}", ran.stderr);
    // The attempt's reservation (2 s) is the body's deadline too.
    assert!(started.elapsed() >= Duration::from_secs(2));
    assert!(!ran.stdout.is_empty() && ran.stdout.len() < 1000);
    assert!(ran.stdout.iter().all(|b| *b == b'x'));
    for line in [
        "attempt 1/3: 200",
        "Finished: the service answered.",
        &format!(
            "The body was not read to the end within the budget: stopped after {} bytes.",
            ran.stdout.len()
        ),
    ] {
        assert!(
            ran.stderr.contains(line),
            "{line:?} not in:\n{}",
            ran.stderr
        );
    }
    assert_eq!(server.count(), 1);
}

#[test]
fn an_endless_chunked_body_stops_inside_the_budget_and_json_says_so() {
    let server = Raw::start(|_, stream| {
        endless_chunked(
            stream,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
    });
    let file = std::env::temp_dir().join(format!("retry-budget-endless-{}", std::process::id()));
    let path = file.to_str().unwrap();
    // A cap generous enough for a loaded machine to get the head and the
    // first chunks through before it ends the body.
    let ran = run(&[
        &server.url(),
        "--budget",
        "6s",
        "--attempt-timeout",
        "3s",
        "--json",
        "--output",
        path,
    ]);
    let written = std::fs::read(&file).unwrap_or_default();
    let _ = std::fs::remove_file(&file);
    assert_eq!(ran.status.code(), Some(28), "{}", ran.stderr);
    let report = report(&ran);
    assert_eq!(report["outcome"], "success");
    assert_eq!(report["body"], "timed_out");
    assert_eq!(report["body_bytes"].as_u64(), Some(written.len() as u64));
    assert!(!written.is_empty());
    assert!(
        ran.stderr
            .contains("The body was not read to the end within the budget"),
        "{}",
        ran.stderr
    );
}

#[test]
fn a_final_429_with_an_endless_body_ends_inside_the_budget() {
    let server = Raw::start(|_, stream| {
        endless_chunked(
            stream,
            "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 30\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
    });
    let ran = run(&[&server.url(), "--budget", "5s", "--attempt-timeout", "1s"]);
    assert_eq!(ran.status.code(), Some(28), "{}", ran.stderr);
    for line in [
        "Stopped: the retry budget cannot fit the next request.",
        "The service asked to wait 30 s; no retry was sent.",
        "The body was not read to the end within the budget",
    ] {
        assert!(
            ran.stderr.contains(line),
            "{line:?} not in:\n{}",
            ran.stderr
        );
    }
    assert_eq!(server.count(), 1);
}

#[test]
fn a_body_shorter_than_its_content_length_is_cut_short() {
    let server = Raw::start(|_, stream| {
        stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n123456789")?;
        stream.flush()
        // The connection closes here, 91 bytes short.
    });
    let ran = run(&[&server.url()]);
    assert_eq!(ran.status.code(), Some(18), "{}", ran.stderr);
    assert_eq!(ran.stdout, b"123456789");
    assert!(
        ran.stderr
            .contains("The body was cut short by the server after 9 bytes ("),
        "{}",
        ran.stderr
    );
    // The action itself ended as success; the body did not.
    assert!(ran.stderr.contains("Finished: the service answered."));
}

#[test]
fn a_closed_stdout_stops_reading_at_once() {
    let server = Raw::start(|_, stream| {
        endless_chunked(
            stream,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
    });
    // A budget far longer than the test: only the closed pipe can end it
    // before 30 s (with 23; the deadline would give 28).
    let mut child = command(&[&server.url(), "--budget", "60s", "--attempt-timeout", "30s"])
        .spawn()
        .expect("the binary runs");
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).expect("ten bytes of the body");
    assert_eq!(&first, b"xxxxxxxxxx");
    drop(out); // `| head -c 10`
    let mut err = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child);
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    assert_eq!(status.code(), Some(23), "{text}");
    assert!(
        text.contains("The output could not be written after "),
        "{text}"
    );
    assert!(text.contains("the body was not read further"), "{text}");
}

/// Sends `signal` during the wait after a 429 and returns the exit status,
/// stdout and stderr.
fn leave_during_a_wait(signal: &str) -> (ExitStatus, String, String) {
    let server = Raw::start(|_, stream| {
        stream.write_all(
            b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\nContent-Length: 0\r\n\r\n",
        )
    });
    let mut child = command(&[&server.url(), "--budget", "20s", "--json"])
        .spawn()
        .expect("the binary runs");
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "no wait in:\n{seen}");
        seen.push_str(&line);
        if line.contains("waiting 5 s") {
            break;
        }
    }
    let kill = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let status = wait_bounded(&mut child);
    err.read_to_string(&mut seen).unwrap();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    // Gone before the planned next start: one request only.
    assert_eq!(server.count(), 1, "{seen}");
    (status, out, seen)
}

#[test]
fn sigterm_and_sighup_are_the_user_leaving() {
    for (signal, code) in [("TERM", 143), ("HUP", 129)] {
        let (status, out, err) = leave_during_a_wait(signal);
        assert_eq!(status.code(), Some(code), "{signal}: {err}");
        let report: Value = serde_json::from_str(&out).expect("the report");
        assert_eq!(report["outcome"], "cancelled", "{signal}");
        assert_eq!(report["attempts_started"], 1);
        assert_eq!(report["body"], "not_read");
        assert!(
            err.contains("Cancelled: the caller left"),
            "{signal}: {err}"
        );
        assert!(err.contains(&format!("Left on SIG{signal}.")), "{err}");
    }
}

#[test]
fn sigterm_while_the_body_is_read_stops_it_and_reports() {
    let server = Raw::start(|_, stream| {
        endless_chunked(
            stream,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        )
    });
    let mut child = command(&[&server.url(), "--budget", "60s", "--attempt-timeout", "30s"])
        .spawn()
        .expect("the binary runs");
    let mut out = child.stdout.take().unwrap();
    let mut first = [0u8; 10];
    out.read_exact(&mut first).expect("the body has started");
    // Keep draining stdout so that only the signal can end the run.
    let drain = thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(kill.success());
    let mut err = child.stderr.take().unwrap();
    let status = wait_bounded(&mut child);
    let _ = drain.join();
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    assert_eq!(status.code(), Some(143), "{text}");
    assert!(text.contains("Finished: the service answered."), "{text}");
    assert!(
        text.contains("Interrupted while the response body was being read."),
        "{text}"
    );
    assert!(text.contains("Left on SIGTERM."), "{text}");
}
