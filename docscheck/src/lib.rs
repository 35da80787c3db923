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

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

// ---------------------------------------------------------------- markdown

fn is_marker(l: &str) -> bool {
    l.trim() == SKIP_MARKER
}

/// Info strings of fenced blocks that hold no shell commands.
fn non_shell_block(info: &str) -> bool {
    let lang = info.split_whitespace().next().unwrap_or("");
    !matches!(
        lang,
        "" | "sh" | "bash" | "shell" | "console" | "text" | "shell-session"
    )
}

fn indent(l: &str) -> usize {
    l.len() - l.trim_start().len()
}

/// The snippets of a markdown text: logical lines of code blocks and inline
/// code spans.
pub fn snippets(md: &str) -> Vec<Snippet> {
    let lines: Vec<&str> = md.lines().collect();
    let mut out = Vec::new();
    // Paragraphs of prose, for inline spans: (first line index, lines).
    let mut para: Vec<(usize, &str)> = Vec::new();
    let mut skip_pending = false;
    let flush = |para: &mut Vec<(usize, &str)>, skip_pending: &mut bool, out: &mut Vec<_>| {
        if para.is_empty() {
            return;
        }
        let only_marker = para.iter().all(|(_, l)| is_marker(l));
        // The marker is a line of its own (a doc may quote it in prose).
        let has_marker = para.iter().any(|(_, l)| is_marker(l));
        if only_marker {
            *skip_pending = true;
        } else if has_marker || *skip_pending {
            *skip_pending = false;
        } else {
            inline_spans(para, out);
        }
        para.clear();
    };
    let mut i = 0;
    while i < lines.len() {
        let l = lines[i];
        let t = l.trim_start();
        if t.starts_with("```") || t.starts_with("~~~") {
            flush(&mut para, &mut skip_pending, &mut out);
            let fence = &t[..3];
            let info = t.trim_start_matches(fence.chars().next().unwrap()).trim();
            let start = i + 1;
            let mut j = start;
            while j < lines.len() && !lines[j].trim_start().starts_with(fence) {
                j += 1;
            }
            let end = j.min(lines.len());
            if !skip_pending && !non_shell_block(info) {
                block_snippets(&lines[start..end], start + 1, &mut out);
            }
            skip_pending = false;
            i = j + 1;
            continue;
        }
        if t.is_empty() {
            flush(&mut para, &mut skip_pending, &mut out);
            i += 1;
            continue;
        }
        // An indented code block: four spaces, after a blank line.
        let after_blank = i == 0 || lines[i - 1].trim().is_empty();
        if indent(l) >= 4 && after_blank && para.is_empty() {
            let start = i;
            while i < lines.len() && (indent(lines[i]) >= 4 || lines[i].trim().is_empty()) {
                i += 1;
            }
            if !skip_pending {
                block_snippets(&lines[start..i], start + 1, &mut out);
                // Inside a list, four spaces continue an item: its prose
                // keeps its inline spans.
                let lines_para: Vec<(usize, &str)> = (start..i).map(|n| (n, lines[n])).collect();
                inline_spans(&lines_para, &mut out);
            }
            skip_pending = false;
            continue;
        }
        para.push((i, l));
        i += 1;
    }
    flush(&mut para, &mut skip_pending, &mut out);
    out
}

/// Inline code spans of one paragraph; a span may run over line breaks.
fn inline_spans(para: &[(usize, &str)], out: &mut Vec<Snippet>) {
    let mut text = String::new();
    let mut starts = Vec::new(); // (byte offset, line index)
    for (n, l) in para {
        starts.push((text.len(), *n));
        text.push_str(l);
        text.push('\n');
    }
    let line_of = |off: usize| {
        starts
            .iter()
            .rev()
            .find(|(s, _)| *s <= off)
            .map_or(0, |(_, n)| *n)
    };
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let open = i;
        while i < b.len() && b[i] == b'`' {
            i += 1;
        }
        let n = i - open;
        // The closing run: exactly n backticks.
        let mut j = i;
        let mut close = None;
        while j < b.len() {
            if b[j] == b'`' {
                let s = j;
                while j < b.len() && b[j] == b'`' {
                    j += 1;
                }
                if j - s == n {
                    close = Some(s);
                    break;
                }
            } else {
                j += 1;
            }
        }
        // Without a closing run the backticks are literal.
        if let Some(c) = close {
            let content = text[i..c].replace('\n', " ");
            let content = content.trim();
            let line = line_of(open) + 1;
            let texts = if is_synopsis(content) {
                expand_synopsis(content)
            } else {
                vec![content.to_string()]
            };
            for text in texts {
                out.push(Snippet {
                    line,
                    text,
                    fragment: true,
                });
            }
            i = c + n;
        }
    }
}

