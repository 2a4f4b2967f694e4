//! What the reqwest bench (`benches/reqwest.rs`) and its profile
//! (`examples/reqwest_profile.rs`) share: the loopback server and the three
//! clients they compare.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use reqwest_middleware::ClientWithMiddleware;
use reqwest_retry::policies::ExponentialBackoff;
use reqwest_retry::RetryTransientMiddleware;
use reqwest_retry_budget::{Policy, RetryBudgetMiddleware};
use tokio::net::TcpListener;

/// The variants, by name: no middleware, `reqwest-retry`'s
/// `RetryTransientMiddleware` (its default `ExponentialBackoff`, 3
/// retries), and `RetryBudgetMiddleware` with `Policy::default()`.
pub const VARIANTS: [&str; 3] = ["bare", "reqwest_retry", "retry_budget"];

/// The client of variant `name` (one of [`VARIANTS`]; `None` otherwise).
pub fn client(name: &str) -> Option<ClientWithMiddleware> {
    let builder = reqwest_middleware::ClientBuilder::new(reqwest::Client::new());
    Some(match name {
        "bare" => builder.build(),
        "reqwest_retry" => builder
            .with(RetryTransientMiddleware::new_with_policy(
                ExponentialBackoff::builder().build_with_max_retries(3),
            ))
            .build(),
        "retry_budget" => builder
            .with(RetryBudgetMiddleware::new(Policy::default()))
            .build(),
        _ => return None,
    })
}

/// Serves HTTP/1 on `listener` until the runtime ends, answering every
/// request `200` with a short body. Spawns a task per connection (call it
/// inside a runtime).
pub async fn serve(listener: TcpListener) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(async move {
            let service = service_fn(|_: http::Request<hyper::body::Incoming>| async {
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(
                    b"coast palettes\n",
                ))))
            });
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
