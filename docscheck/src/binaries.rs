//! Binaries: a command line run with `REEF_PARSE_ONLY=1` against the built
//! binaries, and the checks clap cannot make (policy names).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::BINARIES;

/// The binaries under test, in a cargo target directory.
pub struct Binaries {
    pub dir: PathBuf,
}

fn run_parse_only(path: &Path, args: &[String]) -> Result<(Option<i32>, String), String> {
    let mut child = Command::new(path)
        .args(args)
        .env("REEF_PARSE_ONLY", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not exit within 20 s under REEF_PARSE_ONLY=1: a binary built before the parse-only mode? Rebuild it",
                    path.display()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A command line each binary accepts but cannot carry out: exit 0 shows
/// the binary honours REEF_PARSE_ONLY (a stale build would fail it).
fn probe(bin: &str) -> Vec<String> {
    let v: &[&str] = match bin {
        "reefd" => &["status", "--config", "/nonexistent/docscheck/reefd.toml"],
        "reefctl" => &["--socket", "/nonexistent/docscheck/reefd.sock", "stats"],
        "reef-bench" => &["disb", "/nonexistent/docscheck/w.json", "--no-plot"],
        _ => &["/nonexistent/docscheck/model"],
    };
    v.iter().map(|s| s.to_string()).collect()
}

impl Binaries {
    /// The target directory of the running test executable
    /// (`target/debug/deps/NAME-HASH` -> `target/debug`).
    pub fn beside_current_exe() -> Binaries {
        let exe = std::env::current_exe().expect("current_exe");
        let mut dir = exe.parent().unwrap().to_path_buf();
        if dir.ends_with("deps") {
            dir.pop();
        }
        Binaries { dir }
    }

    /// Each binary exists and honours REEF_PARSE_ONLY; else what to do.
    pub fn verify(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        for b in BINARIES {
            let p = self.dir.join(b);
            if !p.is_file() {
                errors.push(format!(
                    "{} is missing: build it (`cargo build -p reefd --bins -p reef-bench -p reef-idem`; `cargo test --workspace` builds it)",
                    p.display()
                ));
                continue;
            }
            match run_parse_only(&p, &probe(b)) {
                Ok((Some(0), _)) => {}
                Ok((code, err)) => errors.push(format!(
                    "{} does not honour REEF_PARSE_ONLY=1 (exit {code:?}: {}): built before the parse-only mode? Rebuild it (`cargo build -p reefd --bins -p reef-bench -p reef-idem`)",
                    p.display(),
                    err.trim()
                )),
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("\n"))
        }
    }

    /// Runs one command line parse-only: None when it parses. A
    /// placeholder (`--count N`, `--timeout SECONDS`) that clap refuses as a
    /// number is replaced by `1` and the line run again, so what follows it
    /// is checked too.
    pub fn check(&self, argv: &[String], fragment: bool) -> Option<String> {
        let path = self.dir.join(&argv[0]);
        let mut argv = argv.to_vec();
        for _ in 0..argv.len() {
            match run_parse_only(&path, &argv[1..]) {
                Ok((Some(2), err)) => match placeholder_refused(&argv, &err) {
                    Some(k) => argv[k] = "1".into(),
                    None => return parse_failure(&argv, fragment, Some(2), &err),
                },
                Ok((code, err)) => return parse_failure(&argv, fragment, code, &err),
                Err(e) => return Some(e),
            }
        }
        None
    }
}

/// Whether the scheduler knows a policy name (reefd, reef-bench and reefctl
/// take the same names: reef-sched's policies and Aker's managers).
pub fn known_policy(name: &str) -> bool {
    reef_sched::aker::Manager::of_name(name).is_some() || reef_sched::policy_by_name(name).is_ok()
}

/// Policy names a command line gives (`--policy a,b`, `reefctl policy a`)
/// that the scheduler does not know; placeholders (`P`, `NAME`) pass.
pub fn unknown_policies(argv: &[String]) -> Vec<String> {
    let mut lists = Vec::new();
    for k in 1..argv.len() {
        if argv[k] == "--policy" {
            lists.extend(argv.get(k + 1).cloned());
        } else if let Some(v) = argv[k].strip_prefix("--policy=") {
            lists.push(v.to_string());
        } else if argv[0] == "reefctl" && argv[k] == "policy" && argv[k - 1] != "--socket" {
            lists.extend(argv.get(k + 1).cloned());
        }
    }
    lists
        .iter()
        .flat_map(|l| l.split(','))
        .map(str::trim)
        .filter(|p| !p.is_empty() && !is_placeholder(p) && !known_policy(p))
        .map(str::to_string)
        .collect()
}

/// Whether a name is a doc's placeholder: `N`, `MS`, `SECONDS`, `DIR_A`.
pub fn is_placeholder(w: &str) -> bool {
    w.len() <= 24
        && w.chars().any(|c| c.is_ascii_uppercase())
        && w.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// clap's "invalid value 'N' for '--count <COUNT>'" about a placeholder:
/// the index of that value in argv.
fn placeholder_refused(argv: &[String], err: &str) -> Option<usize> {
    let rest = err.split("invalid value '").nth(1)?;
    let (value, rest) = rest.split_once("' for '")?;
    if !is_placeholder(value) {
        return None;
    }
    let flag = rest.split(['\'', ' ', '=']).next()?;
    (1..argv.len()).find(|&k| argv[k] == value && argv[k - 1] == flag)
}

/// None when exit 0, or (for a fragment of prose) when clap only missed a
/// required argument, a subcommand or a trailing flag's value.
fn parse_failure(argv: &[String], fragment: bool, code: Option<i32>, err: &str) -> Option<String> {
    if code == Some(0) {
        return None;
    }
    // clap's own words for what prose may leave out.
    let ends_with_flag = argv.last().is_some_and(|a| a.starts_with('-'));
    let omission = err.contains("the following required arguments were not provided")
        || err.contains("requires a subcommand but one was not provided")
        || (ends_with_flag && err.contains("a value is required for"));
    if fragment && code == Some(2) && omission {
        return None;
    }
    let msg: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(3)
        .collect();
    Some(format!("exit {code:?}: {}", msg.join(" / ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_names() {
        let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!(unknown_policies(&argv("reef-bench disb A --policy reef,fikit,aker,P")).is_empty());
        assert_eq!(
            unknown_policies(&argv("reefd start --policy=reeef")),
            vec!["reeef"]
        );
        assert_eq!(
            unknown_policies(&argv("reefctl --socket policy policy nope")),
            vec!["nope"]
        );
    }
}