/// The first word of a line (after a `$ ` prompt, assignments, `sudo`)
/// names one of the binaries.
fn heads_a_binary(line: &str) -> bool {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut k = 0;
    while k < words.len() && (is_assignment(words[k]) || words[k] == "sudo" || words[k] == "$") {
        k += 1;
    }
    words.get(k).is_some_and(|w| binary_name(w).is_some())
}

fn is_synopsis(line: &str) -> bool {
    heads_a_binary(line)
        && (line.split_whitespace().any(|w| {
            w.starts_with('[') || (w.contains('|') && !w.starts_with('|') && !w.ends_with('|'))
        }) || line.trim_end().ends_with(" COMMAND"))
}

/// Logical lines of a code block: `\` continuations joined; a synopsis
/// (`BIN [--flag X]` with indented continuation lines, or `BIN ... COMMAND`
/// with one indented subcommand per line) expanded.
fn block_snippets(lines: &[&str], first_line: usize, out: &mut Vec<Snippet>) {
    let mut k = 0;
    while k < lines.len() {
        let line_no = first_line + k;
        let mut logical = lines[k].to_string();
        while logical.trim_end().ends_with('\\') && k + 1 < lines.len() {
            let t = logical.trim_end();
            logical = format!("{} {}", &t[..t.len() - 1], lines[k + 1].trim());
            k += 1;
        }
        k += 1;
        let mut text = logical.trim().to_string();
        if let Some(rest) = text.strip_prefix("$ ") {
            text = rest.to_string();
        }
        if !is_synopsis(&text) {
            out.push(Snippet {
                line: line_no,
                text,
                fragment: false,
            });
            continue;
        }
        let base_indent = indent(lines[k - 1]);
        if let Some(head) = text.strip_suffix("COMMAND") {
            // One subcommand per indented line; text after a run of two
            // spaces is its description; deeper lines only describe.
            let mut sub_indent = None;
            while k < lines.len() && indent(lines[k]) > base_indent {
                let l = lines[k];
                let ind = indent(l);
                let si = *sub_indent.get_or_insert(ind);
                if ind == si {
                    let cmd = l.trim().split("  ").next().unwrap_or("").trim();
                    let mut prev_words: Vec<&str> = Vec::new();
                    for alt in cmd.split(" | ") {
                        let alt = alt.trim();
                        let full = if alt.starts_with('-') {
                            // `preempt --stream N | --all`: the same subcommand.
                            let lead: Vec<&str> = prev_words
                                .iter()
                                .copied()
                                .take_while(|w| !w.starts_with('-') && !w.starts_with('['))
                                .collect();
                            format!("{} {}", lead.join(" "), alt)
                        } else {
                            prev_words = alt.split_whitespace().collect();
                            alt.to_string()
                        };
                        for v in expand_synopsis(&format!("{} {}", head.trim(), full)) {
                            out.push(Snippet {
                                line: first_line + k,
                                text: v,
                                fragment: false,
                            });
                        }
                    }
                }
                k += 1;
            }
        } else {
            while k < lines.len()
                && indent(lines[k]) > base_indent
                && lines[k].trim_start().starts_with('[')
            {
                text.push(' ');
                text.push_str(lines[k].trim());
                k += 1;
            }
            for v in expand_synopsis(&text) {
                out.push(Snippet {
                    line: line_no,
                    text: v,
                    fragment: false,
                });
            }
        }
    }
}

