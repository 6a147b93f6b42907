//! Watches that survive one undecodable object.
//!
//! A typed kube-rs watcher decodes a whole list response at once, so one object that does not
//! fit k8s-openapi's type (a `nodePort: "30000"` string, a wrong-typed field an extension or a
//! bad write put there) fails the list, the watcher backs off and re-lists, fails again, and
//! the controller stalls on every object of that kind. Here the list and the watch are read as
//! [`RawObject`]s, which always decode, and each object is then decoded on its own: a bad one
//! is skipped with an error naming the object and the field path (rate-limited in the log,
//! counted in `kube_lb_watch_decode_errors_total`, and for a Service published as a Warning
//! Event on it), and every other object flows on.
//!
//! kube's `DeserializeGuard` wraps items the same way, but it still fails the whole list when an
//! object's `metadata` does not decode and its errors name no field path; [`RawObject`] reads
//! what it can of the metadata and [`decode`] names the path.
//!
//! An object that turns undecodable after a good version keeps that good version in the cache
//! (it is simply not updated): tearing down a load balancer because an update could not be read
//! would be worse than reconciling a slightly old spec. A delete always goes through, decoded
//! or not, so nothing stale outlives its object.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{ApiResource, DynamicResourceScope};
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::events::{Events, Reason};
use crate::metrics::Metrics;

/// How long the same decode error of the same object stays out of the log after it was logged
/// at `warn` (re-lists meet it again every few minutes; it is logged at `debug` meanwhile).
pub const LOG_EVERY: Duration = Duration::from_secs(10 * 60);

/// Any Kubernetes object as JSON, with as much of its metadata as could be read. Decoding one
/// never fails, so a list of them never fails because of one item.
#[derive(Debug, Clone, PartialEq)]
pub struct RawObject {
    /// `metadata`, decoded on its own; when it does not decode, only the strings the watch
    /// needs (name, namespace, uid, resourceVersion) are picked out of it.
    pub metadata: ObjectMeta,
    /// Whether `metadata` decoded as a whole (only then is the object named in an Event).
    pub metadata_complete: bool,
    /// The whole object.
    pub value: Value,
}

impl RawObject {
    /// Wraps `value`, reading its metadata as far as it goes.
    pub fn new(value: Value) -> Self {
        let meta = value.get("metadata").cloned().unwrap_or(Value::Null);
        let (metadata, metadata_complete) = match serde_json::from_value::<ObjectMeta>(meta) {
            Ok(metadata) => (metadata, true),
            Err(_) => {
                let field = |name: &str| {
                    value
                        .pointer(&format!("/metadata/{name}"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                let metadata = ObjectMeta {
                    name: field("name"),
                    namespace: field("namespace"),
                    uid: field("uid"),
                    resource_version: field("resourceVersion"),
                    ..ObjectMeta::default()
                };
                (metadata, false)
            }
        };
        Self {
            metadata,
            metadata_complete,
            value,
        }
    }

    /// `namespace/name`, or `name` for cluster-scoped objects.
    pub fn display_name(&self) -> String {
        let name = self.metadata.name.as_deref().unwrap_or("<unnamed>");
        match self.metadata.namespace.as_deref() {
            Some(namespace) => format!("{namespace}/{name}"),
            None => name.to_string(),
        }
    }
}

impl<'de> serde::Deserialize<'de> for RawObject {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Self::new)
    }
}

impl serde::Serialize for RawObject {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(serializer)
    }
}

impl Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// One object that does not decode into its type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot decode {kind} {object} at {path}: {message}")]
pub struct DecodeError {
    /// The kind (`Service`).
    pub kind: String,
    /// `namespace/name` of the object.
    pub object: String,
    /// Where in the object decoding failed (`spec.ports[0].nodePort`; `.` for the root).
    pub path: String,
    /// What was wrong there.
    pub message: String,
}

/// Decodes `raw` into `K`, naming the field path of the first mismatch.
pub fn decode<K>(raw: &RawObject) -> Result<K, DecodeError>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    serde_path_to_error::deserialize::<_, K>(&raw.value).map_err(|error| DecodeError {
        kind: K::kind(&()).into_owned(),
        object: raw.display_name(),
        path: error.path().to_string(),
        message: error.inner().to_string(),
    })
}

