//! The in-memory Kubernetes API server that `kube-lb up`, `kube-lb reconcile`, `kube-lb
//! apiserver` and the project's tests stand on.
//!
//! It speaks enough of the Kubernetes REST API over real HTTP for kube-rs (clients, watchers,
//! reflectors, controllers) and kubectl: core/v1 namespaces, services, endpoints, nodes, pods,
//! events and configmaps; discovery.k8s.io/v1 endpointslices; coordination.k8s.io/v1 leases;
//! events.k8s.io/v1 events; apiextensions.k8s.io/v1 CustomResourceDefinitions and the custom
//! resources they define (registered at run time: discovery, list/watch with selectors, the
//! status subresource, structural-schema pruning, defaults and validation, printer columns;
//! deleting a CRD deletes its objects); admissionregistration.k8s.io/v1
//! validatingwebhookconfigurations (stored, defaulted and validated; no webhook is called).
//! Objects are stored as JSON; fields a built-in kind's Go
//! type does not have are handled as kube-apiserver's field validation does (dropped with a
//! `Warning` by default, refused with `fieldValidation=Strict`, kubectl's default, and always by
//! server-side apply), except `spec.topologyKeys` of a Service, which the seeds' Service
//! Topology document writes and the dataplane reads.
//!
//! core/v1 and events.k8s.io/v1 Events are one stored object seen through two APIs (upstream's
//! field conversion and per-API validation), and a CRD version's `selectableFields` are
//! checked against its schema as apiextensions-apiserver checks them.
//!
//! Semantics follow kube-apiserver where clients can tell: one increasing resourceVersion,
//! optimistic concurrency (409), all four patch types, `/status` subresources, finalizers,
//! label/field selectors, paging, watches with bookmarks, streaming lists and 410 Gone past a
//! bounded history, Service defaulting/validation/ClusterIP and NodePort allocation, and errors
//! as `kind: Status`.
//!
//! Deliberate differences from kube-apiserver (each keeps the server small; none is visible to
//! the controller or the dataplane):
//! - No authentication, authorisation or admission webhooks: `kubectl auth can-i` gets the
//!   answers of `--authorization-mode=AlwaysAllow` (self access and rules reviews). Objects are stored and answered in
//!   JSON; request bodies may also be YAML, or Kubernetes protobuf for built-in kinds (kubectl
//!   1.32+ and client-go typed clients send them so), which is decoded into the JSON the same
//!   client would have sent. Protobuf is answered only for the `/openapi/v2` document older
//!   kubectl asks for; a client that prefers protobuf responses gets JSON, which client-go reads.
//! - `/openapi/v2` describes every served kind with the fields, required fields and patch
//!   strategies kubectl's client-side validation and `apply` use, but leaves structures this
//!   server does not model (a Pod's spec, a CRD's spec) untyped, so kubectl before 1.27 does
//!   not validate those client side.
//! - New content needs an existing namespace (404, as the NamespaceLifecycle admission plugin
//!   answers) and `default`, `kube-system` and `kube-public` may not be deleted; manifests loaded
//!   as seeds get their namespaces made. A deleted namespace is `Terminating` (creates in it
//!   get 403) until the server's own namespace lifecycle, standing in for
//!   kube-controller-manager's namespace controller, has deleted its contents and finalized it;
//!   objects held by finalizers keep it, and its conditions say which. The lifecycle runs at
//!   once after the delete and again after every change, not on a controller's resync period.
//! - Pods are deleted immediately (no kubelet to drain them; `gracePeriodSeconds` is accepted
//!   and otherwise ignored). `propagationPolicy` is honoured by the server's own garbage
//!   collector, standing in for kube-controller-manager's: it acts on every change at once,
//!   not on a resync period, and owners of kinds this server does not serve are never
//!   considered gone.
//! - Server-side apply merges like a strategic merge patch and removes the fields the same
//!   manager stopped applying (unless another manager owns them); a field another manager
//!   applied with a different value is a 409 conflict unless `force=true`. Ownership is
//!   tracked for applies only: plain updates and patches record no `Update` entries, so they
//!   never cause conflicts.
//! - Custom resources: served versions share one storage with conversion strategy `None`
//!   (webhook conversion is not supported); schema `format`s and CEL
//!   (`x-kubernetes-validations`) are not evaluated; a CRD's deletion removes its objects at
//!   once, finalizers on them included.
//! - Events expire a TTL after their last write (`ApiServerBuilder::event_ttl`, as
//!   kube-apiserver's `--event-ttl`, 1 h by default). kube-apiserver keeps that lease in etcd;
//!   here an Event restored from a state file has its lease counted from its last write as its
//!   own timestamps tell it. Fields core/v1 does not define survive in an Event written through core/v1 but are not
//!   shown through events.k8s.io/v1.
//! - Seeds ([`RunningApiServer::seed`], [`RunningApiServer::apply_manifests`]) are stored
//!   state, not requests: a Service that is not a LoadBalancer keeps the ingress points of its
//!   seeded status (what a cluster stores from before kube 1.29), which a client's write of
//!   `/status` gets kube 1.33's 422 for.
//! - Streaming lists (`watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan`)
//!   are served as kube-apiserver serves them with its `WatchList` feature gate on (the
//!   default in 1.32 and 1.34; 1.33 ships it off and refuses such watches with a 422), so a
//!   watch from resourceVersion "" or "0" that allows bookmarks also gets the
//!   `k8s.io/initial-events-end` bookmark after its initial events.
//! - Only the built-in resources listed above, plus whatever CustomResourceDefinitions define.
//!
//! Benchmark: `cargo bench -p kube-lb-apiserver --bench apiserver` (lists of 10,000
//! Services and watch latency over loopback).
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_lb_apiserver::ApiServer;
//!
//! let server = ApiServer::builder()
//!     .history(100)                                  // small history: forces relists
//!     .service_cidr("10.96.0.0/16".parse()?)
//!     .node_port_range(30000..=30100)
//!     .start()
//!     .await?;
//! let client = server.client()?;                     // kube::Client
//! server.seed(serde_json::json!({
//!     "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
//!     "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.2"}]}
//! }))?;
//! # #[cfg(feature = "faults")] {
//! // Fault injection exists only with the test-only `faults` feature.
//! use kube_lb_apiserver::{FaultAction, FaultRule, Verb};
//! server.faults().add(FaultRule::new(FaultAction::InternalError).verb(Verb::Patch).fraction(0.2));
//! # }
//! # drop(client); Ok(()) }
//! ```

