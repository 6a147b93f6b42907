//! Subcommands of the `kube-lb` binary. Each module owns its `Args` and a `run` function.

#[cfg(feature = "apiserver")]
pub mod apiserver;
pub mod audit;
pub mod controller;
pub mod lint;
pub mod plan;
pub mod plugin;
pub mod proxy;
#[cfg(feature = "apiserver")]
pub mod reconcile;
#[cfg(feature = "apiserver")]
pub mod up;
#[cfg(feature = "apiserver")]
mod up_handoff;
pub mod webhook;

use tracing_subscriber::EnvFilter;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the global tracing subscriber writing to stderr.
pub fn init_logging(filter: &str, format: LogFormat) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // A second init (e.g. in tests) is harmless; ignore it.
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
