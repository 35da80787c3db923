//! reef-bench (under construction: see the crate's issue).
