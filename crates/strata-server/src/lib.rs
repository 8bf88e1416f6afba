//! strata-server
