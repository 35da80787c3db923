//! reef-sched: the sans-IO scheduler core (under construction: issue 4).
