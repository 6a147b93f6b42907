//! The HTTPS shell around [`super::review`]: `POST /validate-service` answers AdmissionReviews,
//! `GET /healthz` says the server is up. Every connection is TLS; a client that does not finish
//! its handshake within [`HANDSHAKE_TIMEOUT`] is dropped.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::review::{Mode, review};
use crate::controller::ControllerConfig;

/// The path kube-apiserver is configured to call (`clientConfig.service.path`).
pub const VALIDATE_PATH: &str = "/validate-service";

/// How long a client has to complete the TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest AdmissionReview read: the object and the old object, each up to the API
/// server's 3 MiB request limit, and the envelope.
const MAX_REVIEW_BYTES: usize = 8 << 20;

/// What the handlers judge with.
#[derive(Debug)]
pub struct Judging {
    /// The controller's cloud and classes.
    pub config: ControllerConfig,
    /// Warnings only, or refuse Services with errors.
    pub mode: Mode,
}

async fn validate(State(judging): State<Arc<Judging>>, body: Bytes) -> Response {
    match review(&body, &judging.config, judging.mode) {
        Ok(answer) => {
            let response = &answer["response"];
            tracing::debug!(
                uid = response["uid"].as_str().unwrap_or_default(),
                allowed = response["allowed"].as_bool().unwrap_or(true),
                warnings = response["warnings"].as_array().map_or(0, Vec::len),
                "answered an admission review"
            );
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                answer.to_string(),
            )
                .into_response()
        }
        Err(malformed) => {
            tracing::warn!(reason = %malformed, "refused a malformed admission review");
            (StatusCode::BAD_REQUEST, format!("{malformed}\n")).into_response()
        }
    }
}

/// The webhook's routes.
pub fn router(judging: Arc<Judging>) -> Router {
    Router::new()
        .route(VALIDATE_PATH, post(validate))
        .route("/healthz", get(|| async { "ok" }))
        .layer(DefaultBodyLimit::max(MAX_REVIEW_BYTES))
        .with_state(judging)
}

/// Serves `router` over TLS on `listener` until `shutdown` resolves; connections already
/// open are finished.
pub async fn serve(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    router: Router,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let acceptor = TlsAcceptor::from(tls);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!(%error, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let acceptor = acceptor.clone();
        let service = TowerToHyperService::new(router.clone());
        connections.spawn(async move {
            let stream =
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        tracing::debug!(%peer, %error, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return;
                    }
                };
            let served = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            if let Err(error) = served {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    while connections.join_next().await.is_some() {}
}
