//! [`RedisStore`]: the hold-off shared across processes through Redis, and
//! [`RedisAllowance`]: a rate-limit window's allowance shared the same way.

pub(crate) mod allowance;
mod config;
mod publish;
mod subscribe;
mod task;

pub use allowance::{AllowanceError, RedisAllowance, Take, Unavailable, ALLOWANCE_EXPIRY_MARGIN};
pub use config::{RedisStore, RedisStoreError, DEFAULT_REDIS_OP_TIMEOUT};
pub(crate) use task::start;
