//! strata-proto
