//! strata-bench
