//! The user documentation stays true to the repository and to the binary: every relative link in
//! `README.md`, `CONTRIBUTING.md`, `bench/RESULTS.md` and `docs/**/*.md` names a file that exists
//! (and, with `#anchor`, a heading of that markdown file), no link leaves the repository, and every
//! `kube-lb <subcommand>` and every `--flag` after it, in inline code or a code block, is one the
//! built binary lists in that subcommand's `--help`. A failure lists every broken link and flag.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The markdown files the check covers, relative to the repository root.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files: Vec<PathBuf> = ["README.md", "CONTRIBUTING.md", "bench/RESULTS.md"]
        .iter()
        .map(PathBuf::from)
        .filter(|p| root.join(p).is_file())
        .collect();
    let mut stack = vec![root.join("docs")];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path.strip_prefix(&root).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

/// One markdown file split into prose lines (inline code kept) and code lines.
struct Parsed {
    /// (line number, text) of lines outside code blocks.
    prose: Vec<(usize, String)>,
    /// (line number, text) of lines inside fenced or indented code blocks.
    code: Vec<(usize, String)>,
}

fn split(text: &str) -> Parsed {
    let mut prose = Vec::new();
    let mut code = Vec::new();
    let mut fenced = false;
    let mut indented = false;
    let mut previous_blank = true;
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            previous_blank = false;
            continue;
        }
        if fenced {
            code.push((n, line.to_string()));
            continue;
        }
        let is_indented = line.starts_with("    ") || line.starts_with('\t');
        if is_indented && (indented || previous_blank) && !trimmed.is_empty() {
            indented = true;
            code.push((n, line.to_string()));
            previous_blank = false;
            continue;
        }
        if trimmed.is_empty() {
            previous_blank = true;
            // a blank line inside an indented block does not end it; the next prose line does
            continue;
        }
        indented = false;
        previous_blank = false;
        prose.push((n, line.to_string()));
    }
    Parsed { prose, code }
}

/// The inline code spans of one prose line.
fn inline_code(line: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let after = &rest[start..];
        let ticks = after.chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(ticks);
        let body = &after[ticks..];
        match body.find(&fence) {
            Some(end) => {
                spans.push(body[..end].to_string());
                rest = &body[end + ticks..];
            }
            None => break,
        }
    }
    spans
}

