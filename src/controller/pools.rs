//! `IPPool`s for the `local` provider: watches the `kube-lb.io/v1alpha1` custom resources and
//! the namespaces' labels, hands them to the provider, writes each pool's status (assigned /
//! available per family, conditions for invalid entries, overlaps and stranded addresses),
//! publishes a Warning event on a pool whose spec is wrong, and writes the pool each Service's
//! address came from back into the Service (`kube-lb.io/ip-allocated-from-pool`).
//!
//! It also watches Services and tells the provider which addresses each one shows in its
//! status ([`LocalProvider::observe`]): an address a live Service shows is taken by it, whoever
//! wrote it, and no address is handed out before the first list. When two Services that may not
//! share an address both claim it anyway (a status written by another process, a hand edit),
//! the one that claimed it later gets a Warning naming the other and its stale address is
//! removed from its status, so it is reconciled and given another one.
//!
//! The CRD is optional: while the API server does not serve `ippools`, the provider keeps its
//! `--local-pool` ranges and the CRD is looked for again every [`CRD_RECHECK`]. Every write is
//! made only while this replica leads.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use kube_lb_annotations::{Cloud, ServiceKey, keys};
use kube_lb_provider_local::{
    Conflict, LocalLoadBalancers, LocalProvider, PoolDef, PoolStatus, Request, Shown, ippool,
};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The `IPPool` CRD manifest (the one in `deploy/base/`), which `kube-lb up` installs.
pub const IPPOOL_CRD: &str = include_str!("../../deploy/base/ippool-crd.yaml");

/// How often the CRD is looked for while the API server does not serve it.
pub const CRD_RECHECK: Duration = Duration::from_secs(30);

/// Pools, allocations and namespaces change in bursts (a pass over hundreds of Services); the
/// status writer waits this long after a change so a burst costs one write per pool.
const SETTLE: Duration = Duration::from_millis(300);

/// The `IPPool` resource.
pub fn ippool_resource() -> ApiResource {
    ApiResource {
        group: ippool::GROUP.to_string(),
        version: ippool::VERSION.to_string(),
        api_version: format!("{}/{}", ippool::GROUP, ippool::VERSION),
        kind: ippool::KIND.to_string(),
        plural: ippool::PLURAL.to_string(),
    }
}

/// The pools the provider should use, from the stored objects.
pub fn pool_defs(objects: &[Arc<DynamicObject>]) -> Vec<PoolDef> {
    objects
        .iter()
        .map(|o| PoolDef::from_json(&o.name_any(), o.data.get("spec").unwrap_or(&Value::Null)))
        .collect()
}

fn capped(count: u128) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// The `status` an `IPPool` should show, keeping the transition time of each condition whose
/// truth did not change since `current`.
pub fn status_json(status: &PoolStatus, current: Option<&Value>, now: &Time) -> Value {
    let conditions: Vec<Value> = status
        .conditions()
        .into_iter()
        .map(|c| {
            let truth = if c.status { "True" } else { "False" };
            let since = current
                .and_then(|s| s.get("conditions"))
                .and_then(Value::as_array)
                .and_then(|all| all.iter().find(|x| x["type"] == c.type_))
                .filter(|x| x["status"] == truth)
                .and_then(|x| x.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now));
            json!({
                "type": c.type_,
                "status": truth,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
            })
        })
        .collect();
    json!({
        "ipv4": {"assigned": capped(status.ipv4.assigned), "available": capped(status.ipv4.available)},
        "ipv6": {"assigned": capped(status.ipv6.assigned), "available": capped(status.ipv6.available)},
        "conditions": conditions,
    })
}

/// Runs until `shutdown`: finds the CRD, then keeps `local` fed and the statuses written.
/// Allocations wait from this call until the pools are read (or the CRD is found missing), so
/// call it before the controller starts.
pub fn run(
    client: Client,
    local: Arc<LocalProvider>,
    leading: watch::Receiver<bool>,
    identity: String,
    shutdown: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    local.hold_until_pools_known();
    local.hold_until_services_known();
    let services = watch_services(
        client.clone(),
        local.clone(),
        leading.clone(),
        identity.clone(),
        shutdown.clone(),
    );
    let pools = sync(client, local, leading, identity, shutdown);
    async move {
        futures::join!(services, pools);
    }
}

