//! A scripted inner service: answers each call after a scripted duration,
//! with a scripted status and Retry-After, and records when it was called.

#![allow(dead_code)]

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tokio::time::Instant;
use tower::Service;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Step {
    pub after: Duration,
    pub status: u16,
    pub retry_after: Option<String>,
}

impl Step {
    pub fn new(after_s: f64, status: u16, retry_after: Option<&str>) -> Self {
        Self {
            after: Duration::from_secs_f64(after_s),
            status,
            retry_after: retry_after.map(str::to_owned),
        }
    }
}

/// The inner service. Clones share the script and the record.
#[derive(Debug, Clone)]
pub struct Scripted {
    script: Arc<Vec<Step>>,
    calls: Arc<Mutex<Vec<Duration>>>,
    origin: Instant,
}

impl Scripted {
    pub fn new(script: Vec<Step>) -> Self {
        Self {
            script: Arc::new(script),
            calls: Arc::default(),
            origin: Instant::now(),
        }
    }

    /// When each call was made, as elapsed time since the service was made.
    pub fn calls(&self) -> Vec<Duration> {
        self.calls.lock().unwrap().clone()
    }

    pub fn call_count(&self) -> usize {
        self.calls.lock().unwrap().len()
    }
}

impl<B> Service<Request<B>> for Scripted {
    type Response = Response<()>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<()>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _req: Request<B>) -> Self::Future {
        let mut calls = self.calls.lock().unwrap();
        let index = calls.len();
        calls.push(self.origin.elapsed());
        let step = self
            .script
            .get(index)
            .cloned()
            .unwrap_or_else(|| panic!("call {} was not scripted", index + 1));
        Box::pin(async move {
            tokio::time::sleep(step.after).await;
            let mut res = Response::builder().status(step.status);
            if let Some(ra) = &step.retry_after {
                res = res.header("retry-after", ra.as_str());
            }
            Ok(res.body(()).unwrap())
        })
    }
}

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The report the layer put in `response`'s extensions.
pub fn report_of<B>(response: &Response<B>) -> &retry_budget::Report {
    response
        .extensions()
        .get::<retry_budget::Report>()
        .expect("a report on the response")
}

/// A writer for a `tracing` subscriber that keeps everything written to it.
#[derive(Clone, Default)]
pub struct Captured(pub Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}
