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

/// The shell commands of a page's "Two commands" section, one per fenced
/// block, in order.
fn two_commands(page: &Path) -> Vec<String> {
    let text = read(page);
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Two commands"))
        .unwrap_or_else(|| panic!("{} has no \"Two commands\" section", page.display()));
    section
        .split("```sh\n")
        .skip(1)
        .filter_map(|block| {
            block
                .split_once("```")
                .map(|(code, _)| code.trim().to_string())
        })
        .collect()
}

/// The workspace as `cargo metadata` sees it (no dependencies).
fn cargo_metadata() -> serde_json::Value {
    let cargo = option_env!("CARGO").unwrap_or("cargo");
    let output = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--manifest-path",
        ])
        .arg(repo().join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON")
}

/// The binary `cargo run <flags>` picks in the root package, by cargo's
/// rule: `--bin NAME`, else `default-run`, else the only binary; an error
/// in cargo's words otherwise.
fn binary_cargo_runs(metadata: &serde_json::Value, flags: &[&str]) -> Result<String, String> {
    if let Some(at) = flags.iter().position(|f| *f == "--bin") {
        return flags
            .get(at + 1)
            .map(|name| name.to_string())
            .ok_or_else(|| "--bin names no binary".to_string());
    }
    let root_manifest = repo().join("Cargo.toml");
    let package = metadata["packages"]
        .as_array()
        .and_then(|packages| {
            packages
                .iter()
                .find(|p| p["manifest_path"].as_str().map(Path::new) == Some(&root_manifest))
        })
        .expect("the root package is listed");
    if let Some(default) = package["default_run"].as_str() {
        return Ok(default.to_string());
    }
    let bins: Vec<&str> = package["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "bin"))
        })
        .filter_map(|t| t["name"].as_str())
        .collect();
    match bins.as_slice() {
        [only] => Ok(only.to_string()),
        _ => Err(format!(
            "could not determine which binary to run; available binaries: {}",
            bins.join(", ")
        )),
    }
}

/// The README's two commands (and the getting-started page's, the same)
/// run as typed: `cargo run …` picks a binary that knows the subcommand,
/// and `cargo test` at the root covers every crate of the workspace.
#[test]
fn the_readmes_two_commands_resolve() {
    let metadata = cargo_metadata();
    for page in [
        repo().join("README.md"),
        book_src().join("getting-started/index.md"),
    ] {
        let commands = two_commands(&page);
        assert_eq!(commands.len(), 2, "{}: {commands:?}", page.display());
        let run = &commands[0];
        let (cargo_part, program_args) = run.split_once(" -- ").unwrap_or((run, ""));
        let flags: Vec<&str> = cargo_part.split_whitespace().collect();
        assert_eq!(flags[..2], ["cargo", "run"], "{}: {run}", page.display());
        let binary = binary_cargo_runs(&metadata, &flags[2..])
            .unwrap_or_else(|e| panic!("{}: `{run}` fails: {e}", page.display()));
        let executable = match binary.as_str() {
            "tfjob-federator" => env!("CARGO_BIN_EXE_tfjob-federator"),
            "kubectl-tfjob" => env!("CARGO_BIN_EXE_kubectl-tfjob"),
            other => panic!(
                "{}: `{run}` runs {other}, a binary this test does not know",
                page.display()
            ),
        };
        // `--help` after the subcommand: clap answers 0 only if it exists.
        let status = std::process::Command::new(executable)
            .args(program_args.split_whitespace())
            .arg("--help")
            .stdout(std::process::Stdio::null())
            .status()
            .expect("the binary runs");
        assert!(
            status.success(),
            "{}: `{run} --help` exits {status}",
            page.display()
        );

        assert_eq!(commands[1], "cargo test", "{}", page.display());
    }
    let sorted = |ids: &serde_json::Value| {
        let mut ids: Vec<String> = ids
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|id| id.as_str().map(str::to_string))
            .collect();
        ids.sort();
        ids
    };
    let members = sorted(&metadata["workspace_members"]);
    let default_members = sorted(&metadata["workspace_default_members"]);
    assert!(members.len() > 3, "the workspace's crates: {members:?}");
    assert_eq!(
        members, default_members,
        "`cargo test` at the root must test every crate of the workspace"
    );
}

/// Without `default-run`, two binaries make `cargo run` fail, as it did.
#[test]
fn cargo_runs_picks_as_cargo_does() {
    let package = |default_run: serde_json::Value| {
        serde_json::json!({
            "packages": [{"manifest_path": repo().join("Cargo.toml"), "default_run": default_run, "targets": [
                {"name": "a", "kind": ["bin"]},
                {"name": "b", "kind": ["bin"]},
                {"name": "c", "kind": ["lib"]}]}]
        })
    };
    let two = package(serde_json::Value::Null);
    let error = binary_cargo_runs(&two, &["--release"]).expect_err("two binaries, no default");
    assert!(error.contains("available binaries: a, b"), "{error}");
    assert_eq!(
        binary_cargo_runs(&two, &["--bin", "b"]),
        Ok("b".to_string())
    );
    let with_default = package(serde_json::json!("a"));
    assert_eq!(
        binary_cargo_runs(&with_default, &["--release"]),
        Ok("a".to_string())
    );
}