fn system_time(time: &Time) -> SystemTime {
    SystemTime::from(time.0)
}

/// What `service` shows in its status, as the allocator takes it; `None` when it shows no IP
/// or is not a load balancer of kube-lb's (no finalizer: never given an address by kube-lb).
pub fn shown_of(service: &Service) -> Option<Shown> {
    if !service
        .finalizers()
        .iter()
        .any(|f| f == crate::controller::FINALIZER)
    {
        return None;
    }
    let ips: Vec<IpAddr> = service
        .status
        .as_ref()?
        .load_balancer
        .as_ref()?
        .ingress
        .as_deref()?
        .iter()
        .filter_map(|i| i.ip.as_deref()?.parse().ok())
        .collect();
    if ips.is_empty() {
        return None;
    }
    let since = crate::controller::conditions::current(service)
        .filter(|c| c.status == "True")
        .map(|c| system_time(&c.last_transition_time));
    let terms = kube_lb_annotations::parse(Cloud::Local, service)
        .ok()
        .map(|parsed| Request::from_spec(&parsed.spec).terms());
    Some(Shown {
        ips,
        since,
        created: service
            .metadata
            .creation_timestamp
            .as_ref()
            .map(system_time),
        terms,
    })
}

/// Services that do not decode are reported by the controller's own watch; here they are
/// only skipped.
struct SkipUndecodable;

impl crate::controller::tolerant::OnReject for SkipUndecodable {
    fn reject(
        &self,
        _raw: &crate::controller::tolerant::RawObject,
        error: &crate::controller::tolerant::DecodeError,
    ) -> futures::future::BoxFuture<'static, ()> {
        tracing::debug!(object = %error.object, error = %error.message, "skipping a Service that does not decode");
        Box::pin(std::future::ready(()))
    }
}

/// Feeds the provider what every Service shows, and resolves conflicts (see the module doc).
async fn watch_services(
    client: Client,
    local: Arc<LocalProvider>,
    leading: watch::Receiver<bool>,
    identity: String,
    shutdown: CancellationToken,
) {
    let (store, writer) = reflector::store::<Service>();
    let mut events = crate::controller::tolerant::watch_all::<Service>(
        client.clone(),
        watcher::Config::default(),
        Arc::new(SkipUndecodable),
    )
    .default_backoff()
    .reflect(writer)
    .boxed();
    let mut resolver = ConflictResolver::new(client, identity);
    let mut listed = false;
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        let Some(event) = event else {
            return;
        };
        match event {
            Ok(watcher::Event::InitDone) => {
                // A first list or a relist: replaces everything, so a Service deleted while
                // the watch was down is forgotten too.
                let all: HashMap<ServiceKey, Shown> = store
                    .state()
                    .iter()
                    .filter_map(|s| Some((crate::controller::service_key(s).ok()?, shown_of(s)?)))
                    .collect();
                local.observe_all(all);
                listed = true;
            }
            Ok(watcher::Event::Apply(service)) if listed => {
                if let Ok(key) = crate::controller::service_key(&service) {
                    local.observe(&key, shown_of(&service));
                }
            }
            Ok(watcher::Event::Delete(service)) if listed => {
                if let Ok(key) = crate::controller::service_key(&service) {
                    local.forget(&key);
                }
            }
            Ok(_) => continue,
            Err(error) => {
                tracing::debug!(%error, "Service watch error; retried with backoff");
                continue;
            }
        }
        if *leading.borrow() {
            resolver.resolve(&local.conflicts(), &store).await;
        }
    }
}

/// Tells the Service that lost an address to another one, and removes the address from its
/// status so the controller reconciles it and gives it another (or says why it waits).
struct ConflictResolver {
    client: Client,
    reporter: Reporter,
    /// (loser uid, address, winner) already announced.
    announced: HashSet<(String, IpAddr, ServiceKey)>,
}

impl ConflictResolver {
    fn new(client: Client, identity: String) -> Self {
        Self {
            client,
            reporter: Reporter {
                controller: "kube-lb-ippool".to_string(),
                instance: Some(identity),
            },
            announced: HashSet::new(),
        }
    }

