//! Command-line interface. Conventions for every command: `--addr`/`FLO_ADDR`,
//! `--namespace`/`FLO_NAMESPACE`, `--token`/`FLO_TOKEN`, human output by default, `--json` for exactly one JSON
//! document on stdout; errors go to stderr with a non-zero exit: 1 the server refused or
//! found nothing, 2 a usage error or a definition refused by validation, 3 the server
//! cannot be reached.

mod action;
mod arg_value;
mod args;
mod duration;
mod kv;
mod output;
mod plan;
mod schedule;
mod server;
mod status;
mod stream;
mod stream_group;
mod webhook;
mod worker;
mod workflow;

pub use args::{Cli, Command};
use clap::{CommandFactory, Parser};
use flo::protocol::ErrorCode;
use flo::{Client, Error};
use output::Output;

/// Exit codes (documented in the README).
pub const EXIT_OK: i32 = 0;
/// The server refused the request, or what it names does not exist.
pub const EXIT_REFUSED: i32 = 1;
/// A usage error (what clap reports too), or a definition refused by validation.
pub const EXIT_USAGE: i32 = 2;
/// The server cannot be reached (or the connection was lost).
pub const EXIT_UNREACHABLE: i32 = 3;

/// Parses the command line, runs the command, returns the process exit code.
pub fn run() -> i32 {
    let cli = Cli::parse();
    let out = Output { json: cli.json };
    let result = match &cli.command {
        Command::Server(args) => server::run(args),
        Command::Status => connect(&cli).and_then(|mut c| status::run(&mut c, &out)),
        Command::Kv(cmd) => connect(&cli).and_then(|mut c| kv::run(&mut c, cmd, &out)),
        Command::Action(cmd) => connect(&cli).and_then(|mut c| action::run(&mut c, cmd, &out)),
        Command::Worker(cmd) => worker::check(cmd)
            .and_then(|()| connect(&cli))
            .and_then(|mut c| worker::run(&mut c, cmd, &out)),
        Command::Workflow(cmd) => workflow::check(cmd)
            .and_then(|()| connect(&cli))
            .and_then(|mut c| workflow::run(&mut c, cmd, &out)),
        Command::Stream(cmd) => connect(&cli).and_then(|mut c| stream::run(&mut c, cmd, &out)),
        Command::Schedule(cmd) => connect(&cli).and_then(|mut c| schedule::run(&mut c, cmd, &out)),
        Command::Plan(cmd) => connect(&cli).and_then(|mut c| plan::run(&mut c, cmd, &out)),
        Command::Webhook(cmd) => connect(&cli).and_then(|mut c| webhook::run(&mut c, cmd, &out)),
        Command::Validate(cmd) => workflow::validate(cmd, &out),
        Command::Completions { shell } => {
            completions(*shell);
            Ok(())
        }
    };
    match result {
        Ok(()) => EXIT_OK,
        Err(CliError::Logged(e)) => e.exit_code(),
        Err(e) => {
            output::error_line(&format!("error: {e}"));
            e.exit_code()
        }
    }
}

/// The completion script of `shell` for every command and flag, on stdout.
fn completions(shell: clap_complete::Shell) {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "flo", &mut script);
    output::bytes(&script);
}

fn connect(cli: &Cli) -> Result<Client, CliError> {
    let client =
        Client::connect_as(cli.addr.as_str(), cli.token.as_deref()).map_err(|e| match e {
            // The server answered the handshake: it is there, and refused (a token it does
            // not accept).
            Error::Server(_) => CliError::Client(e),
            e => CliError::Connect {
                addr: cli.addr.clone(),
                source: e,
            },
        })?;
    Ok(client.with_namespace(cli.namespace.clone()))
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(
        "cannot connect to flo at {addr}: {source} (is the server running? set --addr or FLO_ADDR)"
    )]
    Connect { addr: String, source: Error },
    #[error(transparent)]
    Client(#[from] Error),
    /// A mistake in the command line or its arguments.
    #[error("{0}")]
    Usage(String),
    /// A workflow definition with errors (E-codes), refused by the validator.
    #[error("{0}")]
    Invalid(String),
    /// Nothing found, or the outcome asked for did not happen (a run that failed).
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Server(#[from] flo_runtime::ServerError),
    /// An error already written to the log (`flo server --log-format json`): not printed
    /// again, its exit code kept.
    #[error("{0}")]
    Logged(Box<CliError>),
}

impl CliError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Connect { .. } | CliError::Client(Error::Io(_)) => EXIT_UNREACHABLE,
            CliError::Usage(_) | CliError::Invalid(_) => EXIT_USAGE,
            CliError::Client(_) | CliError::Failed(_) | CliError::Server(_) => EXIT_REFUSED,
            CliError::Logged(e) => e.exit_code(),
        }
    }

    /// A server's refusal of a workflow definition (its validation errors) is a usage error.
    pub fn definition(e: Error) -> CliError {
        match e {
            Error::Server(v)
                if v.code == ErrorCode::BadRequest
                    && v.message.starts_with("invalid workflow definition") =>
            {
                CliError::Invalid(v.message)
            }
            e => CliError::Client(e),
        }
    }
}
