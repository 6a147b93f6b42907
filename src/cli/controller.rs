//! `kube-lb controller`.

use std::process::ExitCode;

/// Arguments of `kube-lb controller`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kube-lb controller`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kube-lb controller` is not available in this build yet")
}
