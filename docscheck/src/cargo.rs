//! Cargo: the workspace's members and their test and bench targets, and the
//! check of a `cargo test|bench|run` command line against them.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::BINARIES;

/// A workspace member and its test and bench targets.
#[derive(Debug, Clone)]
pub struct Member {
    pub name: String,
    pub dir: PathBuf,
    pub tests: BTreeSet<String>,
    pub benches: BTreeSet<String>,
    pub bins: BTreeSet<String>,
}

#[derive(Debug, Clone)]
pub struct Workspace {
    pub root: PathBuf,
    pub members: Vec<Member>,
}

fn toml_string(line: &str, key: &str) -> Option<String> {
    let (k, v) = line.split_once('=')?;
    if k.trim() != key {
        return None;
    }
    let v = v.trim();
    Some(v.strip_prefix('"')?.split('"').next()?.to_string())
}

fn target_stems(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "rs") {
                out.insert(p.file_stem().unwrap().to_string_lossy().into_owned());
            } else if p.join("main.rs").is_file() {
                out.insert(p.file_name().unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out
}

impl Workspace {
    /// Reads the root Cargo.toml's `members` and each member's manifest.
    pub fn load(root: &Path) -> std::io::Result<Workspace> {
        let manifest = fs::read_to_string(root.join("Cargo.toml"))?;
        let mut dirs = Vec::new();
        let mut in_members = false;
        for l in manifest.lines() {
            let t = l.trim();
            if t.starts_with("members") {
                in_members = true;
            }
            if in_members {
                for (n, part) in t.split('"').enumerate() {
                    if n % 2 == 1 {
                        dirs.push(part.to_string());
                    }
                }
                if t.contains(']') {
                    in_members = false;
                }
            }
        }
        let mut members = Vec::new();
        for d in dirs {
            let dir = root.join(&d);
            let m = fs::read_to_string(dir.join("Cargo.toml"))?;
            let mut section = String::new();
            let mut name = d.clone();
            let mut tests = target_stems(&dir.join("tests"));
            let mut benches = target_stems(&dir.join("benches"));
            let mut bins = BTreeSet::new();
            for l in m.lines() {
                let t = l.trim();
                if t.starts_with('[') {
                    section = t.to_string();
                    continue;
                }
                if let Some(v) = toml_string(t, "name") {
                    match section.as_str() {
                        "[package]" => name = v,
                        "[[test]]" => {
                            tests.insert(v);
                        }
                        "[[bench]]" => {
                            benches.insert(v);
                        }
                        "[[bin]]" => {
                            bins.insert(v);
                        }
                        _ => {}
                    }
                }
            }
            members.push(Member {
                name,
                dir,
                tests,
                benches,
                bins,
            });
        }
        Ok(Workspace {
            root: root.to_path_buf(),
            members,
        })
    }

    pub fn member(&self, name: &str) -> Option<&Member> {
        self.members.iter().find(|m| m.name == name)
    }
}

/// Whether `needle` occurs in a `.rs` file (or its path) under `dirs`.
fn occurs_in_sources(dirs: &[PathBuf], needle: &str) -> bool {
    fn walk(p: &Path, needle: &str) -> bool {
        if p.is_dir() {
            let Ok(rd) = fs::read_dir(p) else {
                return false;
            };
            return rd.flatten().any(|e| walk(&e.path(), needle));
        }
        p.extension().is_some_and(|x| x == "rs")
            && (p.to_string_lossy().contains(needle)
                || fs::read_to_string(p).is_ok_and(|s| s.contains(needle)))
    }
    dirs.iter().any(|d| walk(d, needle))
}

/// `cargo test|bench|run|build|clippy ...`: every `-p` is a member, every
/// `--test`/`--bench` a target of one of them, a name filter matches text in
/// those targets; `cargo run ... -- ARGS` also yields the binary's argv.
pub(crate) fn check_cargo(ws: &Workspace, argv: &[String]) -> (Vec<String>, Option<Vec<String>>) {
    let mut errors = Vec::new();
    let sub = argv.get(1).map(String::as_str).unwrap_or("");
    let mut pkgs = Vec::new();
    let mut tests = Vec::new();
    let mut benches = Vec::new();
    let mut bin = None;
    let mut filters = Vec::new();
    let mut after = None;
    let mut workspace = false;
    let mut i = 2;
    let value = |i: &mut usize, w: &str, flag: &str| -> Option<String> {
        if w == flag {
            *i += 1;
            argv.get(*i).cloned()
        } else {
            w.strip_prefix(&format!("{flag}=")).map(str::to_string)
        }
    };
    while i < argv.len() {
        let w = argv[i].as_str();
        if w == "--" {
            after = Some(argv[i + 1..].to_vec());
            break;
        }
        if let Some(v) = value(&mut i, w, "-p").or_else(|| value(&mut i, w, "--package")) {
            pkgs.push(v);
        } else if let Some(v) = value(&mut i, w, "--test") {
            tests.push(v);
        } else if let Some(v) = value(&mut i, w, "--bench") {
            benches.push(v);
        } else if let Some(v) = value(&mut i, w, "--bin") {
            bin = Some(v);
        } else if matches!(w, "--workspace" | "--all") {
            workspace = true;
        } else if matches!(
            w,
            "--features" | "-F" | "--target" | "--profile" | "-j" | "--jobs" | "--manifest-path"
        ) {
            i += 1;
        } else if !w.starts_with('-') {
            filters.push(w.to_string());
        }
        i += 1;
    }
    for p in &pkgs {
        if ws.member(p).is_none() {
            errors.push(format!("no workspace member is named {p}"));
        }
    }
    let selected: Vec<&Member> = if pkgs.is_empty() || workspace {
        ws.members.iter().collect()
    } else {
        pkgs.iter().filter_map(|p| ws.member(p)).collect()
    };
    let where_ = if pkgs.is_empty() {
        "the workspace".to_string()
    } else {
        pkgs.join(", ")
    };
    for t in &tests {
        if !selected.iter().any(|m| m.tests.contains(t)) {
            errors.push(format!(
                "no integration test {t} in {where_} (no tests/{t}.rs, no [[test]] named {t})"
            ));
        }
    }
    for b in &benches {
        if !selected.iter().any(|m| m.benches.contains(b)) {
            errors.push(format!(
                "no bench {b} in {where_} (no benches/{b}.rs, no [[bench]] named {b})"
            ));
        }
    }
    if matches!(sub, "test" | "bench") {
        // A test-name filter must match something in what runs.
        let mut dirs = Vec::new();
        for m in &selected {
            let named = if sub == "test" { &tests } else { &benches };
            let sub_dir = if sub == "test" { "tests" } else { "benches" };
            if named.is_empty() {
                dirs.push(m.dir.join("src"));
                dirs.push(m.dir.join(sub_dir));
            } else {
                for t in named {
                    dirs.push(m.dir.join(sub_dir).join(format!("{t}.rs")));
                    dirs.push(m.dir.join(sub_dir).join(t));
                }
            }
        }
        for f in &filters {
            if !occurs_in_sources(&dirs, f) {
                errors.push(format!(
                    "the test filter {f} matches no test of {where_}{}",
                    if tests.is_empty() {
                        String::new()
                    } else {
                        format!(" --test {}", tests.join(" --test "))
                    }
                ));
            }
        }
    }
    let mut run_argv = None;
    if sub == "run" {
        let bin = bin.or_else(|| match selected.as_slice() {
            [m] if m.bins.len() == 1 => m.bins.iter().next().cloned(),
            _ => None,
        });
        if let (Some(b), Some(a)) = (bin, after) {
            if BINARIES.contains(&b.as_str()) {
                let mut v = vec![b];
                v.extend(a);
                run_argv = Some(v);
            }
        }
    }
    (errors, run_argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> Workspace {
        Workspace::load(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()).unwrap()
    }

    #[test]
    fn cargo_targets_and_filters() {
        let ws = ws();
        let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert!(check_cargo(&ws, &argv("cargo test -p reefd --test cli"))
            .0
            .is_empty());
        assert!(check_cargo(&ws, &argv("cargo test --test cli"))
            .0
            .is_empty());
        assert!(
            check_cargo(&ws, &argv("cargo bench -p reefd --bench control_path"))
                .0
                .is_empty()
        );
        let e = check_cargo(&ws, &argv("cargo test -p reefd --test no_such_test")).0;
        assert_eq!(e.len(), 1, "{e:?}");
        assert!(e[0].contains("no integration test no_such_test in reefd"));
        assert_eq!(
            check_cargo(&ws, &argv("cargo test -p reef-nope")).0.len(),
            1
        );
        assert_eq!(
            check_cargo(&ws, &argv("cargo test -p reefd --test cli no_such_fn_xyz"))
                .0
                .len(),
            1
        );
        assert_eq!(
            check_cargo(&ws, &argv("cargo run -p reef-bench -- disb A")).1,
            Some(argv("reef-bench disb A"))
        );
    }
}
