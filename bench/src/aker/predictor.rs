//! Placeholder replaced below.
use anyhow::Result;
pub fn main(_a: &super::AkerArgs) -> Result<()> {
    anyhow::bail!("the predictor experiment is not built yet")
}