/// A watcher event of raw objects turned into one of `K`, or the object that does not decode
/// (with why), which is then not passed on.
///
/// A `Delete` whose object does not decode still removes the object, from its metadata alone.
pub fn decode_event<K>(
    event: watcher::Event<RawObject>,
) -> Result<watcher::Event<K>, Box<(RawObject, DecodeError)>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Default,
{
    use watcher::Event;
    match event {
        Event::Init => Ok(Event::Init),
        Event::InitDone => Ok(Event::InitDone),
        Event::InitApply(raw) => match decode(&raw) {
            Ok(object) => Ok(Event::InitApply(object)),
            Err(error) => Err(Box::new((raw, error))),
        },
        Event::Apply(raw) => match decode(&raw) {
            Ok(object) => Ok(Event::Apply(object)),
            Err(error) => Err(Box::new((raw, error))),
        },
        Event::Delete(raw) => Ok(Event::Delete(decode(&raw).unwrap_or_else(|_| {
            let mut object = K::default();
            *object.meta_mut() = raw.metadata;
            object
        }))),
    }
}

/// Decides when the same decode error is worth a `warn` line again.
#[derive(Debug, Default)]
pub struct LogLimiter {
    /// Per `kind namespace/name`: the error text last logged and when.
    logged: HashMap<String, (String, Instant)>,
}

impl LogLimiter {
    /// True when `error` is to be logged at `warn` at `now`: the first time, when the error of
    /// that object changed, or [`LOG_EVERY`] after it was last logged.
    pub fn allow(&mut self, error: &DecodeError, now: Instant) -> bool {
        // Entries older than the interval would be allowed anyway: dropping them keeps the map
        // as small as the set of objects failing right now.
        self.logged
            .retain(|_, (_, at)| now.duration_since(*at) < LOG_EVERY);
        let key = format!("{} {}", error.kind, error.object);
        let text = error.to_string();
        if self.logged.get(&key).is_some_and(|(last, _)| *last == text) {
            return false;
        }
        self.logged.insert(key, (text, now));
        true
    }
}

/// What to do about an object that does not decode, besides skipping it.
pub trait OnReject: Send + Sync {
    /// Called once per occurrence (every list and watch event that carries the bad object).
    fn reject(
        &self,
        raw: &RawObject,
        error: &DecodeError,
    ) -> futures::future::BoxFuture<'static, ()>;
}

/// Logs (rate-limited) and counts rejects of one resource.
pub struct Rejects {
    resource: &'static str,
    metrics: Arc<Metrics>,
    limiter: Mutex<LogLimiter>,
}

impl std::fmt::Debug for Rejects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rejects")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl Rejects {
    /// Rejects of `resource` (a plural name, the metric label).
    pub fn new(resource: &'static str, metrics: Arc<Metrics>) -> Self {
        Self {
            resource,
            metrics,
            limiter: Mutex::default(),
        }
    }

    /// Counts `error` and logs it, at `warn` when the limiter allows, else at `debug`.
    pub fn record(&self, error: &DecodeError) {
        self.metrics.watch_decode_error(self.resource);
        let loud = self
            .limiter
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .allow(error, Instant::now());
        if loud {
            tracing::warn!(
                kind = %error.kind,
                object = %error.object,
                path = %error.path,
                error = %error.message,
                "skipping an object that does not decode; the others are still watched"
            );
        } else {
            tracing::debug!(kind = %error.kind, object = %error.object, path = %error.path, error = %error.message, "object still does not decode");
        }
    }
}

impl OnReject for Rejects {
    fn reject(
        &self,
        _raw: &RawObject,
        error: &DecodeError,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.record(error);
        Box::pin(std::future::ready(()))
    }
}

/// Rejects of Services: logged and counted like any other, and published as a Warning Event
/// on the Service naming the field path, when its metadata decoded (an Event needs its uid).
/// The event layer publishes the same note for the same Service only once per half hour.
pub struct ServiceRejects {
    rejects: Rejects,
    events: Events,
}

impl std::fmt::Debug for ServiceRejects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceRejects").finish_non_exhaustive()
    }
}

impl ServiceRejects {
    /// Rejects counted on `metrics` and published through `events`.
    pub fn new(metrics: Arc<Metrics>, events: Events) -> Self {
        Self {
            rejects: Rejects::new("services", metrics),
            events,
        }
    }
}

