//! `kube-lb proxy`.

use std::process::ExitCode;

/// Arguments of `kube-lb proxy`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kube-lb proxy`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kube-lb proxy` is not available in this build yet")
}
