//! [`HoldOff`]: a `Retry-After` honoured by the whole client, bounded in time and space.

pub(crate) mod authority;
mod config;
mod extra;
mod handle;
mod map;
#[cfg(feature = "redis")]
mod redis;
mod store;

pub use config::{
    HoldOffBuilder, HoldOffError, DEFAULT_HOLD_OFF_CAPACITY, DEFAULT_MAX_HOLD, MAX_MAX_HOLD,
};
pub use handle::HoldOff;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use redis::{
    AllowanceError, RedisAllowance, RedisStore, RedisStoreError, Take, Unavailable,
    ALLOWANCE_EXPIRY_MARGIN, DEFAULT_REDIS_OP_TIMEOUT,
};
pub use store::StoreHealth;