/// A usage synopsis as concrete command lines: every optional `[...]` group
/// with its first alternative, then one line per further alternative of a
/// group (`[--metrics ADDR | --no-metrics]`) or of a word (`rt|be`).
pub fn expand_synopsis(text: &str) -> Vec<String> {
    enum Item {
        Word(String),
        Group(Vec<Vec<String>>),
    }
    let mut items = Vec::new();
    let mut words = text.split_whitespace().peekable();
    while let Some(w) = words.next() {
        if w == "..." || w == "…" {
            continue;
        }
        if let Some(first) = w.strip_prefix('[') {
            let mut group = vec![Vec::new()];
            let mut cur = first.to_string();
            loop {
                let closed = cur.ends_with(']');
                let word = cur.trim_end_matches(']').to_string();
                if word == "|" {
                    group.push(Vec::new());
                } else if !word.is_empty() && word != "..." && word != "…" {
                    group.last_mut().unwrap().push(word);
                }
                if closed {
                    break;
                }
                match words.next() {
                    Some(n) => cur = n.to_string(),
                    None => break,
                }
            }
            items.push(Item::Group(group));
        } else {
            items.push(Item::Word(w.to_string()));
        }
    }
    let plain = |items: &[Item], pick: Option<(usize, usize)>| -> Vec<String> {
        let mut v = Vec::new();
        for (gi, it) in items.iter().enumerate() {
            match it {
                Item::Word(w) => v.push(w.clone()),
                Item::Group(alts) => match pick {
                    None => v.extend(alts[0].iter().cloned()),
                    Some((g, a)) if g == gi => v.extend(alts[a].iter().cloned()),
                    Some(_) => {}
                },
            }
        }
        v
    };
    let mut variants = vec![plain(&items, None)];
    for (gi, it) in items.iter().enumerate() {
        if let Item::Group(alts) = it {
            for a in 1..alts.len() {
                variants.push(plain(&items, Some((gi, a))));
            }
        }
    }
    // Alternatives inside a word: `rt|be`, `NAME|PATH`.
    let mut out: Vec<String> = Vec::new();
    for v in variants {
        let first: Vec<String> = v
            .iter()
            .map(|w| w.split('|').next().unwrap_or("").to_string())
            .collect();
        out.push(first.join(" "));
        for (wi, w) in v.iter().enumerate() {
            for alt in w.split('|').skip(1) {
                let mut o = first.clone();
                o[wi] = alt.to_string();
                out.push(o.join(" "));
            }
        }
    }
    let mut seen = BTreeSet::new();
    out.retain(|s| seen.insert(s.clone()));
    out
}

// ---------------------------------------------------------------- shell

fn is_assignment(w: &str) -> bool {
    match w.split_once('=') {
        Some((name, _)) => {
            !name.is_empty()
                && name
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }
        None => false,
    }
}

/// The binary a command word runs: `reefd`, `$B/reefd`,
/// `target/release/reefd`, `./target/debug/reefd`, `/usr/bin/reefd`.
pub fn binary_name(word: &str) -> Option<&'static str> {
    let base = word.rsplit('/').next().unwrap_or(word);
    BINARIES.iter().copied().find(|b| *b == base)
}

/// `$VAR` and `${VAR}` replaced by a placeholder path.
fn substitute_vars(w: &str) -> String {
    let mut out = String::new();
    let mut chars = w.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('{') => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                out.push_str(VAR_PLACEHOLDER);
            }
            Some(c) if c.is_ascii_alphanumeric() || *c == '_' => {
                while chars
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                {
                    chars.next();
                }
                out.push_str(VAR_PLACEHOLDER);
            }
            _ => out.push('$'),
        }
    }
    out
}

