//! Watch streams: newline-delimited JSON events, bookmarks, initial events and expiry.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};

use super::AppState;
use super::params::{Params, WatchStart};
use crate::resources::Entry;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Event, EventType, WatchFrom, view};

/// Annotation on the bookmark that ends the initial events of a streaming list.
pub const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Which events of the store one watch passes on.
#[derive(Debug, Clone)]
struct Filter {
    /// The resource watched (its storage slot names the events).
    entry: Entry,
    /// Wrap each object in a one-row Table (kubectl `get -w`).
    table: bool,
    /// What Table rows carry.
    include: super::table::IncludeObject,
    namespace: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, object: &Value) -> bool {
        let meta_matches = |field: &str, want: &Option<String>| {
            want.as_deref().is_none_or(|w| {
                object
                    .pointer(&format!("/metadata/{field}"))
                    .and_then(Value::as_str)
                    == Some(w)
            })
        };
        meta_matches("namespace", &self.namespace)
            && meta_matches("name", &self.name)
            && self.labels.matches(object)
            && self.fields.matches(object)
    }

    /// What the watcher sees of a change, with the object as the watched API shows it
    /// (selectors read that form: an events.k8s.io/v1 watch selects by `regarding.name`):
    /// selector watches see an object that stops matching as DELETED and one that starts
    /// matching as ADDED.
    fn translate(&self, event: &Event) -> Option<(EventType, Arc<Value>)> {
        if event.resource != self.entry.storage {
            return None;
        }
        let shown = view(&self.entry, event.object.clone());
        let now = self.matches(&shown);
        let before = || {
            event
                .previous
                .as_ref()
                .is_some_and(|p| self.matches(&view(&self.entry, p.clone())))
        };
        let event_type = match event.event_type {
            EventType::Added => now.then_some(EventType::Added),
            EventType::Deleted => (now || before()).then_some(EventType::Deleted),
            EventType::Modified => match (before(), now) {
                (true, true) => Some(EventType::Modified),
                (false, true) => Some(EventType::Added),
                (true, false) => Some(EventType::Deleted),
                (false, false) => None,
            },
        }?;
        Some((event_type, shown))
    }
}

impl Filter {
    /// The event line for an object (as the watched API shows it), as a Table row when the
    /// client asked for Tables.
    fn event_line(&self, event_type: &str, object: &Arc<Value>, rv: u64) -> Bytes {
        if self.table {
            let key = (
                crate::meta::namespace(object)
                    .unwrap_or_default()
                    .to_string(),
                crate::meta::name(object).unwrap_or_default().to_string(),
            );
            let row = super::table::render(
                &self.entry,
                &[(key, object.clone())],
                rv,
                None,
                self.include,
            );
            line(event_type, &row)
        } else {
            line(event_type, object)
        }
    }
}

