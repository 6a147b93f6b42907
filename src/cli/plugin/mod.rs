//! `kubectl kube-lb …`: the binary run as a kubectl plugin.
//!
//! kubectl runs any `kubectl-<name>` found on `PATH` for `kubectl <name>` (a `_` in the file
//! name stands for a `-` on the command line), so installing or symlinking this binary as
//! `kubectl-kube_lb` (krew's spelling) gives `kubectl kube-lb`. `main` recognises that name in
//! `argv[0]` and parses [`PluginCli`] instead of the usual command set: read-mostly commands
//! for a live cluster, aimed at the kubeconfig context kubectl would use (`--context` picks
//! another), each bounded by `--request-timeout` so an unreachable cluster is reported, naming
//! the context, instead of hanging.

mod views;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use kube::Client;
use kube::config::Kubeconfig;

use crate::cli::{audit, lint, plan};
use crate::cloud::CloudName;

/// The executable name kubectl (and krew) look for.
pub const PLUGIN_EXECUTABLE: &str = "kubectl-kube_lb";

/// Whether the process was started under the plugin's name (`argv[0]`'s file name, any
/// directory, with or without `.exe`).
pub fn invoked_as_plugin(argv0: &OsStr) -> bool {
    Path::new(argv0)
        .file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|name| name.trim_end_matches(".exe") == PLUGIN_EXECUTABLE)
}

/// `kubectl kube-lb`: kube-lb's view of the cluster of the current kubeconfig context.
#[derive(Debug, Parser)]
#[command(name = "kubectl kube-lb", bin_name = "kubectl kube-lb", version, about, long_about = None)]
pub struct PluginCli {
    /// Log filter in `RUST_LOG` syntax (warnings only by default: the output is for people).
    #[arg(long, global = true, env = "KUBE_LB_LOG", default_value = "warn")]
    pub log: String,

    /// The kubeconfig context to use instead of the current one.
    #[arg(long, global = true, env = "KUBE_LB_CONTEXT")]
    pub context: Option<String>,

    /// How long to wait for the API server before giving up (connecting and each command's
    /// reads; `plan` and `audit` bound only the first contact, their cloud reads take longer).
    #[arg(long, global = true, value_parser = humantime::parse_duration, default_value = "10s")]
    pub request_timeout: Duration,

    /// What to show.
    #[command(subcommand)]
    pub command: PluginCommand,
}

/// The plugin's subcommands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// One line per LoadBalancer Service: address, provider, LoadBalancerReady reason, and
    /// the node announcing it on bare metal.
    Status(Target),
    /// One Service: its typed load-balancer spec, its LoadBalancerReady condition, its last
    /// events, the cloud resources it owns and the live plan of its next reconcile.
    Inspect {
        /// The Service, as NAMESPACE/NAME (or NAME in `default`).
        service: String,
        /// Kubeconfig file; without it `$KUBECONFIG`, `~/.kube/config`, then in-cluster.
        #[arg(long)]
        kubeconfig: Option<PathBuf>,
        /// The provider the controller runs with, and how to reach its cloud (as for
        /// `controller`): the cloud resources and the plan are read through it.
        #[command(flatten)]
        cloud: crate::cloud::CloudArgs,
        /// How many of the Service's most recent events to show.
        #[arg(long, default_value_t = 10)]
        events: usize,
    },
    /// Per IPPool: addresses in it, used and free, per family, and its conflicts.
    Pools(Target),
    /// `kube-lb plan` against the context's cluster.
    Plan(plan::Args),
    /// `kube-lb audit` against the context's cluster.
    Audit(audit::Args),
    /// `kube-lb lint` of the context's LoadBalancer Services as they are stored (or of `-f`
    /// manifests).
    Lint(LintArgs),
}

/// Which cluster, and how kube-lb runs there.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// Kubeconfig file; without it `$KUBECONFIG`, `~/.kube/config`, then in-cluster.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,

    /// The provider the controller runs with (as its `--cloud`): how annotations are read.
    #[arg(long, value_enum, env = "KUBE_LB_CLOUD", default_value_t = CloudName::Local)]
    pub cloud: CloudName,
}

/// `kubectl kube-lb lint`.
#[derive(Debug, Clone, clap::Args)]
pub struct LintArgs {
    /// Kubeconfig file; without it `$KUBECONFIG`, `~/.kube/config`, then in-cluster.
    #[arg(long, conflicts_with = "files")]
    pub kubeconfig: Option<PathBuf>,

    /// Lint these manifests instead of the cluster's Services (as `kube-lb lint -f`).
    #[arg(short = 'f', long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,

    /// Which cloud's annotations to interpret.
    #[arg(long, value_enum, default_value_t = lint::CloudArg::Local, env = "KUBE_LB_CLOUD")]
    pub cloud: lint::CloudArg,

    /// Output format of the per-object reports.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = lint::OutputFormat::Yaml)]
    pub output: lint::OutputFormat,
}

