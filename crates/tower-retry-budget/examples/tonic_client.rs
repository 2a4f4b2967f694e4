//! A tonic client `Channel` behind `RetryBudgetLayer`, against its own
//! loopback tonic server that answers the first call with
//! RESOURCE_EXHAUSTED (Trailers-Only, `grpc-retry-pushback-ms: 1000`).
//! No `protoc`: a raw-bytes codec and a hand-written server service.
//!
//! ```text
//! cargo run -p tower-retry-budget --example tonic_client
//! ```

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use bytes::{Buf, BufMut, Bytes};
use http::uri::PathAndQuery;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataMap;
use tonic::server::NamedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::Endpoint;
use tonic::{Code, Status};
use tower::{Service, ServiceBuilder};
use tower_retry_budget::{
    body_replay::{ReplayBody, ReplayBodyLayer},
    response_signal::GrpcSignal,
    Idempotent, Policy, Report, ReportSlot, RetryBudgetLayer,
};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The server: RESOURCE_EXHAUSTED with a pushback of 1 s, then OK.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Catalog(Arc::new(AtomicUsize::new(0)));
    tokio::spawn(
        tonic::transport::Server::builder()
            .serve_with_incoming(server, TcpIncoming::from(listener)),
    );

    // The client: the channel, made retryable by composition.
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let stack = ServiceBuilder::new()
        .layer(ReplayBodyLayer::new())
        .layer(RetryBudgetLayer::new(Policy::default()).signal(GrpcSignal))
        .map_request(|req: http::Request<ReplayBody<Body>>| req.map(Body::new))
        .service(channel);
    let mut grpc = tonic::client::Grpc::new(stack);

    // gRPC calls are POST: only a call marked safe to repeat is retried.
    let slot = ReportSlot::new();
    let mut request = tonic::Request::new(Bytes::from_static(b"coast palettes"));
    request.extensions_mut().insert(Idempotent);
    request.extensions_mut().insert(slot.clone());
    grpc.ready().await?;
    let started = Instant::now();
    let result = grpc
        .unary(
            request,
            PathAndQuery::from_static("/shop.Catalog/Get"),
            RawCodec,
        )
        .await;
    match &result {
        Ok(response) => println!(
            "OK after {:.2} s: {:?}",
            started.elapsed().as_secs_f64(),
            response.get_ref()
        ),
        Err(status) => println!("{:?}: {}", status.code(), status.message()),
    }
    // On OK the report is in the response's extensions; on a gRPC error,
    // tonic keeps no extensions: the slot has it either way.
    let report: Report = slot.take().expect("a budgeted call has a report");
    println!("\n{report}\n");
    for event in &report.events {
        println!("{}", serde_json::to_string(event)?);
    }
    Ok(())
}

/// The server service, as tonic's codegen would write it.
#[derive(Clone)]
struct Catalog(Arc<AtomicUsize>);

impl NamedService for Catalog {
    const NAME: &'static str = "shop.Catalog";
}

impl Service<http::Request<Body>> for Catalog {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path() != "/shop.Catalog/Get" {
            return Box::pin(async { Ok(Status::unimplemented("no such method").into_http()) });
        }
        let first = self.0.fetch_add(1, Ordering::SeqCst) == 0;
        let get = tower::service_fn(move |request: tonic::Request<Bytes>| async move {
            if first {
                let mut metadata = MetadataMap::new();
                metadata.insert("grpc-retry-pushback-ms", "1000".parse().unwrap());
                return Err(Status::with_metadata(
                    Code::ResourceExhausted,
                    "slow down",
                    metadata,
                ));
            }
            Ok(tonic::Response::new(request.into_inner()))
        });
        Box::pin(async move { Ok(tonic::server::Grpc::new(RawCodec).unary(get, req).await) })
    }
}

/// Messages as raw bytes: a codec without protobuf.
#[derive(Debug, Clone, Copy, Default)]
struct RawCodec;

impl Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;

    fn encoder(&mut self) -> RawCodec {
        RawCodec
    }

    fn decoder(&mut self) -> RawCodec {
        RawCodec
    }
}

impl Encoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn encode(&mut self, item: Bytes, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawCodec {
    type Item = Bytes;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Bytes>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}