/// Shell words of one line, split into simple commands at `;`, `&&`, `||`,
/// `|`, `&`, `(` and `)`; redirections and their targets dropped; a `#` at
/// the start of a word ends the line. A `|` between two non-blank characters
/// stays in its word (a synopsis's `a|b`).
pub fn shell_segments(line: &str) -> Vec<Vec<String>> {
    let mut segs: Vec<Vec<String>> = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut skip_next_word = false;
    let chars: Vec<char> = line.chars().collect();
    let end_word =
        |word: &mut String, in_word: &mut bool, skip: &mut bool, segs: &mut Vec<Vec<String>>| {
            if *in_word {
                if *skip {
                    *skip = false;
                } else {
                    segs.last_mut().unwrap().push(std::mem::take(word));
                }
            }
            word.clear();
            *in_word = false;
        };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' => end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segs),
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '"' => {
                in_word = true;
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    word.push(chars[i]);
                    i += 1;
                }
            }
            '\\' if i + 1 < chars.len() => {
                in_word = true;
                word.push(chars[i + 1]);
                i += 1;
            }
            '|' if in_word && i + 1 < chars.len() && !chars[i + 1].is_whitespace() => {
                word.push('|');
            }
            ';' | '&' | '|' | '(' | ')' => {
                end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segs);
                if c == '&' && chars.get(i + 1) == Some(&'>') {
                    // `&>file`
                    skip_next_word = true;
                    i += 1;
                } else {
                    segs.push(Vec::new());
                }
                while i + 1 < chars.len() && (chars[i + 1] == c) {
                    i += 1;
                }
            }
            '>' | '<' => {
                // `2>`: the descriptor is not a word.
                if in_word && word.chars().all(|c| c.is_ascii_digit()) {
                    word.clear();
                    in_word = false;
                } else {
                    end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segs);
                }
                while i + 1 < chars.len() && matches!(chars[i + 1], '>' | '<') {
                    i += 1;
                }
                if chars.get(i + 1) == Some(&'&') {
                    // `2>&1`
                    i += 1;
                    while i + 1 < chars.len() && chars[i + 1].is_ascii_digit() {
                        i += 1;
                    }
                } else {
                    skip_next_word = true;
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
        i += 1;
    }
    end_word(&mut word, &mut in_word, &mut skip_next_word, &mut segs);
    segs.retain(|s| !s.is_empty());
    segs
}

/// The commands a snippet runs that this check covers: the four binaries
/// with at least one argument, and `cargo`.
pub fn commands(s: &Snippet) -> Vec<DocCommand> {
    let mut out = Vec::new();
    for seg in shell_segments(&s.text) {
        let mut k = 0;
        while k < seg.len() {
            let w = seg[k].as_str();
            if is_assignment(w)
                || matches!(
                    w,
                    "sudo" | "time" | "do" | "then" | "else" | "env" | "exec" | "nohup"
                )
            {
                k += 1;
            } else if w == "/usr/bin/time" {
                k += 1;
                while k < seg.len() && seg[k].starts_with('-') {
                    k += if seg[k] == "-f" || seg[k] == "-o" {
                        2
                    } else {
                        1
                    };
                }
            } else {
                break;
            }
        }
        let Some(cmd) = seg.get(k) else { continue };
        let rest: Vec<String> = seg[k + 1..]
            .iter()
            .filter(|w| !matches!(w.as_str(), "..." | "…"))
            .map(|w| substitute_vars(w))
            .collect();
        if let Some(b) = binary_name(cmd) {
            if !rest.is_empty() {
                let mut argv = vec![b.to_string()];
                argv.extend(rest);
                out.push(DocCommand {
                    line: s.line,
                    argv,
                    fragment: s.fragment,
                });
            }
        } else if cmd == "cargo" && !rest.is_empty() {
            let mut argv = vec!["cargo".to_string()];
            argv.extend(rest);
            out.push(DocCommand {
                line: s.line,
                argv,
                fragment: s.fragment,
            });
        }
    }
    out
}

