//! `kube-lb up`.

use std::process::ExitCode;

/// Arguments of `kube-lb up`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kube-lb up`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kube-lb up` is not available in this build yet")
}
