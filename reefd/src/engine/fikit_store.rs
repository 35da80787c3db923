//! FIKIT profiles on disk (fikit.txt §3.2, Fig. 3: a task measured once
//! keeps its profile, so a restarted daemon does not measure it again).
//!
//! One JSON file per task (model), `<name>.fikit.json`, beside the model's
//! schedule unless `scheduler.fikit_profile_dir` names another directory.
//! The file holds the task key, the fingerprint of the kernel-ID sequence it
//! was measured on, T, and the SK/SG means per position and per kernel ID.
//! A file that cannot be read or parsed counts as missing; one measured on
//! another kernel sequence is refused by the policy as stale (the model
//! changed) and the task measures again, then the file is rewritten.

use reef_sched::fikit::profile::{KernelId, Means, Profile};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Serialize, Deserialize)]
struct MeansFile {
    sk_ns: f64,
    sg_ns: f64,
    count: u64,
}

#[derive(Serialize, Deserialize)]
struct IdFile {
    name: String,
    grid: [u32; 3],
    block: [u32; 3],
    #[serde(flatten)]
    means: MeansFile,
}

#[derive(Serialize, Deserialize)]
struct ProfileFile {
    task_key: String,
    /// Hex, so that a 64-bit value survives any JSON reader.
    fingerprint: String,
    runs: u32,
    positions: Vec<MeansFile>,
    by_id: Vec<IdFile>,
}

fn means_file(m: &Means) -> MeansFile {
    MeansFile {
        sk_ns: m.sk_ns,
        sg_ns: m.sg_ns,
        count: m.count,
    }
}

fn means(m: &MeansFile) -> Means {
    Means {
        sk_ns: m.sk_ns,
        sg_ns: m.sg_ns,
        count: m.count,
    }
}

/// Where the profile of model `name` (schedule at `schedule`) lives.
pub fn path(dir: Option<&Path>, name: &str, schedule: &Path) -> PathBuf {
    let file = format!("{name}.fikit.json");
    match dir {
        Some(d) => d.join(file),
        None => schedule.with_file_name(file),
    }
}

pub fn to_json(p: &Profile) -> String {
    let f = ProfileFile {
        task_key: p.task_key.clone(),
        fingerprint: format!("{:016x}", p.fingerprint),
        runs: p.runs,
        positions: p.positions.iter().map(means_file).collect(),
        by_id: p
            .by_id
            .iter()
            .map(|(id, m)| IdFile {
                name: id.name.clone(),
                grid: id.grid,
                block: id.block,
                means: means_file(m),
            })
            .collect(),
    };
    serde_json::to_string_pretty(&f).unwrap_or_default()
}

pub fn from_json(text: &str) -> Result<Profile, String> {
    let f: ProfileFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let fingerprint = u64::from_str_radix(&f.fingerprint, 16)
        .map_err(|e| format!("fingerprint {:?}: {e}", f.fingerprint))?;
    Ok(Profile {
        task_key: f.task_key,
        fingerprint,
        runs: f.runs,
        positions: f.positions.iter().map(means).collect(),
        by_id: f
            .by_id
            .iter()
            .map(|i| {
                (
                    KernelId::new(i.name.clone(), i.grid, i.block),
                    means(&i.means),
                )
            })
            .collect(),
    })
}

/// The stored profile at `p`, if there is a readable one.
pub fn load(p: &Path) -> Option<Profile> {
    let text = std::fs::read_to_string(p).ok()?;
    match from_json(&text) {
        Ok(prof) => Some(prof),
        Err(e) => {
            tracing::warn!(path = %p.display(), error = %e, "FIKIT profile unreadable; the task measures again");
            None
        }
    }
}

/// Writes the profile to `p` (through a temporary file and a rename, so a
/// crash never leaves half a file).
pub fn save(p: &Path, prof: &Profile) -> std::io::Result<()> {
    let tmp = p.with_extension("json.tmp");
    std::fs::write(&tmp, to_json(prof))?;
    std::fs::rename(&tmp, p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reef_sched::fikit::profile::ProfileBuilder;

    #[test]
    fn a_profile_survives_the_round_trip_through_its_file() {
        let ids = vec![
            KernelId::new("conv", [4, 1, 1], [64, 1, 1]),
            KernelId::new("relu", [2, 1, 1], [64, 1, 1]),
        ];
        let mut b = ProfileBuilder::new("vgg", ids);
        b.add_run(&[(10, Some(250_000)), (5, None)]);
        b.add_run(&[(12, Some(150_000)), (7, None)]);
        let p = b.finish();
        let back = from_json(&to_json(&p)).unwrap();
        assert_eq!(back, p);
        assert!(from_json("{}").is_err());
        assert!(from_json(&to_json(&p).replace(&format!("{:016x}", p.fingerprint), "zz")).is_err());
    }
}
