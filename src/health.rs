//! The HTTP endpoint for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

#[derive(Clone)]
struct AppState {
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
}

/// The router, separate from serving so tests can drive it.
pub fn router(metrics: Arc<Metrics>, ready: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready_handler))
        .with_state(AppState { metrics, ready })
}

async fn metrics_handler(State(state): State<AppState>) -> impl IntoResponse {
    match state.metrics.encode() {
        Ok(body) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(error) => {
            tracing::error!(%error, "could not encode metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

async fn ready_handler(State(state): State<AppState>) -> impl IntoResponse {
    if *state.ready.borrow() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
    }
}

/// Binds `addr` and serves until `shutdown`; returns the bound address (useful with port 0)
/// and the server task.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    ready: watch::Receiver<bool>,
    shutdown: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(metrics, ready);
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
        if let Err(error) = result {
            tracing::error!(%error, "metrics server failed");
        }
    });
    tracing::info!(addr = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, task))
}
