//! [`ReplayBodyLayer`]: request bodies that are not `Clone`, made replayable.

mod body;
mod extra;
mod layer;
mod service;

pub use body::{ReplayBody, ReplayError, ReplayHandle, DEFAULT_REPLAY_LIMIT};
pub use layer::ReplayBodyLayer;
pub use service::ReplayBodyService;
