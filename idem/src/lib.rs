//! reef-idem (under construction: see the crate's issue).
