//! The `--runtime-dir` / `--data-dir` flags every Pedelec binary takes, so
//! their names, help and fallbacks are written once.

use std::path::PathBuf;

use crate::{DataDir, RuntimeDir};

/// Flatten into a binary's clap arguments with `#[command(flatten)]`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DirArgs {
    /// Folder of the sockets, tokens and logs [default: $PEDELEC_RUNTIME_DIR, else
    /// $XDG_RUNTIME_DIR/pedelec, else /tmp/pedelec-<uid> (under $TMPDIR when set)]
    #[arg(long, global = true, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Folder of the state: settings.json, the session journal, managed workspaces
    /// [default: $PEDELEC_HOME, else $XDG_DATA_HOME/pedelec, else ~/.local/share/pedelec]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DirArgs {
    /// The flag's runtime dir, else the one the environment names.
    pub fn runtime(&self) -> RuntimeDir {
        self.runtime_dir
            .clone()
            .map_or_else(RuntimeDir::from_env, RuntimeDir::at)
    }

    /// The flag's data dir, else the one the environment names.
    pub fn data(&self) -> DataDir {
        self.data_dir
            .clone()
            .map_or_else(DataDir::from_env, DataDir::at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        dirs: DirArgs,
    }

    #[test]
    fn flags_win_over_the_environment() {
        let cli = Cli::parse_from(["x", "--runtime-dir", "/r", "--data-dir", "/d"]);
        assert_eq!(cli.dirs.runtime().path(), std::path::Path::new("/r"));
        assert_eq!(cli.dirs.data().path(), std::path::Path::new("/d"));
    }

    #[test]
    fn help_names_the_fallback_order() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "$PEDELEC_RUNTIME_DIR",
            "$XDG_RUNTIME_DIR/pedelec",
            "/tmp/pedelec-<uid>",
            "$PEDELEC_HOME",
        ] {
            assert!(help.contains(needle), "help lacks {needle}:\n{help}");
        }
    }
}