pub mod admission;
pub mod crd;
pub mod events;
pub mod faults;
pub mod garbage_collector;
pub mod http;
pub mod managed;
pub mod meta;
pub mod namespace_lifecycle;
pub mod patch;
pub mod persistence;
pub mod resources;
pub mod selectors;
pub mod server;
pub mod services;
pub mod status;
pub mod store;
pub mod validation;

use std::net::SocketAddr;
use std::path::PathBuf;

#[cfg(feature = "faults")]
pub use faults::{FaultAction, FaultRule};
pub use faults::{Faults, Verb};
pub use server::{ApiServer, ApiServerBuilder, DEFAULT_EVENT_TTL, RunningApiServer};
pub use status::ApiError;

/// Failures of the library API (starting, seeding, writing files).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The state file could not be read or written.
    #[error(transparent)]
    Persist(#[from] persistence::PersistError),
    /// The API rejected an object (seed, manifest, default namespaces).
    #[error("the API server rejected the object: {0}")]
    Api(#[from] ApiError),
    /// An object's `apiVersion`/`kind` is not served.
    #[error("apiVersion {api_version:?} kind {kind:?} is not served by this API server")]
    UnknownKind {
        /// The object's apiVersion.
        api_version: String,
        /// The object's kind.
        kind: String,
    },
    /// An object could not be turned into JSON.
    #[error("the object does not serialise to JSON: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A manifest is not valid YAML.
    #[error("invalid YAML manifest: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    /// Writing a file (kubeconfig) failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The kube-rs client could not be built.
    #[error("cannot build a kube client: {0}")]
    Client(String),
    /// The server's configuration is inconsistent (e.g. two service CIDRs of one family).
    #[error("invalid API server configuration: {0}")]
    Config(String),
}
