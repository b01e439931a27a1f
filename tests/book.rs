//! The book (`docs/`, an mdBook) and the README, its front page. mdBook
//! checks no link, so this does: every relative link of README.md and of
//! `docs/src` leads to a file (for the book, one inside `docs/src`, the only
//! files the built book has), and every `#anchor` to a heading of the target
//! page, by mdBook's rule for heading ids. Every page is in SUMMARY.md, the
//! README stays a front page, and the troubleshooting page names every
//! reason the controller writes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn book_src() -> PathBuf {
    repo().join("docs/src")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every Markdown file of the book's sources, sorted.
fn book_pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut pages = Vec::new();
    walk(&book_src(), &mut pages);
    pages.sort();
    pages
}

/// The text with fenced code blocks and inline code spans blanked out
/// (newlines kept, so line numbers still hold): links and headings there
/// are examples, not links.
fn without_code(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut fence: Option<&str> = None;
    for line in text.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let marker = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m));
        match (fence, marker) {
            (None, Some(m)) => fence = Some(m),
            (Some(open), Some(m)) if open == m => fence = None,
            _ => {}
        }
        if fence.is_some() || marker.is_some() {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    // Inline code: a run of backticks up to the same run (it may span lines).
    let chars: Vec<char> = out.chars().collect();
    let mut result = String::with_capacity(out.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            result.push(chars[i]);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|&&c| c == '`').count();
        let close = (i + run..chars.len()).find(|&j| {
            chars[j..].iter().take_while(|&&c| c == '`').count() == run
                && (j == 0 || chars[j - 1] != '`')
        });
        let Some(close) = close else {
            result.extend(&chars[i..i + run]);
            i += run;
            continue;
        };
        for &c in &chars[i..close + run] {
            result.push(if c == '\n' { '\n' } else { ' ' });
        }
        i = close + run;
    }
    result
}

/// Every inline link's target, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let text = without_code(text);
    let mut found = Vec::new();
    let mut rest = text.as_str();
    let mut offset = 0;
    while let Some(at) = rest.find("](") {
        let start = at + 2;
        let Some(len) = rest[start..].find(')') else {
            break;
        };
        let target = rest[start..start + len].trim();
        // `[text](target "title")`: the title is not part of the target.
        let target = target.split_whitespace().next().unwrap_or_default();
        let line = text[..offset + at].matches('\n').count() + 1;
        found.push((line, target.to_string()));
        offset += start + len;
        rest = &rest[start + len..];
    }
    found
}

/// mdBook's id of a heading: its text without markup, lowercase, spaces
/// to `-`, every other character but letters, digits, `_` and `-` dropped.
fn heading_id(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    // `[words](target)` shows as `words`.
    while let Some(open) = rest.find('[') {
        text.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match (after.find("]("), after.find(')')) {
            (Some(close), Some(end)) if close < end => {
                text.push_str(&after[..close]);
                rest = &after[end + 1..];
            }
            _ => {
                text.push('[');
                rest = after;
            }
        }
    }
    text.push_str(rest);
    text.chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c.is_whitespace() {
                Some("-".to_string())
            } else {
                None
            }
        })
        .collect()
}

/// The ids of a page's headings, a repeated one numbered as mdBook does
/// (`id`, `id-1`, `id-2`).
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    let mut fence: Option<&str> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(m) = ["```", "~~~"].into_iter().find(|m| trimmed.starts_with(m)) {
            fence = match fence {
                None => Some(m),
                Some(open) if open == m => None,
                other => other,
            };
            continue;
        }
        if fence.is_some() {
            continue;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let id = heading_id(title);
        let n = seen.entry(id.clone()).or_insert(0);
        ids.insert(if *n == 0 {
            id.clone()
        } else {
            format!("{id}-{n}")
        });
        *n += 1;
    }
    ids
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// What is wrong with the links of `page`: a target that does not exist,
/// leaves `inside` (when given), or names an anchor its page lacks.
fn broken_links(page: &Path, text: &str, inside: Option<&Path>) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = page.parent().expect("a page is in a directory");
    for (line, target) in links(text) {
        if target.contains("://") || target.starts_with("mailto:") {
            continue;
        }
        let at = format!("{}:{line}: ({target})", page.display());
        let (path, anchor) = match target.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            normalized(&dir.join(path))
        };
        if !file.exists() {
            problems.push(format!("{at}: {} does not exist", file.display()));
            continue;
        }
        if let Some(inside) = inside {
            if !file.starts_with(inside) {
                problems.push(format!(
                    "{at}: outside {}, so not in the built book",
                    inside.display()
                ));
                continue;
            }
            // mdBook makes a README.md the directory's index.html and
            // leaves links to it pointing at a README.html it never writes.
            if file.file_name().is_some_and(|n| n == "README.md") {
                problems.push(format!("{at}: mdBook builds README.md as index.html"));
                continue;
            }
        }
        if let Some(anchor) = anchor {
            if file.extension().is_none_or(|e| e != "md") {
                problems.push(format!("{at}: an anchor into a file that is not a page"));
            } else if !heading_ids(&read(&file)).contains(anchor) {
                problems.push(format!(
                    "{at}: {} has no heading with the id {anchor}",
                    file.display()
                ));
            }
        }
    }
    // `{{#include FILE[:LINES]}}`: the file must be there.
    for (line, include) in text.lines().enumerate().filter_map(|(i, l)| {
        let start = l.find("{{#include ")? + "{{#include ".len();
        let end = l[start..].find("}}")? + start;
        Some((i + 1, &l[start..end]))
    }) {
        let file = dir.join(include.split(':').next().unwrap_or_default().trim());
        if !file.is_file() {
            problems.push(format!(
                "{}:{line}: the included {} does not exist",
                page.display(),
                file.display()
            ));
        }
    }
    problems
}

