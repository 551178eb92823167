//! Reading the agent's sources as text, for the tests that check its structure
//! (`tests/layering.rs`, `tests/linkage.rs`): the `.rs` files under a directory, the product code
//! of a file (comments and gated items left out, with the modules those items declare in other
//! files), and where such a module's files live. Not part of `support/mod.rs` (no lab code): the
//! two tests include this file with `#[path = "support/source_scan.rs"]`.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, sorted; none when `dir` does not exist.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The product code of one file: its lines (numbered from 1) without comment lines and without
/// the items that carry one of `gates` (an attribute alone on its line, such as `#[cfg(test)]`);
/// the names of the modules such items declare in other files (`#[cfg(test)] mod tests;`) go to
/// `gated_mods`.
pub fn product_lines(text: &str, gates: &[&str], gated_mods: &mut Vec<String>) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut lines = text.lines().enumerate();
    while let Some((n, line)) = lines.next() {
        let t = line.trim();
        if t.starts_with("//") {
            continue;
        }
        if !gates.contains(&t) {
            out.push((n + 1, line.to_string()));
            continue;
        }
        // Skip the gated item: one line ending in `;`, or up to its closing brace.
        let mut depth = 0i32;
        for (_, item) in lines.by_ref() {
            let it = item.trim();
            if it.starts_with("#[") || it.starts_with("//") {
                continue;
            }
            if depth == 0 && it.ends_with(';') {
                let declared = it
                    .trim_start_matches("pub ")
                    .trim_start_matches("pub(crate) ")
                    .strip_prefix("mod ")
                    .map(|n| n.trim_end_matches(';'));
                if let Some(name) = declared {
                    gated_mods.push(name.to_string());
                }
                break;
            }
            depth += item.matches('{').count() as i32 - item.matches('}').count() as i32;
            if depth <= 0 && item.contains('}') {
                break;
            }
        }
    }
    out
}

/// Where the files of a child module `name` declared in `file` live: `name.rs` and the folder
/// `name/`, beside `file` for `mod.rs`, `lib.rs` and `main.rs`, under `file`'s own folder otherwise.
pub fn child_paths(file: &Path, name: &str) -> [PathBuf; 2] {
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().map(Path::to_path_buf),
        _ => Some(file.with_extension("")),
    }
    .unwrap_or_default();
    [dir.join(format!("{name}.rs")), dir.join(name)]
}