    async fn resolve(&mut self, conflicts: &[Conflict], store: &Store<Service>) {
        let current: HashSet<(String, IpAddr, ServiceKey)> = conflicts
            .iter()
            .map(|c| (c.loser.uid.clone(), c.ip, c.winner.clone()))
            .collect();
        // A conflict that ended may come back later: announce it again then.
        self.announced.retain(|a| current.contains(a));
        for conflict in conflicts {
            let reference =
                ObjectRef::<Service>::new(&conflict.loser.name).within(&conflict.loser.namespace);
            let Some(loser) = store.get(&reference) else {
                continue;
            };
            if loser.uid().as_deref() != Some(conflict.loser.uid.as_str()) {
                continue;
            }
            let id = (
                conflict.loser.uid.clone(),
                conflict.ip,
                conflict.winner.clone(),
            );
            if !self.announced.contains(&id) {
                tracing::warn!(service = %conflict.loser, winner = %conflict.winner, ip = %conflict.ip, "address conflict: the Service that claimed the address later gets another one");
                self.announce(&loser, conflict).await;
                self.announced.insert(id);
            }
            self.clear_stale(&loser, conflict.ip).await;
        }
    }

    async fn announce(&self, loser: &Service, conflict: &Conflict) {
        let event = Event {
            type_: EventType::Warning,
            reason: "AddressConflict".to_string(),
            note: Some(
                crate::controller::events::cut_note(&conflict.to_string(), 1024).into_owned(),
            ),
            action: "Allocate".to_string(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(error) = recorder.publish(&event, &loser.object_ref(&())).await {
            tracing::warn!(service = %conflict.loser, %error, "could not publish the address conflict");
        }
    }

    /// Removes `ip` from the ingress `loser` shows, guarded by its resourceVersion: a write
    /// made since (the controller giving it another address) is never undone.
    async fn clear_stale(&self, loser: &Service, ip: IpAddr) {
        let ingress: Vec<&k8s_openapi::api::core::v1::LoadBalancerIngress> = loser
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .collect();
        let shows = |i: &&&k8s_openapi::api::core::v1::LoadBalancerIngress| {
            i.ip.as_deref().and_then(|s| s.parse::<IpAddr>().ok()) == Some(ip)
        };
        if !ingress.iter().any(|i| shows(&i)) {
            return;
        }
        let kept: Vec<&&k8s_openapi::api::core::v1::LoadBalancerIngress> =
            ingress.iter().filter(|i| !shows(i)).collect();
        let patch = json!({
            "metadata": {"uid": loser.uid(), "resourceVersion": loser.resource_version()},
            "status": {"loadBalancer": {"ingress": kept}},
        });
        let api: Api<Service> =
            Api::namespaced(self.client.clone(), &loser.namespace().unwrap_or_default());
        if let Err(error) = api
            .patch_status(
                &loser.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            tracing::debug!(service = %loser.name_any(), %error, "could not remove the lost address from the status; retried at the next change");
        }
    }
}

async fn sync(
    client: Client,
    local: Arc<LocalProvider>,
    leading: watch::Receiver<bool>,
    identity: String,
    shutdown: CancellationToken,
) {
    let pools: Api<DynamicObject> = Api::all_with(client.clone(), &ippool_resource());
    loop {
        match pools.list(&ListParams::default().limit(1)).await {
            Ok(_) => break,
            Err(kube::Error::Api(status)) if status.code == 404 => {
                local.set_pools(Vec::new());
                tracing::info!(
                    "IPPool CRD not installed; the local provider uses its --local-pool ranges"
                );
            }
            Err(error) => tracing::warn!(%error, "listing IPPools failed; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(CRD_RECHECK) => {}
        }
    }
    tracing::info!("watching IPPools");
    let pool_writer = reflector::store::Writer::<DynamicObject>::new(ippool_resource());
    let pool_store = pool_writer.as_reader();
    let pool_events = watcher(pools, watcher::Config::default())
        .default_backoff()
        .reflect(pool_writer)
        .map(|_| ())
        .boxed();
    let (ns_store, ns_writer) = reflector::store::<Namespace>();
    let ns_events = watcher(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(ns_writer)
    .map(|_| ())
    .boxed();
    let mut events = futures::stream::select(pool_events, ns_events);
    let mut writer = StatusWriter::new(client, local.clone(), pool_store.clone(), identity);
    let mut allocations = local.subscribe();
    let mut dirty = true;
    loop {
        let settle = async {
            if dirty {
                tokio::time::sleep(SETTLE).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => {
                if event.is_none() {
                    return;
                }
                // Not awaited: the stores become ready only as this loop polls the watches.
                let listed = |store: &Store<DynamicObject>| {
                    futures::FutureExt::now_or_never(store.wait_until_ready())
                        .is_some_and(|r| r.is_ok())
                };
                let ns_listed = futures::FutureExt::now_or_never(ns_store.wait_until_ready())
                    .is_some_and(|r| r.is_ok());
                if !listed(&pool_store) || !ns_listed {
                    continue;
                }
                local.set_pools(pool_defs(&pool_store.state()));
                local.set_namespace_labels(namespace_labels(&ns_store));
                dirty = true;
            }
            changed = allocations.changed() => {
                if changed.is_err() {
                    return;
                }
                dirty = true;
            }
            () = settle => {
                if *leading.borrow() {
                    let lbs = allocations.borrow_and_update().clone();
                    writer.write(&lbs).await;
                }
                dirty = false;
            }
        }
    }
}

fn namespace_labels(store: &Store<Namespace>) -> HashMap<String, BTreeMap<String, String>> {
    store
        .state()
        .iter()
        .map(|ns| (ns.name_any(), ns.labels().clone()))
        .collect()
}

/// Writes pool statuses, pool events and Service annotations, each only when it changed.
struct StatusWriter {
    client: Client,
    local: Arc<LocalProvider>,
    pools: Store<DynamicObject>,
    reporter: Reporter,
    /// The problems last published as an event, per pool.
    announced: HashMap<String, String>,
    /// The pool last written into each Service's annotation, by namespace/name/uid.
    written: HashMap<(String, String, String), String>,
}

impl StatusWriter {
    fn new(
        client: Client,
        local: Arc<LocalProvider>,
        pools: Store<DynamicObject>,
        identity: String,
    ) -> Self {
        Self {
            client,
            local,
            pools,
            reporter: Reporter {
                controller: "kube-lb-ippool".to_string(),
                instance: Some(identity),
            },
            announced: HashMap::new(),
            written: HashMap::new(),
        }
    }

    async fn write(&mut self, lbs: &LocalLoadBalancers) {
        let statuses = self.local.pool_statuses();
        let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &ippool_resource());
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        for object in self.pools.state() {
            let name = object.name_any();
            let Some(status) = statuses.get(&name) else {
                continue;
            };
            let current = object.data.get("status");
            let desired = status_json(status, current, &now);
            if current != Some(&desired) {
                let patch = json!({"status": desired});
                if let Err(error) = api
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    tracing::warn!(pool = %name, %error, "could not write the IPPool status");
                }
            }
            let problems = status.problems.join("; ");
            if self.announced.get(&name) != Some(&problems) {
                if !problems.is_empty() {
                    self.announce(&object, &problems).await;
                }
                self.announced.insert(name, problems);
            }
        }
        self.write_back(lbs).await;
    }

    async fn announce(&self, object: &DynamicObject, problems: &str) {
        let reference = object.object_ref(&ippool_resource());
        let event = Event {
            type_: EventType::Warning,
            reason: "InvalidIPPool".to_string(),
            note: Some(crate::controller::events::cut_note(problems, 1024).into_owned()),
            action: "Validate".to_string(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(error) = recorder.publish(&event, &reference).await {
            tracing::warn!(pool = %object.name_any(), %error, "could not publish the IPPool event");
        }
    }

    /// Writes `kube-lb.io/ip-allocated-from-pool` on every Service whose address came from
    /// an `IPPool` and does not say so yet.
    async fn write_back(&mut self, lbs: &LocalLoadBalancers) {
        let custom: std::collections::BTreeSet<String> =
            self.pools.state().iter().map(|o| o.name_any()).collect();
        self.written.retain(|(ns, name, uid), _| {
            lbs.keys()
                .any(|k| &k.namespace == ns && &k.name == name && &k.uid == uid)
        });
        for (service, lb) in lbs {
            let Some(pool) = lb.pool.as_ref().filter(|p| custom.contains(*p)) else {
                continue;
            };
            let id = (
                service.namespace.clone(),
                service.name.clone(),
                service.uid.clone(),
            );
            if lb.written_pool.as_ref() == Some(pool) || self.written.get(&id) == Some(pool) {
                continue;
            }
            let api: Api<Service> = Api::namespaced(self.client.clone(), &service.namespace);
            // Guarded by the uid: a Service deleted and re-created meanwhile is not touched.
            let patch = json!({"metadata": {
                "uid": service.uid,
                "annotations": {keys::local::ALLOCATED_FROM_POOL: pool},
            }});
            match api
                .patch(
                    &service.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.written.insert(id, pool.clone());
                }
                Err(error) => {
                    tracing::debug!(service = %service, %error, "could not write the pool annotation");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(finalized: bool, ingress: &[&str], ready: Option<&str>, shared: bool) -> Service {
        serde_json::from_value(json!({
            "metadata": {
                "name": "web", "namespace": "d", "uid": "u1",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "finalizers": if finalized { vec![crate::controller::FINALIZER] } else { vec![] },
                "annotations": if shared {
                    json!({keys::local::ALLOW_SHARED_IP: "dns"})
                } else {
                    json!({})
                },
            },
            "spec": {"type": "LoadBalancer", "ports": [{"port": 53, "protocol": "UDP"}]},
            "status": {
                "loadBalancer": {"ingress": ingress.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>()},
                "conditions": ready.map(|status| vec![json!({
                    "type": crate::controller::conditions::CONDITION_TYPE,
                    "status": status, "reason": "Provisioned", "message": "",
                    "lastTransitionTime": "2026-02-01T00:00:00Z",
                })]).unwrap_or_default(),
            },
        }))
        .unwrap()
    }

    #[test]
    fn what_a_service_shows_and_since_when() {
        let at = |s: &str| {
            Some(SystemTime::from(
                s.parse::<k8s_openapi::jiff::Timestamp>().unwrap(),
            ))
        };
        // (case, Service, addresses, since, sharing key)
        let cases = [
            (
                "not kube-lb's",
                service(false, &["10.0.0.1"], Some("True"), false),
                None,
            ),
            ("no address", service(true, &[], Some("True"), false), None),
            (
                "Ready: shown since the condition turned True",
                service(true, &["10.0.0.1", "fd00::1"], Some("True"), true),
                Some((
                    vec!["10.0.0.1", "fd00::1"],
                    at("2026-02-01T00:00:00Z"),
                    Some("dns"),
                )),
            ),
            (
                "not Ready: since unknown",
                service(true, &["10.0.0.1"], Some("False"), false),
                Some((vec!["10.0.0.1"], None, None)),
            ),
        ];
        for (case, svc, want) in cases {
            let got = shown_of(&svc).map(|s| {
                let ips: Vec<String> = s.ips.iter().map(ToString::to_string).collect();
                assert_eq!(s.created, at("2026-01-01T00:00:00Z"), "{case}");
                (ips, s.since, s.terms.and_then(|t| t.key))
            });
            let want = want.map(|(ips, since, key)| {
                (
                    ips.into_iter().map(String::from).collect::<Vec<_>>(),
                    since,
                    key.map(String::from),
                )
            });
            assert_eq!(got, want, "{case}");
        }
    }

    #[test]
    fn status_keeps_transition_times_of_unchanged_conditions() {
        let then = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let now = Time("2026-06-01T00:00:00Z".parse().unwrap());
        let mut status = PoolStatus::default();
        status.ipv4.available = 10;
        status.ipv6.available = u128::MAX;
        let first = status_json(&status, None, &then);
        assert_eq!(first["ipv6"]["available"], json!(i64::MAX));
        status.stranded = vec!["10.0.0.1 (d/web)".into()];
        let second = status_json(&status, Some(&first), &now);
        let time_of = |v: &Value, t: &str| {
            v["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == t)
                .unwrap()["lastTransitionTime"]
                .clone()
        };
        assert_eq!(time_of(&second, "Valid"), json!(then));
        assert_eq!(time_of(&second, "AddressesStranded"), json!(now));
        // Nothing changed: the same status, so no write.
        assert_eq!(status_json(&status, Some(&second), &now), second);
    }
}