/// A prose line with its inline code removed, so that a link written as code is not a link.
fn without_code(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let after = &rest[start..];
        let ticks = after.chars().take_while(|c| *c == '`').count();
        let fence = "`".repeat(ticks);
        let body = &after[ticks..];
        match body.find(&fence) {
            Some(end) => rest = &body[end + ticks..],
            None => {
                rest = "";
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Link targets `[text](target)` and `![alt](target)` of a prose line.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code(line);
    let mut targets = Vec::new();
    let mut rest = line.as_str();
    while let Some(pos) = rest.find("](") {
        let after = &rest[pos + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        let target = after[..end].trim();
        // `[x](path "title")`
        let target = target.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        if !target.is_empty() {
            targets.push(target.to_string());
        }
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes.
fn slug(heading: &str) -> String {
    heading
        .replace('`', "")
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else if c == ' ' {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

/// Every anchor a markdown file offers (duplicates numbered as GitHub numbers them).
fn anchors(text: &str) -> BTreeSet<String> {
    let parsed = split(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in parsed.prose {
        let trimmed = line.trim_start();
        if !trimmed.starts_with('#') {
            continue;
        }
        let heading = trimmed.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let base = slug(heading);
        let count = seen.entry(base.clone()).or_insert(0);
        let anchor = if *count == 0 {
            base.clone()
        } else {
            format!("{base}-{count}")
        };
        *count += 1;
        out.insert(anchor);
    }
    out
}

/// `path` with `.` and `..` resolved lexically; `None` when it climbs above the start.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(part) => out.push(part),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn check_links(doc: &Path, text: &str, broken: &mut Vec<String>) {
    let root = root();
    let dir = doc.parent().unwrap_or(Path::new(""));
    for (n, line) in split(text).prose {
        for target in link_targets(&line) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            if path.is_empty() {
                // an anchor of this very document
                if let Some(anchor) = anchor
                    && !anchors(text).contains(anchor)
                {
                    broken.push(format!(
                        "{}:{n}: link `{target}`: no heading `#{anchor}` in this file",
                        doc.display()
                    ));
                }
                continue;
            }
            let resolved = normalise(&dir.join(path));
            let Some(resolved) = resolved else {
                broken.push(format!(
                    "{}:{n}: link `{target}` leaves the repository",
                    doc.display()
                ));
                continue;
            };
            let full = root.join(&resolved);
            if !full.exists() {
                broken.push(format!(
                    "{}:{n}: link `{target}`: {} does not exist",
                    doc.display(),
                    resolved.display()
                ));
                continue;
            }
            if let Some(anchor) = anchor
                && full.extension().is_some_and(|e| e == "md")
            {
                let content = std::fs::read_to_string(&full).unwrap_or_default();
                if !anchors(&content).contains(anchor) {
                    broken.push(format!(
                        "{}:{n}: link `{target}`: no heading `#{anchor}` in {}",
                        doc.display(),
                        resolved.display()
                    ));
                }
            }
        }
    }
}

/// The subcommands and each one's long flags, read from the built binary's `--help`.
fn binary_flags() -> BTreeMap<String, BTreeSet<String>> {
    let bin = env!("CARGO_BIN_EXE_kube-lb");
    let help = |args: &[&str]| {
        let out = Command::new(bin)
            .args(args)
            .env("NO_COLOR", "1")
            .output()
            .expect("run kube-lb --help");
        assert!(out.status.success(), "kube-lb {args:?} failed");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let top = help(&["--help"]);
    let mut subcommands = Vec::new();
    let mut in_commands = false;
    for line in top.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if in_commands {
            if !line.starts_with("  ") {
                break;
            }
            if let Some(name) = line.split_whitespace().next()
                && name != "help"
            {
                subcommands.push(name.to_string());
            }
        }
    }
    assert!(
        subcommands.len() >= 5,
        "could not read the subcommands from kube-lb --help:\n{top}"
    );
    let global = option_names(&top);
    subcommands
        .into_iter()
        .map(|sub| {
            let mut flags = option_names(&help(&[&sub, "--help"]));
            flags.extend(global.iter().cloned());
            (sub, flags)
        })
        .collect()
}

/// Long option names on clap's option lines (`  -f, --filename <PATH>`, `      --demo`).
fn option_names(help: &str) -> BTreeSet<String> {
    help.lines()
        .filter_map(|line| {
            let t = line.trim_start();
            let t = if t.starts_with('-') && !t.starts_with("--") {
                // `-f, --filename`
                t.split_once(", ").map(|(_, rest)| rest).unwrap_or("")
            } else {
                t
            };
            let name = t.strip_prefix("--")?;
            let name: String = name
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty()).then_some(name)
        })
        .collect()
}

/// Removes `<placeholder>` text (which may hold `|` or spaces) and markdown-table escapes.
fn strip_placeholders(text: &str) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        match c {
            '<' => depth += 1,
            '>' if depth > 0 => {
                depth -= 1;
                out.push_str(" X ");
            }
            _ if depth > 0 => {}
            _ => out.push(c),
        }
    }
    out.replace("\\|", " ")
}

/// True when the token before a word puts that word where a shell runs a command: after a
/// prompt, a pipe or list operator, `sudo`, or an environment assignment.
fn at_command_position(previous: &str) -> bool {
    matches!(
        previous,
        "$" | "|" | "||" | "&&" | ";" | "sudo" | "(" | "$(" | "time"
    ) || previous.ends_with(';')
        || (previous.contains('=')
            && previous.split('=').next().is_some_and(|name| {
                !name.is_empty()
                    && name
                        .chars()
                        .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            }))
}

/// The invocations of the binary in one piece of code: (subcommand, the tokens after it up to the
/// end of the shell command).
fn invocations(code: &str) -> Vec<(String, Vec<String>)> {
    let code = strip_placeholders(code);
    let tokens: Vec<&str> = code.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i];
        let word = t.trim_start_matches(['(', '[', '$']);
        // only where a shell would run it: `kube-lb tries again` in a message is prose
        let is_binary = (word == "kube-lb" || word.ends_with("/kube-lb"))
            && (i == 0 || at_command_position(tokens[i - 1]));
        // `cargo run [--release] [--features x] -- <sub>` runs the binary; `-p <crate>` does not
        let is_cargo_run = word == "cargo" && tokens.get(i + 1) == Some(&"run");
        let start = if is_binary {
            Some(i + 1)
        } else if is_cargo_run {
            let end = tokens[i..].iter().position(|t| *t == "--").map(|p| i + p);
            match end {
                Some(end) if !tokens[i..end].contains(&"-p") => Some(end + 1),
                _ => None,
            }
        } else {
            None
        };
        let Some(start) = start else {
            i += 1;
            continue;
        };
        let Some(sub) = tokens.get(start) else {
            break;
        };
        let sub = sub.trim_end_matches([')', ']', ',', '.', ';', ':']);
        if sub.is_empty() || !sub.chars().all(|c| c.is_ascii_lowercase()) || sub == "x" {
            i = start;
            continue;
        }
        let mut args = Vec::new();
        let mut j = start + 1;
        while j < tokens.len() {
            let t = tokens[j];
            if matches!(t, "|" | "||" | "&&" | "&" | ";" | "#") || t.starts_with('#') {
                break;
            }
            args.push(t.to_string());
            if t.ends_with(';') || t.ends_with('&') {
                break;
            }
            j += 1;
        }
        out.push((sub.to_string(), args));
        i = j;
    }
    out
}

fn check_commands(
    doc: &Path,
    text: &str,
    flags: &BTreeMap<String, BTreeSet<String>>,
    broken: &mut Vec<String>,
) {
    let parsed = split(text);
    let mut pieces: Vec<(usize, String)> = Vec::new();
    for (n, line) in &parsed.prose {
        for span in inline_code(line) {
            pieces.push((*n, span));
        }
    }
    // join a code block's continuation lines (`\` at the end) into one command
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in &parsed.code {
        let trimmed = line.trim_end();
        let (body, continues) = match trimmed.strip_suffix('\\') {
            Some(body) => (body.to_string(), true),
            None => (trimmed.to_string(), false),
        };
        match pending.as_mut() {
            Some((_, acc)) => {
                acc.push(' ');
                acc.push_str(&body);
            }
            None => pending = Some((*n, body)),
        }
        if !continues && let Some(piece) = pending.take() {
            pieces.push(piece);
        }
    }
    pieces.extend(pending);
    for (n, piece) in pieces {
        for (sub, args) in invocations(&piece) {
            let Some(known) = flags.get(&sub) else {
                broken.push(format!(
                    "{}:{n}: `kube-lb {sub}`: no such subcommand (kube-lb --help lists {})",
                    doc.display(),
                    flags.keys().cloned().collect::<Vec<_>>().join(", ")
                ));
                continue;
            };
            for arg in args {
                let arg = arg.trim_start_matches(['(', '[']);
                let Some(name) = arg.strip_prefix("--") else {
                    continue;
                };
                let name: String = name
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                    .collect();
                if name.is_empty() {
                    continue;
                }
                if !known.contains(&name) {
                    broken.push(format!(
                        "{}:{n}: `kube-lb {sub} --{name}`: not in `kube-lb {sub} --help`",
                        doc.display()
                    ));
                }
            }
        }
    }
}

#[test]
fn docs_links_and_flags_resolve() {
    let root = root();
    let docs = documents();
    assert!(
        docs.iter().any(|d| d == Path::new("README.md")),
        "README.md not found"
    );
    assert!(
        docs.iter().any(|d| d.starts_with("docs")),
        "no page under docs/"
    );
    let flags = binary_flags();
    let mut broken = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        check_links(doc, &text, &mut broken);
        check_commands(doc, &text, &flags, &mut broken);
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s) or flag(s) in the documentation:\n{}",
        broken.len(),
        broken.join("\n")
    );
}