#[test]
fn every_link_of_the_book_and_the_readme_resolves() {
    let src = book_src();
    let mut problems = Vec::new();
    let pages = book_pages();
    assert!(pages.len() > 20, "the book has its pages: {pages:?}");
    let mut checked = 0;
    for page in &pages {
        let text = read(page);
        checked += links(&text).len();
        problems.extend(broken_links(page, &text, Some(&src)));
    }
    let readme = repo().join("README.md");
    let text = read(&readme);
    checked += links(&text).len();
    problems.extend(broken_links(&readme, &text, None));
    assert!(checked > 100, "the links were found: {checked}");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_page_is_in_the_summary_and_every_entry_exists() {
    let src = book_src();
    let summary_path = src.join("SUMMARY.md");
    let summary = read(&summary_path);
    let listed: BTreeSet<PathBuf> = links(&summary)
        .into_iter()
        .map(|(_, target)| normalized(&src.join(target)))
        .collect();
    let missing: Vec<_> = listed.iter().filter(|p| !p.is_file()).collect();
    assert!(
        missing.is_empty(),
        "SUMMARY.md lists missing pages: {missing:?}"
    );
    let unlisted: Vec<_> = book_pages()
        .into_iter()
        .filter(|p| *p != summary_path && !listed.contains(p))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages mdBook would not build (not in SUMMARY.md): {unlisted:?}"
    );
}

#[test]
fn the_readme_is_a_front_page() {
    let lines = read(&repo().join("README.md")).lines().count();
    assert!(
        lines < 250,
        "README.md has {lines} lines: it is the front page, the rest belongs in docs/"
    );
}

/// The reasons written in a source file: `pub const X: &str = "Word";`.
fn reasons_in(relative: &str) -> Vec<String> {
    read(&repo().join(relative))
        .lines()
        .filter_map(|line| {
            let value = line
                .trim()
                .strip_prefix("pub const ")?
                .split_once("&str = \"")?
                .1;
            let value = value.strip_suffix("\";")?;
            let word = value.chars().next()?.is_ascii_uppercase()
                && value.chars().all(|c| c.is_ascii_alphabetic());
            word.then(|| value.to_string())
        })
        .collect()
}

#[test]
fn troubleshooting_names_every_reason_the_controller_writes() {
    let page = read(&book_src().join("operations/troubleshooting.md"));
    let mut reasons = Vec::new();
    for file in [
        "crates/tfjob-core/src/api/reason.rs",
        "crates/tfjob-core/src/member_identity.rs",
        "crates/tfjob-core/src/fence.rs",
    ] {
        reasons.extend(reasons_in(file));
    }
    assert!(reasons.len() > 40, "the reasons were found: {reasons:?}");
    let missing: Vec<_> = reasons
        .iter()
        .filter(|reason| !page.contains(&format!("`{reason}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/src/operations/troubleshooting.md does not explain {missing:?}"
    );
}

#[test]
fn heading_ids_follow_mdbooks_rule() {
    let page = "# Install: Helm, kustomize, image\n\
                ## What `.ci/run` runs\n\
                ```sh\n# not a heading\n```\n\
                ## The fence's identity\n\
                ## Fields\n## Fields\n\
                ### See [the door](door.md)\n";
    let ids: Vec<_> = heading_ids(page).into_iter().collect();
    assert_eq!(
        ids,
        [
            "fields",
            "fields-1",
            "install-helm-kustomize-image",
            "see-the-door",
            "the-fences-identity",
            "what-cirun-runs",
        ]
    );
}

#[test]
fn links_in_code_are_not_links() {
    let text = "[a](one.md) `[b](two.md)` and\n```\n[c](three.md)\n```\n\
                [d\ne](four.md#x \"title\") ``[f](five.md)``";
    assert_eq!(
        links(text),
        [(1, "one.md".to_string()), (6, "four.md#x".to_string())]
    );
}

#[test]
fn a_broken_link_or_anchor_is_found() {
    let dir = std::env::temp_dir().join(format!("book-test-{}", std::process::id()));
    let book = dir.join("book");
    std::fs::create_dir_all(&book).expect("temp dir");
    std::fs::write(book.join("target.md"), "# Target\n## A section\n").expect("write");
    std::fs::write(dir.join("elsewhere.md"), "# Elsewhere\n").expect("write");
    let page = book.join("page.md");
    let text = "[ok](target.md#a-section) [gone](missing.md) [bad](target.md#nope) \
                [out](../elsewhere.md) [web](https://example.com/x)";
    let problems = broken_links(&page, text, Some(&book));
    std::fs::remove_dir_all(&dir).expect("clean up");
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains("missing.md") && problems[0].contains("does not exist"));
    assert!(problems[1].contains("no heading with the id nope"));
    assert!(problems[2].contains("elsewhere.md") && problems[2].contains("not in the built book"));
}
