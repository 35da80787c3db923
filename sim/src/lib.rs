//! reef-sim (under construction: see the crate's issue).