#[test]
fn docs_links_checker_finds_what_is_broken() {
    // The checker itself: a missing file, a missing anchor, a link out of the repository and an
    // unknown flag are all reported.
    let doc = Path::new("docs/example.md");
    let text = "# Title here\n\nSee [a](missing.md), [b](../README.md#no-such-heading), \
                [c](../../outside.md), [d](#title-here), [e](#nowhere).\n\n    kube-lb lint --no-such-flag -f x\n";
    let mut broken = Vec::new();
    check_links(doc, text, &mut broken);
    assert_eq!(broken.len(), 4, "{broken:?}");
    assert!(broken[0].contains("missing.md"), "{broken:?}");
    assert!(
        broken[1].contains("no heading `#no-such-heading`"),
        "{broken:?}"
    );
    assert!(broken[2].contains("leaves the repository"), "{broken:?}");
    assert!(broken[3].contains("`#nowhere`"), "{broken:?}");
    let mut anchors_broken = Vec::new();
    check_links(
        Path::new("README.md"),
        "[x](README.md#no-such-heading)\n",
        &mut anchors_broken,
    );
    assert_eq!(anchors_broken.len(), 1, "{anchors_broken:?}");
    // an unknown subcommand where a shell runs it is reported; the word in a message is not
    let mut sub_broken = Vec::new();
    let flags_all = BTreeMap::from([("lint".to_string(), BTreeSet::new())]);
    check_commands(
        doc,
        "    $ kube-lb lnit -f x\n    message: kube-lb tries again later\n",
        &flags_all,
        &mut sub_broken,
    );
    assert_eq!(sub_broken.len(), 1, "{sub_broken:?}");
    assert!(sub_broken[0].contains("kube-lb lnit"), "{sub_broken:?}");
    let flags = BTreeMap::from([("lint".to_string(), BTreeSet::from(["filename".to_string()]))]);
    let mut flag_broken = Vec::new();
    check_commands(doc, text, &flags, &mut flag_broken);
    assert_eq!(flag_broken.len(), 1, "{flag_broken:?}");
    assert!(flag_broken[0].contains("--no-such-flag"), "{flag_broken:?}");
    assert_eq!(
        slug("Why is my Service `<pending>`?"),
        "why-is-my-service-pending"
    );
}
