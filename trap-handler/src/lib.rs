//! reef-trap (under construction: see the crate's issue).
