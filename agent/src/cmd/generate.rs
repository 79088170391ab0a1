//! Shell completions and man pages, generated from the command line's
//! definition (`cli::command`, with its environment variables). Copies live
//! in the repository (`contrib/completions/`, `docs/man/`, written by `make
//! docs`); a unit test fails when they are stale.
use std::path::Path;

use anyhow::{Context, Result};

use crate::cli::{command, Shell};

/// A shell's completion script.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut cmd = command();
    let mut out = vec![];
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(generator, &mut cmd, "waitmeter", &mut out);
    out
}

/// Every man page: waitmeter.1 and one per visible subcommand
/// (waitmeter-attach.1, ...), as (file name, roff).
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let mut cmd = command();
    cmd.build();
    let mut pages = vec![("waitmeter.1".to_string(), page(cmd.clone())?)];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let name = format!("waitmeter-{}", sub.get_name());
        pages.push((format!("{name}.1"), page(sub.clone().name(name).bin_name(format!("waitmeter {}", sub.get_name())))?));
    }
    Ok(pages)
}

fn page(cmd: clap::Command) -> Result<Vec<u8>> {
    let mut out = vec![];
    clap_mangen::Man::new(cmd).render(&mut out).context("rendering a man page")?;
    Ok(out)
}

/// Write every man page into `dir`.
pub fn write_man_pages(dir: &Path) -> Result<()> {
    for (name, text) in man_pages()? {
        // beside and renamed: a link planted in the folder is replaced, never written through
        crate::outfile::OutFile::create(&dir.join(&name), "--dir")?.commit(&text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file a shell's completion script is kept as (`make docs`).
    fn completions_file(shell: Shell) -> &'static str {
        match shell {
            Shell::Bash => "waitmeter.bash",
            Shell::Zsh => "_waitmeter",
            Shell::Fish => "waitmeter.fish",
        }
    }

    fn repo(rel: &str) -> std::path::PathBuf {
        Path::new(&crate::manifest_dir()).join("..").join(rel)
    }

    #[test]
    fn completions_and_man_pages_in_the_repository_are_up_to_date() {
        for shell in <Shell as clap::ValueEnum>::value_variants().iter().copied() {
            let path = repo(&format!("contrib/completions/{}", completions_file(shell)));
            let have = std::fs::read(&path).unwrap_or_default();
            assert!(have == completions(shell), "{} is stale: run `make docs` and commit it", path.display());
        }
        let pages = man_pages().unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["waitmeter.1", "waitmeter-attach.1", "waitmeter-run.1", "waitmeter-dump.1", "waitmeter-completions.1", "waitmeter-man.1"]
        );
        for (name, text) in &pages {
            let path = repo(&format!("docs/man/{name}"));
            let have = std::fs::read(&path).unwrap_or_default();
            assert!(&have == text, "{} is stale: run `make docs` and commit it", path.display());
        }
        let extra: Vec<_> = std::fs::read_dir(repo("docs/man"))
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| !names.contains(&n.as_str()))
            .collect();
        assert!(extra.is_empty(), "docs/man has pages of no command: {extra:?}");
    }

    #[test]
    fn every_option_has_its_environment_variable_in_the_generated_docs() {
        let bash = String::from_utf8(completions(Shell::Bash)).unwrap();
        assert!(bash.contains("--max-threads") && bash.contains("--pid"), "{bash}");
        let pages = man_pages().unwrap();
        let run = String::from_utf8(pages.iter().find(|(n, _)| n == "waitmeter-run.1").unwrap().1.clone()).unwrap();
        for var in ["WAITMETER_PID", "WAITMETER_ALL", "WAITMETER_WEB_CONFIG_FILE", "WAITMETER_MAX_THREADS", "WAITMETER_PYROSCOPE_URL"] {
            assert!(run.contains(var), "{var} not in waitmeter-run.1");
        }
        assert!(!run.contains("WAITMETER_HELP") && !run.contains("WAITMETER_VERBOSE"));
    }
}
