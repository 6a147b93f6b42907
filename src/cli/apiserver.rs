//! `kube-lb apiserver`.

use std::process::ExitCode;

/// Arguments of `kube-lb apiserver`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `kube-lb apiserver`.
pub async fn run(_args: Args) -> anyhow::Result<ExitCode> {
    anyhow::bail!("`kube-lb apiserver` is not available in this build yet")
}
