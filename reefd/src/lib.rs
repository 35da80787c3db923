//! reefd: the daemon, its client API and reefctl (under construction: issue 7).