fn line(event_type: &str, object: &Value) -> Bytes {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(event_type.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    // Serialising a JSON value into memory cannot fail.
    let _ = serde_json::to_writer(&mut out, object);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

fn bookmark(entry: &Entry, rv: u64, initial_end: bool) -> Bytes {
    let def = &entry.def;
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({INITIAL_EVENTS_END: "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": def.kind, "apiVersion": def.api_version(), "metadata": metadata}),
    )
}

fn expired_line(message: &str) -> Bytes {
    line("ERROR", &ApiError::expired(message).to_status())
}

/// Serves a collection watch.
pub fn serve(
    app: &AppState,
    entry: &Entry,
    resource: crate::resources::ResourceId,
    namespace: Option<&str>,
    params: &Params,
    table: bool,
) -> Result<Response, ApiError> {
    let filter = Filter {
        entry: entry.clone(),
        table,
        include: params.include_object,
        namespace: namespace.map(str::to_string),
        name: None,
        labels: params.labels.clone(),
        fields: params.fields.clone(),
    };
    start(app, resource, filter, params)
}

/// Serves a watch of one object (legacy `/watch/.../name` path).
pub fn serve_one(
    app: &AppState,
    entry: &Entry,
    resource: crate::resources::ResourceId,
    namespace: Option<&str>,
    name: &str,
    params: &Params,
    table: bool,
) -> Result<Response, ApiError> {
    let filter = Filter {
        entry: entry.clone(),
        table,
        include: params.include_object,
        namespace: namespace.map(str::to_string),
        name: Some(name.to_string()),
        labels: params.labels.clone(),
        fields: params.fields.clone(),
    };
    start(app, resource, filter, params)
}

fn start(
    app: &AppState,
    resource: crate::resources::ResourceId,
    filter: Filter,
    params: &Params,
) -> Result<Response, ApiError> {
    params.validate_list_options(true)?;
    let from = match params.watch_from()? {
        WatchStart::Snapshot { not_older_than } => {
            let current = app.store.current_version();
            if not_older_than > current {
                return Err(ApiError::too_large_resource_version(
                    not_older_than,
                    current,
                ));
            }
            WatchFrom::Snapshot
        }
        WatchStart::Now => WatchFrom::Version(app.store.current_version()),
        WatchStart::From(from) => from,
    };
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    match app.store.watch(resource, from) {
        Ok(subscription) => {
            let timeout = params.timeout.unwrap_or(app.max_watch).min(app.max_watch);
            let settings = Settings {
                bookmarks: params.bookmarks,
                // Only with bookmarks allowed (cacher.go / etcd3 watcher.go
                // isInitialEventsEndBookmarkRequired).
                initial_end_bookmark: params.bookmarks && params.sends_initial_events(),
                bookmark_interval: app.bookmark_interval,
                timeout,
            };
            tokio::spawn(pump(tx, subscription, filter, settings));
        }
        Err(error) if error.code == 410 => {
            // kube-apiserver accepts the watch and reports expiry as its first event.
            let message = error.message.clone();
            tokio::spawn(async move {
                let _ = tx.send(expired_line(&message)).await;
            });
        }
        Err(error) => return Err(error),
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
    });
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        Body::from_stream(stream),
    )
        .into_response())
}

#[derive(Debug, Clone, Copy)]
struct Settings {
    bookmarks: bool,
    initial_end_bookmark: bool,
    bookmark_interval: Duration,
    timeout: Duration,
}

/// Feeds one watch connection until the client goes away, the timeout passes or the watcher
/// falls too far behind.
async fn pump(
    tx: mpsc::Sender<Bytes>,
    subscription: crate::store::Subscription,
    filter: Filter,
    settings: Settings,
) {
    let crate::store::Subscription {
        initial,
        backlog,
        resource_version,
        mut live,
    } = subscription;
    let mut last_rv = resource_version;
    for object in initial.iter().filter(|o| filter.matches(o)) {
        if tx
            .send(filter.event_line("ADDED", object, resource_version))
            .await
            .is_err()
        {
            return;
        }
    }
    if settings.initial_end_bookmark
        && tx
            .send(bookmark(&filter.entry, resource_version, true))
            .await
            .is_err()
    {
        return;
    }
    for event in &backlog {
        last_rv = last_rv.max(event.resource_version);
        if let Some((kind, shown)) = filter.translate(event)
            && tx
                .send(filter.event_line(kind.as_str(), &shown, event.resource_version))
                .await
                .is_err()
        {
            return;
        }
    }
    let deadline = tokio::time::sleep(settings.timeout);
    tokio::pin!(deadline);
    let mut ticker = tokio::time::interval(settings.bookmark_interval);
    ticker.reset();
    loop {
        tokio::select! {
            () = &mut deadline => return,
            () = tx.closed() => return,
            _ = ticker.tick(), if settings.bookmarks => {
                if tx.send(bookmark(&filter.entry, last_rv, false)).await.is_err() {
                    return;
                }
            }
            received = live.recv() => match received {
                Ok(event) => {
                    last_rv = last_rv.max(event.resource_version);
                    if let Some((kind, shown)) = filter.translate(&event)
                        && tx
                .send(filter.event_line(kind.as_str(), &shown, event.resource_version))
                .await
                .is_err()
                    {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::debug!(missed, "watcher fell behind; ending its watch with 410");
                    let _ = tx
                        .send(expired_line("the watch fell behind and events were dropped; relist"))
                        .await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
