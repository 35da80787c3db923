//! SplitMix64, the one seeded pseudo-random source of the workspace: the
//! simulator's duration jitter, the driver stand-in's stale memory, the
//! benchmarks' workload generators (DISB, multi-GPU job mixes) and the
//! golden tests all draw from it, so a seed means the same stream
//! everywhere. The generator of Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators" (OOPSLA 2014), with the increment and
//! mixing constants of Vigna's reference `splitmix64.c`.

/// The golden-ratio increment by which the state advances per draw.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Advances `state` by [`GOLDEN_GAMMA`] and returns the mixed word.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(GOLDEN_GAMMA);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A word's top 53 bits as a uniform `f64` in [0, 1).
pub fn unit_f64(word: u64) -> f64 {
    (word >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_reference_stream() {
        // splitmix64.c seeded with 1234567: its first outputs.
        let mut s = 1234567;
        assert_eq!(splitmix64(&mut s), 6457827717110365317);
        assert_eq!(splitmix64(&mut s), 3203168211198807973);
        assert_eq!(splitmix64(&mut s), 9817491932198370423);
    }

    #[test]
    fn unit_is_in_range() {
        assert_eq!(unit_f64(0), 0.0);
        assert!(unit_f64(u64::MAX) < 1.0);
    }
}
