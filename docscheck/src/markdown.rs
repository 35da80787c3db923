//! Markdown: the snippets of a doc that may hold command lines (code
//! blocks, inline code spans) and usage synopses expanded into command lines.

use std::collections::BTreeSet;

use crate::shell::{binary_name, is_assignment};
use crate::{Snippet, SKIP_MARKER};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell::commands;
    use crate::VAR_PLACEHOLDER;

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
}
