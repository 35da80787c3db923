//! reef-model (under construction: see the crate's issue).
