//! `kube-lb`: Kubernetes Service load-balancer controller and node dataplane.
//!
//! Each subcommand lives in its own module under `cli/`; this file only parses the command line,
//! sets up logging and maps results to exit codes.

use std::process::ExitCode;

use kube_lb::cli;

use clap::{Parser, Subcommand};

/// Kubernetes load balancers without a cloud-controller-manager or kube-proxy.
#[derive(Debug, Parser)]
#[command(name = "kube-lb", version, about, long_about = None)]
struct Cli {
    /// Log filter in `RUST_LOG` syntax (e.g. `info`, `kube_lb=debug`).
    #[arg(long, global = true, env = "KUBE_LB_LOG", default_value = "info")]
    log: String,

    /// Log format.
    #[arg(long, global = true, env = "KUBE_LB_LOG_FORMAT", value_enum, default_value_t = cli::LogFormat::Text)]
    log_format: cli::LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse Service manifests offline and print the typed load-balancer spec or every error.
    Lint(cli::lint::Args),
    /// Run everything on this machine: in-memory API server, controller with the `local`
    /// provider, and the dataplane (nftables as root with `nft`, userspace otherwise).
    #[cfg(feature = "apiserver")]
    Up(cli::up::Args),
    /// One shot: load manifests into an embedded API server, converge every LoadBalancer
    /// Service through a provider, print the result and exit 0 / 1 (user error) / 2.
    #[cfg(feature = "apiserver")]
    Reconcile(cli::reconcile::Args),
    /// Run the in-memory Kubernetes API server alone.
    #[cfg(feature = "apiserver")]
    Apiserver(cli::apiserver::Args),
    // Without the embedded API server the names still parse, so a user of the slim build (the
    // container image) learns why instead of reading "unrecognized subcommand".
    #[cfg(not(feature = "apiserver"))]
    #[command(hide = true)]
    Up(WithoutApiserver),
    #[cfg(not(feature = "apiserver"))]
    #[command(hide = true)]
    Reconcile(WithoutApiserver),
    #[cfg(not(feature = "apiserver"))]
    #[command(hide = true)]
    Apiserver(WithoutApiserver),
    /// Run the Service load-balancer controller against a cluster.
    Controller(cli::controller::Args),
    /// Run the node dataplane (kube-proxy replacement).
    Proxy(cli::proxy::Args),
    /// Show the cloud calls the controller would make for every LoadBalancer Service, with
    /// reads only (exit 0 nothing to change, 2 changes pending with --detailed-exitcode, 1 error).
    Plan(cli::plan::Args),
    /// List cloud resources of this cluster whose Service is gone, no longer a LoadBalancer or
    /// of another class; --delete removes them (exit 0 none, 2 leaked, 1 error).
    Audit(cli::audit::Args),
    /// Serve lint as a validating admission webhook: kubectl shows each annotation error as a
    /// warning on apply (or, with --deny, the Service is refused).
    Webhook(cli::webhook::Args),
}

/// Any arguments of a subcommand this build lacks.
#[cfg(not(feature = "apiserver"))]
#[derive(Debug, clap::Args)]
struct WithoutApiserver {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<String>,
}

#[cfg(not(feature = "apiserver"))]
fn without_apiserver(name: &str) -> anyhow::Result<ExitCode> {
    anyhow::bail!(
        "`kube-lb {name}` needs the embedded API server, and this binary was built without the \
         `apiserver` feature (as the container image is); use a default build"
    )
}

fn main() -> ExitCode {
    // Installed or symlinked as `kubectl-kube_lb`, kubectl runs us for `kubectl kube-lb`.
    if std::env::args_os()
        .next()
        .is_some_and(|argv0| cli::plugin::invoked_as_plugin(&argv0))
    {
        let plugin = cli::plugin::PluginCli::parse();
        cli::init_logging(&plugin.log, cli::LogFormat::Text);
        return exit_code(block_on(cli::plugin::run(plugin)));
    }
    let cli = Cli::parse();
    cli::init_logging(&cli.log, cli.log_format);
    let result = match cli.command {
        Command::Lint(args) => cli::lint::run(args),
        #[cfg(feature = "apiserver")]
        Command::Up(args) => block_on(cli::up::run(args)),
        #[cfg(feature = "apiserver")]
        Command::Reconcile(args) => block_on(cli::reconcile::run(args)),
        #[cfg(feature = "apiserver")]
        Command::Apiserver(args) => block_on(cli::apiserver::run(args)),
        #[cfg(not(feature = "apiserver"))]
        Command::Up(_) => without_apiserver("up"),
        #[cfg(not(feature = "apiserver"))]
        Command::Reconcile(_) => without_apiserver("reconcile"),
        #[cfg(not(feature = "apiserver"))]
        Command::Apiserver(_) => without_apiserver("apiserver"),
        Command::Controller(args) => block_on(cli::controller::run(args)),
        Command::Proxy(args) => block_on(cli::proxy::run(args)),
        Command::Plan(args) => block_on(cli::plan::run(args)),
        Command::Audit(args) => block_on(cli::audit::run(args)),
        Command::Webhook(args) => block_on(cli::webhook::run(args)),
    };
    exit_code(result)
}

/// The exit status of a subcommand's result, printing its error.
fn exit_code(result: anyhow::Result<ExitCode>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Runs an async subcommand on a multi-threaded tokio runtime.
fn block_on<F: std::future::Future<Output = anyhow::Result<ExitCode>>>(
    future: F,
) -> anyhow::Result<ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(future)
}
