//! Shell: a snippet's lines reduced to argv the way a shell would
//! (prompts, continuations, comments, assignments, chains, redirections).

use crate::{DocCommand, Snippet, BINARIES, VAR_PLACEHOLDER};

pub(crate) fn is_assignment(w: &str) -> bool {
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
