//! [`GrpcTrailersLayer`]: a gRPC status in trailers, seen by the retry layer and the report.

mod body;
mod future;
mod head;
mod layer;
mod service;

pub use body::PeekBody;
pub use future::GrpcTrailersFuture;
pub use layer::GrpcTrailersLayer;
pub use service::GrpcTrailers;
