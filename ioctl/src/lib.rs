//! reef-ioctl (under construction: see the crate's issue).
