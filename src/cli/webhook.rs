//! `kube-lb webhook`: lint as a validating admission webhook (see [`crate::webhook`]).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use crate::cli::lint::CloudArg;
use crate::controller::ControllerConfig;
use crate::webhook::review::Mode;
use crate::webhook::server::{Judging, VALIDATE_PATH, router, serve};
use crate::webhook::tls::{
    FileCertificate, FixedCertificate, certified_key, self_signed, server_config,
};

/// Arguments of `kube-lb webhook`.
#[derive(Debug, clap::Args)]
#[command(group(
    clap::ArgGroup::new("certificate")
        .required(true)
        .args(["tls_cert_file", "self_signed_for"])
))]
#[command(
    after_help = "The API server calls POST /validate-service with an AdmissionReview \
    (admission.k8s.io/v1). Each lint finding comes back as a warning that kubectl prints as \
    `Warning: metadata.annotations[<key>]: <why>`; with --deny a Service with errors is refused. \
    deploy/components/webhook holds the Deployment, Service and ValidatingWebhookConfiguration \
    (failurePolicy Ignore, timeoutSeconds 5: an unreachable webhook never blocks an apply)."
)]
pub struct Args {
    /// Address to serve HTTPS on.
    #[arg(long, env = "KUBE_LB_WEBHOOK_LISTEN", default_value = "0.0.0.0:9443")]
    pub listen: SocketAddr,

    /// PEM certificate chain to serve (`tls.crt` of a `kubernetes.io/tls` Secret); re-read when
    /// it changes.
    #[arg(
        long,
        env = "KUBE_LB_WEBHOOK_TLS_CERT_FILE",
        requires = "tls_private_key_file"
    )]
    pub tls_cert_file: Option<PathBuf>,

    /// PEM private key of --tls-cert-file (`tls.key`).
    #[arg(
        long,
        env = "KUBE_LB_WEBHOOK_TLS_PRIVATE_KEY_FILE",
        requires = "tls_cert_file"
    )]
    pub tls_private_key_file: Option<PathBuf>,

    /// Serve a self-signed certificate made at start for these DNS names or IP addresses
    /// (comma separated or repeated), instead of certificate files: for a webhook beside
    /// `kube-lb apiserver`. Its PEM is written to --ca-bundle-out, for `caBundle`.
    #[arg(long, value_delimiter = ',', value_name = "NAME|IP")]
    pub self_signed_for: Vec<String>,

    /// Where to write the self-signed certificate (PEM) clients must trust.
    #[arg(long, requires = "self_signed_for")]
    pub ca_bundle_out: Option<PathBuf>,

    /// Whose annotations to judge, as `controller --cloud`.
    #[arg(long, value_enum, default_value_t = CloudArg::Local, env = "KUBE_LB_CLOUD")]
    pub cloud: CloudArg,

    /// The `spec.loadBalancerClass` the controller handles; Services of other classes are not
    /// judged.
    #[arg(long, env = "KUBE_LB_LOAD_BALANCER_CLASS")]
    pub load_balancer_class: Option<String>,

    /// Whether Services without a class are judged; defaults as for `controller`.
    #[arg(long, env = "KUBE_LB_DEFAULT_CLASS")]
    pub default_class: Option<bool>,

    /// Refuse a Service whose annotations have errors, instead of warning. Pair it with
    /// `failurePolicy: Ignore` so an unreachable webhook still never blocks an apply.
    #[arg(long, env = "KUBE_LB_WEBHOOK_DENY")]
    pub deny: bool,
}

/// Runs `kube-lb webhook` until SIGINT or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let resolver: Arc<dyn rustls::server::ResolvesServerCert> =
        match (&args.tls_cert_file, &args.tls_private_key_file) {
            (Some(cert), Some(key)) => Arc::new(
                FileCertificate::load(cert, key).context("loading the serving certificate")?,
            ),
            _ => {
                let made = self_signed(&args.self_signed_for)?;
                if let Some(out) = &args.ca_bundle_out {
                    std::fs::write(out, &made.cert_pem)
                        .with_context(|| format!("writing the CA bundle to {}", out.display()))?;
                }
                let name = std::path::Path::new("(self-signed)");
                Arc::new(FixedCertificate(Arc::new(certified_key(
                    made.cert_pem.as_bytes(),
                    made.key_pem.as_bytes(),
                    name,
                    name,
                )?)))
            }
        };
    let tls = server_config(resolver)?;
    let mut config = ControllerConfig::new(args.cloud.into());
    config.default_class = args
        .default_class
        .unwrap_or(args.load_balancer_class.is_none());
    config.load_balancer_class = args.load_balancer_class;
    let mode = if args.deny { Mode::Deny } else { Mode::Warn };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("listening on {}", args.listen))?;
    let address = listener.local_addr().unwrap_or(args.listen);
    tracing::info!(
        %address,
        path = VALIDATE_PATH,
        cloud = ?config.cloud,
        mode = ?mode,
        "serving admission reviews"
    );
    serve(
        listener,
        tls,
        router(Arc::new(Judging { config, mode })),
        crate::cli::wait_for_signal(),
    )
    .await;
    Ok(ExitCode::SUCCESS)
}
