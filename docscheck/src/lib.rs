//! Keeps the docs honest (issue 24 item 4): every command line README.md and
//! docs/*.md show for `reefd`, `reefctl`, `reef-bench` and `reef-check-idem`
//! still parses, every `cargo test|bench --test|--bench NAME` names a target
//! that exists (and a test-name filter matches something in it), every
//! `-p PKG` names a workspace member, every policy name given to
//! `--policy` or `reefctl policy` is one the scheduler knows (clap takes
//! those as free strings), and every `tests/*.rs` path the docs mention
//! exists.
//!
//! Where commands come from: fenced code blocks (shell, console or no
//! language), indented code blocks, and inline code spans, a span allowed to
//! run over a line break. A command's own syntax is reduced to argv the way a
//! shell would: `$ ` prompts, `\` continuations, `#` comments, leading
//! `NAME=value` assignments, `sudo`/`time`, `;`/`&&`/`||`/`|`/`&` chains and
//! `>`/`<` redirections are handled; `$VAR` becomes a placeholder path. A
//! usage synopsis (`reefd stop [--config FILE] [--timeout SECONDS]`, `a|b`
//! alternatives, a `COMMAND` list below its head) becomes one command with
//! every optional group plus one per further alternative.
//!
//! How a binary is checked: run with `REEF_PARSE_ONLY=1`, which makes each of
//! the four exit 0 right after clap accepted the command line (clap exits 2
//! on a parse error). An inline span is a fragment of prose, so it may leave
//! out required arguments (`reefctl preempt`) or a trailing flag's value
//! (`reef-bench disb --qos-x`); a code block may not.
//!
//! An exemption is explicit in the doc: a line `<!-- docscheck: skip -->`
//! exempts the next code block or paragraph (or the paragraph it is in).
//!
//! One module per job: `markdown` finds the snippets of a doc (code blocks,
//! inline spans, synopses), `shell` reduces a snippet to argv, `cargo`
//! knows the workspace's members and targets and checks `cargo` command
//! lines, `binaries` runs a command line parse-only and checks policy
//! names, `report` checks whole docs (and the test paths they name).

mod binaries;
mod cargo;
mod markdown;
mod report;
mod shell;

use std::path::PathBuf;

pub use binaries::{is_placeholder, known_policy, unknown_policies, Binaries};
pub use cargo::{Member, Workspace};
pub use markdown::{expand_synopsis, snippets};
pub use report::{check_docs, doc_files, missing_test_paths, Report};
pub use shell::{binary_name, commands, shell_segments};

/// The binaries whose command lines are run (parse only).
pub const BINARIES: [&str; 4] = ["reefd", "reefctl", "reef-bench", "reef-check-idem"];
/// The doc's own exemption marker.
pub const SKIP_MARKER: &str = "<!-- docscheck: skip -->";
/// What `$PWD`, `$B` and other shell variables become.
pub const VAR_PLACEHOLDER: &str = "/docscheck-var";

/// A piece of a doc that may hold command lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snippet {
    /// 1-based line of the doc where it starts.
    pub line: usize,
    pub text: String,
    /// An inline code span: prose may leave out required arguments.
    pub fragment: bool,
}

/// A command line found in a doc, as argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocCommand {
    pub line: usize,
    pub argv: Vec<String>,
    pub fragment: bool,
}

/// One way a doc is stale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub file: PathBuf,
    pub line: usize,
    pub what: String,
    pub why: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{}: `{}`: {}",
            self.file.display(),
            self.line,
            self.what,
            self.why
        )
    }
}
