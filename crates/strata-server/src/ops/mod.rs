//! Operator commands beyond the cache protocol: what memcached's tools read.

pub(crate) mod conns;
pub(crate) mod slab_view;
