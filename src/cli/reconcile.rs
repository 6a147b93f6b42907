//! `kube-lb reconcile`.

use std::process::ExitCode;

/// Arguments of `kube-lb reconcile`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kube-lb reconcile`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kube-lb reconcile` is not available in this build yet")
}
