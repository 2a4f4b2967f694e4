//! The request body while the layer holds it: a body `reqwest` can copy
//! is copied for each attempt; a streaming one is sent once.

use bytes::Bytes;
use reqwest::Body;
use tower_retry_budget::replay::{ReplayBody, ReplayHandle};

/// A request body under the budget. `Clone` is what the layer needs to
/// send a copy per attempt.
#[derive(Clone)]
pub(crate) enum Payload {
    /// A body `reqwest` held in memory: its bytes, copied out once (reqwest
    /// does not lend its own copy), then shared by every attempt.
    Reusable(Bytes),
    /// A streaming body, kept by none of its copies (a replay limit of
    /// zero): the first attempt sends it, and the handle in the request
    /// tells the layer that no copy can follow, so a 429 to it ends the
    /// action as `not_replayable`.
    Streaming(ReplayBody<Body>),
}

impl Payload {
    /// `body` made ready for the layer, and, for a stream, the handle the
    /// layer reads to know whether it can still be sent again.
    pub(crate) fn new(body: Body) -> (Self, Option<ReplayHandle>) {
        if let Some(bytes) = body.as_bytes() {
            return (Self::Reusable(Bytes::copy_from_slice(bytes)), None);
        }
        let stream = ReplayBody::new(body, 0);
        let handle = stream.handle();
        (Self::Streaming(stream), Some(handle))
    }
}

impl From<Payload> for Body {
    fn from(payload: Payload) -> Self {
        match payload {
            Payload::Reusable(bytes) => Body::from(bytes),
            Payload::Streaming(stream) => Body::wrap(stream),
        }
    }
}