// ---------------------------------------------------------------- workspace

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
fn check_cargo(ws: &Workspace, argv: &[String]) -> (Vec<String>, Option<Vec<String>>) {
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

// ---------------------------------------------------------------- binaries

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

// ---------------------------------------------------------------- paths

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

// ---------------------------------------------------------------- the check

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

    fn argvs(md: &str) -> Vec<(usize, String, bool)> {
        snippets(md)
            .iter()
            .flat_map(commands)
            .map(|c| (c.line, c.argv.join(" "), c.fragment))
            .collect()
    }

    #[test]
    fn fenced_block_prefixes_env_continuations_and_chains() {
        let md = "text\n\n```sh\n\
B=target/release\n\
$B/reefd start --foreground --socket /tmp/r.sock &\n\
REEF_X=1 FOO=$PWD/a \\\n  sudo target/debug/reefctl --socket $PWD/s.sock stats --json   # comment\n\
./target/release/reef-bench disb A --json | head > out.txt; reef-check-idem M -o f 2>&1 && echo ok\n\
.venv/bin/reef-compile model.onnx -o x\n\
```\n";
        assert_eq!(
            argvs(md),
            vec![
                (
                    5,
                    "reefd start --foreground --socket /tmp/r.sock".into(),
                    false
                ),
                (
                    6,
                    format!("reefctl --socket {VAR_PLACEHOLDER}/s.sock stats --json"),
                    false
                ),
                (8, "reef-bench disb A --json".into(), false),
                (8, "reef-check-idem M -o f".into(), false),
            ]
        );
    }

    #[test]
    fn inline_spans_run_over_line_breaks_and_are_fragments() {
        let md = "Run `reef-bench dkp --duration\n2 --json` and `reefctl preempt`; `reefd` alone\nis a name, `cargo test -p reefd --test cli` a test.\n";
        assert_eq!(
            argvs(md),
            vec![
                (1, "reef-bench dkp --duration 2 --json".into(), true),
                (2, "reefctl preempt".into(), true),
                (3, "cargo test -p reefd --test cli".into(), true),
            ]
        );
    }

    #[test]
    fn non_shell_blocks_indented_blocks_and_the_marker() {
        let md = "```toml\nreefd = 1\n```\n\n    $ reef-bench simspeed\n\n\
<!-- docscheck: skip -->\n```\nreefd nonsense --x\n```\n\n\
<!-- docscheck: skip -->\nSee `reefd bogus`.\n\nBut `reefd stop`, quoting `<!-- docscheck: skip -->`.\n";
        assert_eq!(
            argvs(md),
            vec![
                (5, "reef-bench simspeed".into(), false),
                (15, "reefd stop".into(), true)
            ]
        );
    }

    #[test]
    fn synopses_expand_groups_and_alternatives() {
        assert_eq!(
            expand_synopsis(
                "reefd stop [--config FILE] [--metrics ADDR | --no-metrics] [--priority rt|be]"
            ),
            vec![
                "reefd stop --config FILE --metrics ADDR --priority rt",
                "reefd stop --config FILE --metrics ADDR --priority be",
                "reefd stop --no-metrics",
            ]
        );
        let md = "```\nreefctl [--socket PATH] COMMAND\n  status                 what it does\n                         more description\n  models list | models unload NAME\n  preempt --stream N | --all   stop\n```\n\n```\nreefd start [--config FILE]\n            [--foreground]\nreefd stop\n```\n";
        assert_eq!(
            argvs(md).into_iter().map(|(_, a, _)| a).collect::<Vec<_>>(),
            vec![
                "reefctl --socket PATH status",
                "reefctl --socket PATH models list",
                "reefctl --socket PATH models unload NAME",
                "reefctl --socket PATH preempt --stream N",
                "reefctl --socket PATH preempt --all",
                "reefd start --config FILE --foreground",
                "reefd stop",
            ]
        );
    }

    #[test]
    fn loops_time_and_cargo_run() {
        let md = "```sh\nfor m in a b; do reef-check-idem ../m/$m --json; done\n/usr/bin/time -f \"%e s\" reef-bench disb E\ncargo run --release -p reef-bench -- simspeed\n```\n";
        assert_eq!(
            argvs(md).into_iter().map(|(_, a, _)| a).collect::<Vec<_>>(),
            vec![
                format!("reef-check-idem ../m/{VAR_PLACEHOLDER} --json"),
                "reef-bench disb E".into(),
                "cargo run --release -p reef-bench -- simspeed".into(),
            ]
        );
    }

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