/// Runs the plugin.
pub async fn run(cli: PluginCli) -> anyhow::Result<ExitCode> {
    let timeout = cli.request_timeout;
    let context = cli.context.as_deref();
    match cli.command {
        PluginCommand::Status(target) => {
            let (client, name) = connect(target.kubeconfig.as_deref(), context, timeout).await?;
            bounded(&name, timeout, views::status(&client, target.cloud)).await
        }
        PluginCommand::Inspect {
            service,
            kubeconfig,
            cloud,
            events,
        } => {
            let (client, name) = connect(kubeconfig.as_deref(), context, timeout).await?;
            let work = views::inspect(&client, cloud.cloud, &service, events);
            let found = bounded(&name, timeout, work).await?;
            // Cloud reads are not bounded by --request-timeout, as for `plan`.
            views::inspect_cloud(&client, &cloud, &found).await;
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Pools(target) => {
            let (client, name) = connect(target.kubeconfig.as_deref(), context, timeout).await?;
            bounded(&name, timeout, views::pools(&client)).await
        }
        PluginCommand::Plan(mut args) => {
            let aimed = aim(&mut args.cluster, context, timeout).await;
            match aimed {
                Ok(_file) => plan::run(args).await,
                Err(error) => unanswered(&error),
            }
        }
        PluginCommand::Audit(mut args) => {
            let aimed = aim(&mut args.cluster, context, timeout).await;
            match aimed {
                Ok(_file) => audit::run(args).await,
                Err(error) => unanswered(&error),
            }
        }
        PluginCommand::Lint(args) => run_lint(args, context, timeout).await,
    }
}

/// `plan` and `audit` exit 1 on an error (2 means pending changes or leaks).
fn unanswered(error: &anyhow::Error) -> anyhow::Result<ExitCode> {
    eprintln!("error: {error:#}");
    Ok(ExitCode::from(1))
}

/// Lints the given manifests, or the cluster's LoadBalancer Services written to a file.
async fn run_lint(
    args: LintArgs,
    context: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<ExitCode> {
    let mut _file = None;
    let files = if args.files.is_empty() {
        let (client, name) = connect(args.kubeconfig.as_deref(), context, timeout).await?;
        let text = bounded(&name, timeout, views::load_balancer_services_yaml(&client)).await?;
        let file = PrivateFile::write("services.yaml", &text)?;
        let path = file.0.display().to_string();
        _file = Some(file);
        vec![path]
    } else {
        args.files
    };
    let args = lint::Args {
        files,
        cloud: args.cloud,
        output: args.output,
        local_pool: vec![
            kube_lb_provider_local::DEFAULT_POOL
                .parse()
                .context("the default pool")?,
        ],
        load_balancer_class: None,
        default_class: None,
    };
    // `lint` is synchronous and starts a runtime of its own for the provider's verdict.
    tokio::task::spawn_blocking(move || lint::run(args))
        .await
        .context("lint panicked")?
}

/// Points `plan`/`audit` at `context` (through a copy of the kubeconfig whose current context
/// it is) and checks, within `timeout`, that its API server answers. Returns the copy, to be
/// kept until the command ends. Manifests (`-f`, `--state-file`) need no cluster.
async fn aim(
    cluster: &mut plan::ClusterArgs,
    context: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<Option<PrivateFile>> {
    if !cluster.files.is_empty() || cluster.state_file.is_some() {
        return Ok(None);
    }
    let (client, name) = connect(cluster.kubeconfig.as_deref(), context, timeout).await?;
    bounded(&name, timeout, async {
        client.apiserver_version().await?;
        Ok(())
    })
    .await?;
    let Some(context) = context else {
        return Ok(None);
    };
    let mut config = read_kubeconfig(cluster.kubeconfig.as_deref())?;
    config.current_context = Some(context.to_owned());
    let file = PrivateFile::write("kubeconfig", &serde_yaml_ng::to_string(&config)?)?;
    cluster.kubeconfig = Some(file.0.clone());
    Ok(Some(file))
}

/// A client for `context` (or the current one) and the context's name for messages.
async fn connect(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
    timeout: Duration,
) -> anyhow::Result<(Client, String)> {
    let name = context_name(kubeconfig, context);
    let client = crate::cli::controller::client_for(kubeconfig, context, Some(timeout))
        .await
        .with_context(|| format!("kubeconfig context `{name}`"))?;
    Ok((client, name))
}

/// The context that will be used: `--context`, else the kubeconfig's current context, else
/// the in-cluster service account.
fn context_name(kubeconfig: Option<&Path>, context: Option<&str>) -> String {
    if let Some(context) = context {
        return context.to_owned();
    }
    read_kubeconfig(kubeconfig)
        .ok()
        .and_then(|config| config.current_context)
        .unwrap_or_else(|| "in-cluster".to_owned())
}

fn read_kubeconfig(path: Option<&Path>) -> anyhow::Result<Kubeconfig> {
    Ok(match path {
        Some(path) => Kubeconfig::read_from(path)?,
        None => Kubeconfig::read()?,
    })
}

/// `work` within `timeout`, its error (or the timeout) naming the context.
async fn bounded<T>(
    context: &str,
    timeout: Duration,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(timeout, work).await {
        Ok(result) => result.with_context(|| format!("cluster of kubeconfig context `{context}`")),
        Err(_) => anyhow::bail!(
            "cluster of kubeconfig context `{context}` did not answer within {} \
             (--request-timeout)",
            humantime::format_duration(timeout)
        ),
    }
}

/// A file only this user can read, removed when dropped (kubeconfigs hold credentials).
struct PrivateFile(PathBuf);

impl PrivateFile {
    fn write(name: &str, text: &str) -> anyhow::Result<Self> {
        use std::io::Write as _;
        let path =
            std::env::temp_dir().join(format!("kube-lb-plugin-{}-{name}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options
            .open(&path)
            .with_context(|| format!("creating {}", path.display()))?;
        file.write_all(text.as_bytes())
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(Self(path))
    }
}

impl Drop for PrivateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_krew_name_in_any_directory() {
        assert!(invoked_as_plugin(OsStr::new(
            "/usr/local/bin/kubectl-kube_lb"
        )));
        assert!(invoked_as_plugin(OsStr::new("kubectl-kube_lb.exe")));
        assert!(!invoked_as_plugin(OsStr::new("/usr/bin/kube-lb")));
        assert!(!invoked_as_plugin(OsStr::new("kubectl-kube-lb")));
    }

    #[test]
    fn plugin_command_line_is_consistent() {
        use clap::CommandFactory as _;
        PluginCli::command().debug_assert();
    }
}