impl OnReject for ServiceRejects {
    fn reject(
        &self,
        raw: &RawObject,
        error: &DecodeError,
    ) -> futures::future::BoxFuture<'static, ()> {
        self.rejects.record(error);
        let named = raw.metadata_complete
            && raw.metadata.name.is_some()
            && raw.metadata.namespace.is_some()
            && raw.metadata.uid.is_some();
        if !named {
            return Box::pin(std::future::ready(()));
        }
        let service = Service {
            metadata: raw.metadata.clone(),
            ..Service::default()
        };
        let note = format!(
            "the Service does not decode at {}: {}; it is skipped until it changes (other Services are unaffected)",
            error.path, error.message
        );
        let events = self.events.clone();
        Box::pin(async move { events.publish(&service, Reason::DecodeFailed, note).await })
    }
}

/// A watcher of every `K` in the cluster that decodes objects one by one and hands those that
/// do not decode to `on_reject` instead of failing the list. Errors of the watch itself (the
/// API server down, 410 Gone) pass through, for the caller's backoff.
pub fn watch_all<K>(
    client: Client,
    config: watcher::Config,
    on_reject: Arc<dyn OnReject>,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Default + Send + 'static,
{
    let api: Api<RawObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    watcher(api, config).filter_map(move |event| {
        let on_reject = on_reject.clone();
        async move {
            let event = match event {
                Ok(event) => event,
                Err(error) => return Some(Err(error)),
            };
            match decode_event::<K>(event) {
                Ok(decoded) => Some(Ok(decoded)),
                Err(rejected) => {
                    let (raw, error) = *rejected;
                    on_reject.reject(&raw, &error).await;
                    None
                }
            }
        }
    })
}

/// Lists every `K`, decoding items one by one: the decoded objects, and the errors of those
/// that do not decode.
pub async fn list_all<K>(client: Client) -> Result<(Vec<K>, Vec<DecodeError>), kube::Error>
where
    K: Resource<DynamicType = ()> + DeserializeOwned,
{
    let api: Api<RawObject> = Api::all_with(client, &ApiResource::erase::<K>(&()));
    let list = api.list(&Default::default()).await?;
    let mut objects = Vec::with_capacity(list.items.len());
    let mut errors = Vec::new();
    for raw in &list.items {
        match decode::<K>(raw) {
            Ok(object) => objects.push(object),
            Err(error) => errors.push(error),
        }
    }
    Ok((objects, errors))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    use serde_json::json;

    use super::*;

    fn service(port: Value) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1", "resourceVersion": "7"},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "nodePort": port}]}
        })
    }

    #[test]
    fn raw_objects_always_decode_and_keep_what_the_watch_needs() {
        let cases = [
            // (object, name, namespace, resourceVersion, metadata complete)
            (
                service(json!(30000)),
                Some("web"),
                Some("shop"),
                Some("7"),
                true,
            ),
            (
                service(json!("30000")),
                Some("web"),
                Some("shop"),
                Some("7"),
                true,
            ),
            (
                json!({"metadata": {"name": "n1", "resourceVersion": "9", "labels": ["not", "a", "map"]}}),
                Some("n1"),
                None,
                Some("9"),
                false,
            ),
            // No metadata at all: nothing to name, nothing to resume from.
            (json!({"kind": "Service"}), None, None, None, false),
            (json!(42), None, None, None, false),
        ];
        for (value, name, namespace, rv, complete) in cases {
            let raw: RawObject = serde_json::from_value(value.clone()).unwrap();
            assert_eq!(raw.metadata.name.as_deref(), name, "{value}");
            assert_eq!(raw.metadata.namespace.as_deref(), namespace, "{value}");
            assert_eq!(raw.metadata.resource_version.as_deref(), rv, "{value}");
            assert_eq!(raw.metadata_complete, complete, "{value}");
            assert_eq!(raw.value, value);
        }
    }

    #[test]
    fn decode_errors_name_the_object_and_the_field_path() {
        let node_bad = json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2"},
            "spec": {"unschedulable": "yes"}
        });
        let slice_bad = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "s", "namespace": "shop"},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": "true"}}]
        });
        // (outcome, expected (kind, object, path) of the error)
        type Case<'a> = (Result<(), DecodeError>, Option<(&'a str, &'a str, &'a str)>);
        let cases: [Case; 4] = [
            (
                decode::<Service>(&RawObject::new(service(json!(30000)))).map(drop),
                None,
            ),
            (
                decode::<Service>(&RawObject::new(service(json!("30000")))).map(drop),
                Some(("Service", "shop/web", "spec.ports[0].nodePort")),
            ),
            (
                decode::<Node>(&RawObject::new(node_bad)).map(drop),
                Some(("Node", "n2", "spec.unschedulable")),
            ),
            (
                decode::<EndpointSlice>(&RawObject::new(slice_bad)).map(drop),
                Some(("EndpointSlice", "shop/s", "endpoints[0].conditions.ready")),
            ),
        ];
        for (got, want) in cases {
            match (got, want) {
                (Ok(()), None) => {}
                (Err(error), Some((kind, object, path))) => {
                    assert_eq!(
                        (
                            error.kind.as_str(),
                            error.object.as_str(),
                            error.path.as_str()
                        ),
                        (kind, object, path),
                        "{error}"
                    );
                    assert!(error.to_string().contains(path), "{error}");
                }
                (got, want) => panic!("got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn events_pass_good_objects_skip_bad_ones_and_always_delete() {
        use watcher::Event;
        let good = || RawObject::new(service(json!(30000)));
        let bad = || RawObject::new(service(json!("30000")));
        let name = |e: &Event<Service>| match e {
            Event::Apply(s) | Event::InitApply(s) | Event::Delete(s) => s.metadata.name.clone(),
            Event::Init | Event::InitDone => None,
        };
        // (event, passed on as, with a decode error)
        let cases: Vec<(Event<RawObject>, Option<&str>, bool)> = vec![
            (Event::Init, Some("Init"), false),
            (Event::InitApply(good()), Some("InitApply"), false),
            (Event::InitApply(bad()), None, true),
            (Event::InitDone, Some("InitDone"), false),
            (Event::Apply(good()), Some("Apply"), false),
            (Event::Apply(bad()), None, true),
            (Event::Delete(good()), Some("Delete"), false),
            (Event::Delete(bad()), Some("Delete"), false),
        ];
        for (event, want, errs) in cases {
            let label = format!("{event:?}");
            let (out, error) = match decode_event::<Service>(event) {
                Ok(out) => (Some(out), None),
                Err(rejected) => (None, Some(*rejected)),
            };
            assert_eq!(error.is_some(), errs, "{label}");
            if let Some((raw, error)) = &error {
                assert_eq!(raw.metadata.name.as_deref(), Some("web"), "{label}");
                assert_eq!(error.path, "spec.ports[0].nodePort", "{label}");
            }
            let got = out.as_ref().map(|e| match e {
                Event::Init => "Init",
                Event::InitApply(_) => "InitApply",
                Event::InitDone => "InitDone",
                Event::Apply(_) => "Apply",
                Event::Delete(_) => "Delete",
            });
            assert_eq!(got, want, "{label}");
            if let Some(event) = &out
                && !matches!(event, Event::Init | Event::InitDone)
            {
                assert_eq!(name(event).as_deref(), Some("web"), "{label}");
            }
        }
    }

    #[test]
    fn the_same_error_is_logged_loudly_once_per_interval() {
        let error = |object: &str, path: &str| DecodeError {
            kind: "Service".into(),
            object: object.into(),
            path: path.into(),
            message: "invalid type".into(),
        };
        let mut limiter = LogLimiter::default();
        let t0 = Instant::now();
        let secs = Duration::from_secs;
        let steps = [
            // (object, path, seconds after t0, loud)
            ("a/x", "spec.ports[0].nodePort", 0, true),
            ("a/x", "spec.ports[0].nodePort", 60, false),
            ("a/y", "spec.ports[0].nodePort", 60, true),
            ("a/x", "spec.type", 120, true),
            ("a/x", "spec.type", 130, false),
            ("a/x", "spec.type", 120 + LOG_EVERY.as_secs(), true),
        ];
        for (object, path, at, loud) in steps {
            assert_eq!(
                limiter.allow(&error(object, path), t0 + secs(at)),
                loud,
                "{object} {path} at {at}s"
            );
        }
    }
}
