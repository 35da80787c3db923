//! The check of whole docs: every command line and test path of each doc,
//! collected into a report.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use crate::binaries::unknown_policies;
use crate::binaries::Binaries;
use crate::cargo::{check_cargo, Workspace};
use crate::markdown::snippets;
use crate::shell::commands;
use crate::Failure;

/// `tests/NAME.rs` paths (with or without a crate directory) that do not
/// exist: (line, path).
pub fn missing_test_paths(ws: &Workspace, md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/');
    for (n, l) in md.lines().enumerate() {
        for run in l.split(|c: char| !ok(c)) {
            let run = run.trim_end_matches('.');
            if !run.ends_with(".rs") {
                continue;
            }
            let Some(pos) = run.find("tests/") else {
                continue;
            };
            if pos > 0 && !run[..pos].ends_with('/') {
                continue;
            }
            let exists = if pos == 0 {
                ws.root.join(run).is_file() || ws.members.iter().any(|m| m.dir.join(run).is_file())
            } else {
                let prefix = run[..pos].trim_end_matches('/');
                if ws.members.iter().any(|m| m.dir == ws.root.join(prefix)) {
                    ws.root.join(run).is_file()
                } else {
                    true // not a path into this workspace (../shared/...)
                }
            };
            if !exists {
                out.push((n + 1, run.to_string()));
            }
        }
    }
    out
}

/// What a check of some docs found.
#[derive(Debug, Default)]
pub struct Report {
    /// Distinct command lines run or checked.
    pub commands: usize,
    pub failures: Vec<Failure>,
}

/// Checks the given docs.
pub fn check_docs(ws: &Workspace, docs: &[PathBuf], bins: &Binaries) -> Report {
    let mut failures = Vec::new();
    let mut commands_checked = 0;
    for doc in docs {
        let md = match fs::read_to_string(doc) {
            Ok(s) => s,
            Err(e) => {
                failures.push(Failure {
                    file: doc.clone(),
                    line: 0,
                    what: String::new(),
                    why: format!("cannot read: {e}"),
                });
                continue;
            }
        };
        for (line, path) in missing_test_paths(ws, &md) {
            failures.push(Failure {
                file: doc.clone(),
                line,
                what: path.clone(),
                why: "no such test file".into(),
            });
        }
        let mut seen = BTreeSet::new();
        for s in snippets(&md) {
            for c in commands(&s) {
                if !seen.insert((c.argv.clone(), c.fragment)) {
                    continue;
                }
                commands_checked += 1;
                // REEF_DOCSCHECK_LIST=1: say what is checked.
                if std::env::var_os("REEF_DOCSCHECK_LIST").is_some() {
                    eprintln!(
                        "{}:{}: {}{}",
                        doc.display(),
                        c.line,
                        c.argv.join(" "),
                        if c.fragment { "  (inline)" } else { "" }
                    );
                }
                let what = c.argv.join(" ");
                let mut fail = |why: String| {
                    failures.push(Failure {
                        file: doc.clone(),
                        line: c.line,
                        what: what.clone(),
                        why,
                    })
                };
                if c.argv[0] == "cargo" {
                    let (errors, run) = check_cargo(ws, &c.argv);
                    errors.into_iter().for_each(&mut fail);
                    if let Some(run) = run {
                        if let Some(e) = bins.check(&run, c.fragment) {
                            fail(e);
                        }
                    }
                } else if let Some(e) = bins.check(&c.argv, c.fragment) {
                    fail(e);
                } else {
                    let unknown = unknown_policies(&c.argv);
                    if !unknown.is_empty() {
                        fail(format!("no such policy: {}", unknown.join(", ")));
                    }
                }
            }
        }
    }
    Report {
        commands: commands_checked,
        failures,
    }
}

/// README.md and docs/*.md of a checkout.
pub fn doc_files(root: &Path) -> Vec<PathBuf> {
    let mut v = vec![root.join("README.md")];
    if let Ok(rd) = fs::read_dir(root.join("docs")) {
        let mut d: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        d.sort();
        v.extend(d);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn ws() -> Workspace {
        Workspace::load(Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()).unwrap()
    }

    #[test]
    fn test_paths() {
        let ws = ws();
        let md = "see reefd/tests/cli.rs, `tests/cli.rs` and sched/tests/nope.rs.\n\nand tests/gone.rs; ../shared/x/tests/y.rs\n";
        assert_eq!(
            missing_test_paths(&ws, md),
            vec![
                (1, "sched/tests/nope.rs".into()),
                (3, "tests/gone.rs".into())
            ]
        );
    }
}
