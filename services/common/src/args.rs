//! The `--runtime-dir` / `--data-dir` flags every Pedelec binary takes, and
//! the `--service-secret-stdin` flag of the four services, so their names,
//! help and fallbacks are written once.

use std::future::Future;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::error::CommonError;
use crate::secret::ServiceSecret;
use crate::{DataDir, RuntimeDir, ServiceName};

/// The flag `pedelecd` starts every service with.
pub const SERVICE_SECRET_STDIN: &str = "--service-secret-stdin";

/// How a service learns the service secret. Flatten into a service binary's
/// clap arguments.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct SecretArgs {
    /// Read the service secret from stdin (64 hex digits; pedelecd hands it
    /// over this way). Without it the service has none, and its internal RPCs
    /// answer every process of the user (docs/security.md)
    #[arg(long)]
    pub service_secret_stdin: bool,
}

impl SecretArgs {
    /// Makes the service non-dumpable ([`crate::process::make_non_dumpable`]),
    /// so the secret never sits in a process other processes of this uid may
    /// read, then returns the secret handed over on stdin, or None (with a
    /// warning in the log) when the service was started without the flag.
    /// Every service calls it first thing.
    pub fn read(&self) -> Result<Option<ServiceSecret>, CommonError> {
        crate::process::make_non_dumpable()
            .map_err(|e| CommonError::io("/proc/self (PR_SET_DUMPABLE)", e))?;
        if !self.service_secret_stdin {
            tracing::warn!(
                "started without {SERVICE_SECRET_STDIN} (not by pedelecd): no service secret, so the internal RPCs answer every process of this user"
            );
            return Ok(None);
        }
        crate::secret::receive().map(Some)
    }
}

/// Flatten into a binary's clap arguments with `#[command(flatten)]`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct DirArgs {
    /// Folder of the sockets, tokens and logs [default: $PEDELEC_RUNTIME_DIR, else
    /// $XDG_RUNTIME_DIR/pedelec, else $XDG_STATE_HOME/pedelec/run, else
    /// ~/.local/state/pedelec/run]
    #[arg(long, global = true, value_name = "DIR")]
    pub runtime_dir: Option<PathBuf>,
    /// Folder of the state: settings.json, the session journal, managed workspaces
    /// [default: $PEDELEC_HOME, else $XDG_DATA_HOME/pedelec, else ~/.local/share/pedelec]
    #[arg(long, global = true, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}

impl DirArgs {
    /// The flag's runtime dir, else the one the environment names (an error
    /// when it names none).
    pub fn runtime(&self) -> Result<RuntimeDir, CommonError> {
        self.runtime_dir
            .clone()
            .map_or_else(RuntimeDir::from_env, |p| Ok(RuntimeDir::at(p)))
    }

    /// The flag's data dir, else the one the environment names (an error
    /// when it names none).
    pub fn data(&self) -> Result<DataDir, CommonError> {
        self.data_dir
            .clone()
            .map_or_else(DataDir::from_env, |p| Ok(DataDir::at(p)))
    }
}

/// The flags every service takes: its folders and how it gets the service
/// secret. Flatten into a service's clap arguments.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ServiceArgs {
    #[command(flatten)]
    pub dirs: DirArgs,
    #[command(flatten)]
    pub secret: SecretArgs,
}

/// The rest of `service`'s program once its flags are read: logging, the
/// service secret, then `serve` with its folders and that secret until the
/// service stops, on the one-thread runtime. A failure is logged as the
/// program failed and the process exits 1.
pub fn run_service<F, E>(
    service: ServiceName,
    args: &ServiceArgs,
    serve: impl FnOnce(RuntimeDir, DataDir, Option<ServiceSecret>) -> F,
) -> ExitCode
where
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let program = service.binary();
    crate::runtime::block_on(program, async {
        crate::telemetry::init(program);
        let ready = args
            .secret
            .read()
            .and_then(|secret| Ok((args.dirs.runtime()?, args.dirs.data()?, secret)));
        let served = match ready {
            Ok((runtime, data, secret)) => serve(runtime, data, secret)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match served {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = %e, "{program} failed");
                ExitCode::FAILURE
            }
        }
    })
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
        assert_eq!(
            cli.dirs.runtime().unwrap().path(),
            std::path::Path::new("/r")
        );
        assert_eq!(cli.dirs.data().unwrap().path(), std::path::Path::new("/d"));
    }

    #[test]
    fn the_launchers_flag_is_the_one_services_take() {
        #[derive(Parser)]
        struct Service {
            #[command(flatten)]
            secret: SecretArgs,
        }
        assert!(
            Service::parse_from(["x", SERVICE_SECRET_STDIN])
                .secret
                .service_secret_stdin
        );
        assert!(!Service::parse_from(["x"]).secret.service_secret_stdin);
    }

    #[test]
    fn help_names_the_fallback_order() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "$PEDELEC_RUNTIME_DIR",
            "$XDG_RUNTIME_DIR/pedelec",
            "~/.local/state/pedelec/run",
            "$PEDELEC_HOME",
        ] {
            assert!(help.contains(needle), "help lacks {needle}:\n{help}");
        }
    }
}
