//! Pedelec's executables by file name: the one place their names are spelt.
//! The launcher finds the services by them, install copies them, the
//! multicall executable picks its program by the name it is started under,
//! and `pedelec-multicall --list` prints the long-running ones for the build
//! scripts (build-release.sh, tools/hot-functions.py).

/// One of Pedelec's executables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Program {
    /// `pedelecd`, the launcher.
    Launcher,
    Session,
    ToolBridge,
    Provider,
    Asset,
    NativeHost,
    /// The agent's tool client, started once per tool call.
    Cli,
    /// Pedelec's own agent for Ollama models, started once per turn.
    Agent,
}

impl Program {
    /// The long-running programs, which the release build makes one
    /// executable (`pedelec-multicall`), pedelecd first.
    pub const LONG_RUNNING: [Program; 6] = [
        Program::Launcher,
        Program::Session,
        Program::ToolBridge,
        Program::Provider,
        Program::Asset,
        Program::NativeHost,
    ];

    /// Every program: the long-running ones (pedelecd first), then the ones
    /// started per tool call and per turn. The pattern names each
    /// long-running program once, so one added to LONG_RUNNING stops the
    /// build here until ALL counts it.
    pub const ALL: [Program; 8] = {
        let [a, b, c, d, e, f] = Program::LONG_RUNNING;
        [a, b, c, d, e, f, Program::Cli, Program::Agent]
    };

    /// The executable's file name.
    pub const fn file_name(self) -> &'static str {
        match self {
            Program::Launcher => "pedelecd",
            Program::Session => "pedelec-session",
            Program::ToolBridge => "pedelec-toolbridge",
            Program::Provider => "pedelec-provider",
            Program::Asset => "pedelec-asset",
            Program::NativeHost => "pedelec-native-host",
            Program::Cli => "pedelec-cli",
            Program::Agent => "pedelec-agent",
        }
    }

    /// The program called `name`, if any.
    pub fn parse(name: &str) -> Option<Program> {
        Program::ALL.into_iter().find(|p| p.file_name() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_distinct_and_parse_back() {
        for p in Program::ALL {
            assert_eq!(Program::parse(p.file_name()), Some(p));
        }
        for p in Program::LONG_RUNNING {
            assert!(Program::ALL.contains(&p));
        }
        assert_eq!(Program::parse("pedelec-multicall"), None);
    }
}
