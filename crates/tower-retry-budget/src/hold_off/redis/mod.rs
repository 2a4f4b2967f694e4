//! [`RedisStore`]: the hold-off shared across processes through Redis.

mod config;
mod publish;
mod subscribe;
mod task;

pub use config::{RedisStore, RedisStoreError, DEFAULT_REDIS_OP_TIMEOUT};
pub(crate) use task::start;