/// Every text file of the repository, sorted: what a clone has (build
/// output and the built book aside).
fn repository_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("a directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            if path.is_dir() {
                if !matches!(name, "target" | ".git") && path != book_src().join("../book") {
                    walk(&path, out);
                }
            } else {
                out.push(path);
            }
        }
    }
    let mut files = Vec::new();
    walk(&repo(), &mut files);
    files.sort();
    files
}

/// Every `../`-relative path in `text` (code spans and strings included)
/// that, taken from `file`'s folder, leaves `root`; and every citation of a
/// contract outside the repository.
fn paths_leaving(root: &Path, file: &Path, text: &str) -> Vec<String> {
    let outside_contract = concat!("ARCHITECTURE", ".md");
    let dir = file.parent().expect("a file is in a folder");
    let mut problems = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let at = format!("{}:{}", file.display(), number + 1);
        if line.contains(outside_contract) {
            problems.push(format!(
                "{at}: cites {outside_contract}, which is not in the repository"
            ));
        }
        let mut rest = line;
        while let Some(start) = rest.find("../") {
            // The path runs from its first `../` to the first character no
            // path has.
            let candidate = &rest[start..];
            let len = candidate
                .find(|c: char| !(c.is_alphanumeric() || "./_-".contains(c)))
                .unwrap_or(candidate.len());
            let path = &candidate[..len];
            if !normalized(&dir.join(path)).starts_with(root) {
                problems.push(format!("{at}: {path} leaves the repository"));
            }
            rest = &candidate[len.max(3)..];
        }
    }
    problems
}

/// No file points outside the repository: a clone has nothing there.
#[test]
fn no_file_names_a_path_outside_the_repository() {
    let root = repo();
    let mut problems = Vec::new();
    let mut read_files = 0;
    for file in repository_files() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue; // not text
        };
        read_files += 1;
        problems.extend(paths_leaving(&root, &file, &text));
    }
    assert!(
        read_files > 300,
        "the repository's files were read: {read_files}"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_planted_path_outside_is_found() {
    let root = Path::new("/repo");
    let page = root.join("docs/src/page.md");
    // Written so that this file itself plants no such path.
    let up = "../";
    let text = format!(
        "[in]({up}{up}README.md) `{up}{up}{up}outside/notes.md` and\n\
         see {up}outside (and {up}{up}{up}{up}etc) or {}",
        concat!("ARCHITECTURE", ".md")
    );
    let problems = paths_leaving(root, &page, &text);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].contains(&format!("page.md:1: {up}{up}{up}outside/notes.md leaves")));
    assert!(problems[1].contains(concat!("page.md:2: cites ARCHITECTURE", ".md")));
    assert!(problems[2].contains(&format!("page.md:2: {up}{up}{up}{up}etc leaves")));
    let inside = paths_leaving(
        root,
        &page,
        &format!("`{up}{up}tests/book.rs`, {up}api/index.md"),
    );
    assert!(inside.is_empty(), "{inside:?}");
}

/// The file map of "How the parts fit" names every source file: a
/// newcomer finds each by its folder and its line there.
#[test]
fn the_file_map_names_every_source_file() {
    let design = read(&book_src().join("design/index.md"));
    let map = design
        .split("```")
        .nth(1)
        .expect("design/index.md opens with the file map, a code block");
    let mut unnamed = Vec::new();
    for folder in ["src", "crates", "benches", "hack", "tests"] {
        for file in repository_files()
            .into_iter()
            .filter(|f| f.starts_with(repo().join(folder)))
        {
            let name = file
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default();
            let extension = file.extension().and_then(|e| e.to_str());
            // Source: Rust, Go, Python and hack's scripts; data (corpora,
            // regressions, go.sum) is named by its folder.
            let source = matches!(extension, Some("rs" | "go" | "py"))
                || (extension.is_none() && file.starts_with(repo().join("hack")));
            if source && !map.contains(name) {
                unnamed.push(
                    file.strip_prefix(repo())
                        .unwrap_or(&file)
                        .display()
                        .to_string(),
                );
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "docs/src/design/index.md's file map does not name: {unnamed:#?}"
    );
}

/// The command-line page lists every subcommand the binary has, and no
/// other.
#[test]
fn the_command_line_page_names_every_subcommand() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tfjob-federator"))
        .arg("--help")
        .output()
        .expect("the binary runs");
    assert!(output.status.success(), "--help exits {}", output.status);
    let help = String::from_utf8_lossy(&output.stdout);
    let commands: BTreeSet<String> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists its commands")
        .lines()
        .skip(1)
        .take_while(|line| !line.trim().is_empty())
        .filter_map(|line| line.split_whitespace().next())
        .filter(|command| *command != "help")
        .map(str::to_string)
        .collect();
    assert!(commands.len() >= 8, "the commands were read: {commands:?}");
    let page = read(&book_src().join("design/command-line.md"));
    let documented: BTreeSet<String> = page
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .filter_map(|rest| rest.split([' ', '`']).next())
        .map(str::to_string)
        .collect();
    assert_eq!(
        documented, commands,
        "docs/src/design/command-line.md's table and `tfjob-federator --help`"
    );
}
