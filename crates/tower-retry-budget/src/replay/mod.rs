//! [`ReplayBodyLayer`]: request bodies that are not `Clone`, made replayable.

mod body;
mod layer;
mod service;

pub use body::{BodyReplay, ReplayBody, ReplayError, DEFAULT_REPLAY_LIMIT};
pub use layer::ReplayBodyLayer;
pub use service::ReplayBodyService;
