//! `kube-lb lint`: parse annotations offline.

use std::process::ExitCode;

/// Arguments of `kube-lb lint`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Manifest files or directories (`-` for stdin).
    #[arg(short = 'f', long = "filename", required = true)]
    pub files: Vec<String>,
}

/// Runs `kube-lb lint`.
pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("lint is not built yet")
}
