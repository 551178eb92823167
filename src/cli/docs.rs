//! Man pages and shell completions generated from the clap definitions (`antrea-vm-agent
//! gen-docs --out DIR`, run by `make deb` on the binary it packages, so the documentation always
//! matches the flags that binary accepts).

use std::path::{Path, PathBuf};

use clap::Command;
use clap_complete::Shell;
use thiserror::Error;

/// Writing the generated files failed.
#[derive(Debug, Error)]
#[error("{path}: {source}")]
pub struct DocsError {
    path: PathBuf,
    source: std::io::Error,
}

/// Writes `man/<name>.8` (and `man/<name>-<subcommand>.8` for each visible subcommand) and
/// `completions/` for bash, zsh and fish under `out`; returns the files written.
pub fn write_docs(cmd: &Command, out: &Path) -> Result<Vec<PathBuf>, DocsError> {
    let mut cmd = cmd.clone();
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut written = Vec::new();

    let man_dir = out.join("man");
    create_dir(&man_dir)?;
    let mut pages = vec![(name.clone(), cmd.clone())];
    // clap's generated `help` subcommand gets no page: `--help` is on every page already.
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let page = format!("{name}-{}", sub.get_name());
        pages.push((page.clone(), sub.clone().name(page.clone())));
    }
    for (page, command) in pages {
        let mut text = Vec::new();
        let path = man_dir.join(format!("{page}.8"));
        clap_mangen::Man::new(command)
            .section("8")
            .render(&mut text)
            .map_err(|source| DocsError {
                path: path.clone(),
                source,
            })?;
        write(&path, &text)?;
        written.push(path);
    }

    let comp_dir = out.join("completions");
    create_dir(&comp_dir)?;
    for (shell, file) in [
        (Shell::Bash, format!("{name}.bash")),
        (Shell::Zsh, format!("_{name}")),
        (Shell::Fish, format!("{name}.fish")),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut cmd, name.clone(), &mut text);
        let path = comp_dir.join(file);
        write(&path, &text)?;
        written.push(path);
    }
    Ok(written)
}

fn create_dir(path: &Path) -> Result<(), DocsError> {
    std::fs::create_dir_all(path).map_err(|source| DocsError {
        path: path.to_path_buf(),
        source,
    })
}

fn write(path: &Path, text: &[u8]) -> Result<(), DocsError> {
    std::fs::write(path, text).map_err(|source| DocsError {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    #[test]
    fn writes_a_page_per_visible_subcommand_and_three_completions() {
        let cmd = Command::new("tool")
            .about("A tool")
            .subcommand(
                Command::new("run")
                    .about("Runs")
                    .arg(Arg::new("config").long("config")),
            )
            .subcommand(Command::new("secret").hide(true));
        let dir = tempfile::tempdir().expect("tempdir");
        let mut files: Vec<String> = write_docs(&cmd, dir.path())
            .expect("docs")
            .iter()
            .map(|p| {
                p.strip_prefix(dir.path())
                    .expect("under out")
                    .display()
                    .to_string()
            })
            .collect();
        files.sort();
        assert_eq!(
            files,
            [
                "completions/_tool",
                "completions/tool.bash",
                "completions/tool.fish",
                "man/tool-run.8",
                "man/tool.8"
            ]
        );
        let page = std::fs::read_to_string(dir.path().join("man/tool-run.8")).expect("page");
        assert!(page.contains(".TH tool-run 8"), "{page}");
        assert!(page.contains("config"), "{page}");
        let bash = std::fs::read_to_string(dir.path().join("completions/tool.bash")).expect("bash");
        assert!(bash.contains("complete") && bash.contains("run"), "{bash}");
    }
}
