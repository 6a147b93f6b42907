//! The thin I/O layer over `google-cloud-compute-v1`: one method per Compute call the
//! provider makes, converting between the SDK models and [`crate::model`], counting every
//! call, rate-limiting, retrying throttling in place (honouring `Retry-After`), and waiting for
//! operations with a short poll interval.

use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use google_cloud_compute_v1 as gce;
use google_cloud_compute_v1::model as gm;
use kube_lb_provider_core::options::WaitSettings;
use kube_lb_provider_core::wait::{self, Look};
use kube_lb_provider_core::{CallKind, CloudApi, PageTokens, ProviderError};

use crate::error::{Failure, GcpError};
use crate::model::{
    Address, BackendService, Firewall, ForwardingRule, HealthCheck, HealthCheckKind, InstanceGroup,
    RulePorts, TargetPool, Timing, canon, merge_ranges, parse_range, range_text,
};

/// Longest `Retry-After` honoured in place; longer ones go back to the controller's backoff.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);
/// Instances per `addInstance(s)`/`removeInstance(s)` call (the API's limit is 1000).
const INSTANCE_BATCH: usize = 1000;

/// How operations are polled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollSettings {
    /// First delay between polls.
    pub initial: Duration,
    /// Longest delay between polls.
    pub max: Duration,
    /// Give up (retryable error) after this long.
    pub timeout: Duration,
}

impl Default for PollSettings {
    fn default() -> Self {
        PollSettings {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
            timeout: Duration::from_secs(600),
        }
    }
}

/// Where an operation lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpScope {
    /// `regions/<r>/operations`.
    Region,
    /// `zones/<z>/operations`.
    Zone(String),
    /// `global/operations`.
    Global,
}

/// The outcome of a call: `Ok(Ok(v))` success, `Ok(Err(failure))` an API answer the caller
/// may tolerate (404, in use, …), `Err` a failure that is already classified.
pub type Outcome<T> = Result<Result<T, Failure>, ProviderError>;

/// A collection [`Gce::list`] can list (all of the provider's region, or one zone).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collection {
    /// `regions/<r>/forwardingRules`.
    ForwardingRules,
    /// `regions/<r>/addresses`.
    Addresses,
    /// `regions/<r>/targetPools`.
    TargetPools,
    /// `regions/<r>/backendServices`.
    BackendServices,
    /// `global/httpHealthChecks` (legacy).
    HttpHealthChecks,
    /// `global/healthChecks`.
    HealthChecks,
    /// `global/firewalls`.
    Firewalls,
    /// `zones/<z>/instanceGroups`.
    InstanceGroups(String),
}

/// What a listing keeps of each resource: enough to tell whose it is and what it uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listed {
    /// Name.
    pub name: String,
    /// Description (the owner marks).
    pub description: String,
    /// `creationTimestamp` (RFC 3339).
    pub created: Option<String>,
    /// Links to the resources it uses: a rule's target pool or backend service, a pool's or
    /// backend service's health checks and instance groups.
    pub references: Vec<String>,
}

impl Listed {
    fn new(name: Option<String>, description: Option<String>, created: Option<String>) -> Self {
        Listed {
            name: name.unwrap_or_default(),
            description: description.unwrap_or_default(),
            created,
            references: Vec::new(),
        }
    }
}

/// One page of a Compute list answer: its items and the next page's token.
trait Page {
    type Item;
    fn into_parts(self) -> (Vec<Self::Item>, Option<String>);
}

macro_rules! pages {
    ($($list:ty => $item:ty),* $(,)?) => {$(
        impl Page for $list {
            type Item = $item;
            fn into_parts(self) -> (Vec<$item>, Option<String>) {
                (self.items, self.next_page_token)
            }
        }
    )*};
}

pages!(
    gm::ForwardingRuleList => gm::ForwardingRule,
    gm::AddressList => gm::Address,
    gm::TargetPoolList => gm::TargetPool,
    gm::BackendServiceList => gm::BackendService,
    gm::HttpHealthCheckList => gm::HttpHealthCheck,
    gm::HealthCheckList => gm::HealthCheck,
    gm::FirewallList => gm::Firewall,
    gm::InstanceGroupList => gm::InstanceGroup,
    gm::InstanceList => gm::Instance,
    gm::InstanceGroupsListInstances => gm::InstanceWithNamedPorts,
);

/// The Compute service clients.
#[derive(Debug, Clone)]
struct Clients {
    addresses: gce::client::Addresses,
    forwarding_rules: gce::client::ForwardingRules,
    target_pools: gce::client::TargetPools,
    http_health_checks: gce::client::HttpHealthChecks,
    health_checks: gce::client::HealthChecks,
    firewalls: gce::client::Firewalls,
    backend_services: gce::client::RegionBackendServices,
    instance_groups: gce::client::InstanceGroups,
    instances: gce::client::Instances,
    zones: gce::client::Zones,
    region_operations: gce::client::RegionOperations,
    zone_operations: gce::client::ZoneOperations,
    global_operations: gce::client::GlobalOperations,
}

/// The API surface the provider uses, bound to one project and region.
#[derive(Debug, Clone)]
pub struct Gce {
    clients: Clients,
    api: CloudApi,
    project: String,
    region: String,
    network: String,
    poll: PollSettings,
    /// Longest time one attempt of one call may take (see [`Gce::connect`]).
    attempt_timeout: Duration,
}

macro_rules! client {
    ($ty:ident, $endpoint:expr, $anonymous:expr, $attempt_timeout:expr) => {{
        // Retries are ours (CloudApi), so the SDK's own policy is off to avoid multiplying them.
        // The SDK's default is no attempt timeout at all: a GCE endpoint that accepted the
        // request and never answers (or stalls mid-body) would hold the Service's sync forever.
        let mut builder = gce::client::$ty::builder()
            .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry)
            .with_attempt_timeout($attempt_timeout);
        if let Some(endpoint) = $endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if $anonymous {
            builder = builder.with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        builder.build().await.map_err(|source| GcpError::Client {
            service: stringify!($ty),
            source,
        })?
    }};
}

/// The future of one Compute request: `send!(gce, scope, client.method().setter(value)…)`
/// takes the request builder `gce.clients.client.method()`, sets the project of `gce` and the
/// scope (`global`; `region`, the region of `gce`; or `zone(z)`), then the setters given, and
/// sends it. Every call names its project and scope this one way.
macro_rules! send {
    ($gce:ident, global, $client:ident . $method:ident () $(. $set:ident ($value:expr))*) => {
        $gce.clients
            .$client
            .$method()
            .set_project(&$gce.project)
            $(.$set($value))*
            .send()
    };
    ($gce:ident, region, $client:ident . $method:ident () $(. $set:ident ($value:expr))*) => {
        $gce.clients
            .$client
            .$method()
            .set_project(&$gce.project)
            .set_region(&$gce.region)
            $(.$set($value))*
            .send()
    };
    ($gce:ident, zone($zone:expr), $client:ident . $method:ident () $(. $set:ident ($value:expr))*) => {
        $gce.clients
            .$client
            .$method()
            .set_project(&$gce.project)
            .set_zone($zone)
            $(.$set($value))*
            .send()
    };
}

impl Gce {
    /// Builds every client. `endpoint` overrides the API host (the mock); `anonymous` sends no
    /// credentials, otherwise Application Default Credentials are used. `attempt_timeout`
    /// bounds each attempt of each call, credentials included (the SDK's own timeout starts
    /// only once the token is in hand; a metadata server that never answers would hold the
    /// call before it): a call that gets no answer in time fails as a transient error.
    #[allow(clippy::too_many_arguments)] // one value per setting; a struct would only rename them
    pub async fn connect(
        endpoint: Option<&str>,
        anonymous: bool,
        project: &str,
        region: &str,
        network: &str,
        api: CloudApi,
        poll: PollSettings,
        attempt_timeout: Duration,
    ) -> Result<Gce, GcpError> {
        // The SDK is built without its default TLS provider (no aws-lc C build); install ring.
        // An error only means a provider is installed already, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let clients = Clients {
            addresses: client!(Addresses, endpoint, anonymous, attempt_timeout),
            forwarding_rules: client!(ForwardingRules, endpoint, anonymous, attempt_timeout),
            target_pools: client!(TargetPools, endpoint, anonymous, attempt_timeout),
            http_health_checks: client!(HttpHealthChecks, endpoint, anonymous, attempt_timeout),
            health_checks: client!(HealthChecks, endpoint, anonymous, attempt_timeout),
            firewalls: client!(Firewalls, endpoint, anonymous, attempt_timeout),
            backend_services: client!(RegionBackendServices, endpoint, anonymous, attempt_timeout),
            instance_groups: client!(InstanceGroups, endpoint, anonymous, attempt_timeout),
            instances: client!(Instances, endpoint, anonymous, attempt_timeout),
            zones: client!(Zones, endpoint, anonymous, attempt_timeout),
            region_operations: client!(RegionOperations, endpoint, anonymous, attempt_timeout),
            zone_operations: client!(ZoneOperations, endpoint, anonymous, attempt_timeout),
            global_operations: client!(GlobalOperations, endpoint, anonymous, attempt_timeout),
        };
        Ok(Gce {
            clients,
            api,
            project: project.to_string(),
            region: region.to_string(),
            network: network.to_string(),
            poll,
            attempt_timeout,
        })
    }

    /// The call counter, rate limits and retry policy in use.
    pub fn api(&self) -> &CloudApi {
        &self.api
    }

    // ------------------------------------------------------------------ plumbing

    async fn call<T, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        kind: CallKind,
        f: F,
    ) -> Outcome<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = gce::Result<T>>,
    {
        self.api
            .call(family, operation, kind, || {
                let attempt = tokio::time::timeout(self.attempt_timeout, f());
                async move {
                    let answered = attempt.await.unwrap_or_else(|_| {
                        tracing::debug!(
                            operation,
                            timeout = ?self.attempt_timeout,
                            "no answer in time; giving the attempt up"
                        );
                        Err(crate::error::timed_out(self.attempt_timeout))
                    });
                    match answered {
                        Ok(value) => Ok(Ok(value)),
                        Err(error) => {
                            let failure = Failure::from_client(&error);
                            if failure.is_throttled() {
                                self.api.record_throttled(operation);
                            }
                            if failure.retry_in_place() {
                                if let Some(delay) = failure.retry_after {
                                    tracing::debug!(
                                        operation,
                                        ?delay,
                                        "throttled; honouring Retry-After"
                                    );
                                    tokio::time::sleep(delay.min(MAX_RETRY_AFTER)).await;
                                }
                                Err(failure.into_provider_error(operation))
                            } else {
                                Ok(Err(failure))
                            }
                        }
                    }
                }
            })
            .await
    }

    /// A mutating call followed by waiting for its operation.
    async fn mutate<F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        scope: OpScope,
        f: F,
    ) -> Outcome<()>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = gce::Result<gm::Operation>>,
    {
        match self.call(family, operation, CallKind::Mutate, f).await? {
            Ok(op) => self.wait(op, &scope, operation).await,
            Err(failure) => Ok(Err(failure)),
        }
    }

    /// Waits for operation `op` to be `DONE` (polled in its scope, the pause doubling from
    /// `poll.initial` to `poll.max`) and returns its result; after `poll.timeout` a pending
    /// error the controller retries. Through core's one wait loop ([`wait::until`]).
    async fn wait(
        &self,
        op: gm::Operation,
        scope: &OpScope,
        operation: &'static str,
    ) -> Outcome<()> {
        if is_done(&op) {
            return Ok(operation_result(&op));
        }
        let name = op.name.clone().unwrap_or_default();
        // The first look is the operation as inserted; polling starts one pause later.
        tokio::time::sleep(self.poll.initial).await;
        let settings = WaitSettings {
            first: (self.poll.initial * 2).min(self.poll.max),
            factor: 2.0,
            max_interval: self.poll.max,
            timeout: self.poll.timeout.saturating_sub(self.poll.initial),
        };
        wait::until(
            &settings,
            operation,
            &format!("operation {name}"),
            || async {
                Ok(match self.poll_operation(scope, &name).await? {
                    Ok(next) if is_done(&next) => Look::Done(operation_result(&next)),
                    Ok(next) => Look::Pending(
                        next.status
                            .as_ref()
                            .and_then(|s| s.name())
                            .unwrap_or("RUNNING")
                            .to_owned(),
                    ),
                    Err(failure) => Look::Done(Err(failure)),
                })
            },
        )
        .await
    }

    /// One read of operation `name` in its scope.
    async fn poll_operation(&self, scope: &OpScope, name: &str) -> Outcome<gm::Operation> {
        let (family, read) = ("operations", CallKind::Read);
        match scope {
            OpScope::Region => {
                self.call(family, "regionOperations.get", read, || {
                    send!(self, region, region_operations.get().set_operation(name))
                })
                .await
            }
            OpScope::Zone(zone) => {
                self.call(family, "zoneOperations.get", read, || {
                    send!(self, zone(zone), zone_operations.get().set_operation(name))
                })
                .await
            }
            OpScope::Global => {
                self.call(family, "globalOperations.get", read, || {
                    send!(self, global, global_operations.get().set_operation(name))
                })
                .await
            }
        }
    }

    /// A read that has no "absent" answer (a listing, a lookup by filter): any failure is a
    /// provider error.
    async fn read<T, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        request: F,
    ) -> Result<T, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = gce::Result<T>>,
    {
        self.call(family, operation, CallKind::Read, request)
            .await?
            .map_err(|f| f.into_provider_error(operation))
    }

    /// A read of one resource by name: `Ok(None)` when Compute answers 404, the resource
    /// converted by `convert` otherwise.
    async fn get_one<T, U, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        convert: impl FnOnce(T) -> U,
        request: F,
    ) -> Result<Option<U>, ProviderError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = gce::Result<T>>,
    {
        let outcome = self.call(family, operation, CallKind::Read, request).await;
        Self::found(outcome, operation, convert)
    }

    /// `Ok(None)` for 404, the value otherwise; other failures become provider errors.
    fn found<T, U>(
        outcome: Outcome<T>,
        operation: &'static str,
        convert: impl FnOnce(T) -> U,
    ) -> Result<Option<U>, ProviderError> {
        match outcome? {
            Ok(value) => Ok(Some(convert(value))),
            Err(failure) if failure.is_not_found() => Ok(None),
            Err(failure) => Err(failure.into_provider_error(operation)),
        }
    }

    /// Success, or the failure as a provider error.
    pub fn done(outcome: Outcome<()>, operation: &'static str) -> Result<(), ProviderError> {
        match outcome? {
            Ok(()) => Ok(()),
            Err(failure) => Err(failure.into_provider_error(operation)),
        }
    }

    /// Every item of a paged list call: `request` is given the page token (empty for the
    /// first page) and sends one page's request. A refused or failed page fails the whole
    /// listing, so callers never act on part of a collection.
    async fn list_all<L, F, Fut>(
        &self,
        family: &'static str,
        operation: &'static str,
        request: F,
    ) -> Result<Vec<L::Item>, ProviderError>
    where
        L: Page,
        F: Fn(String) -> Fut,
        Fut: Future<Output = gce::Result<L>>,
    {
        let mut items = Vec::new();
        let mut token = String::new();
        let mut pages = PageTokens::default();
        loop {
            let page = self
                .read(family, operation, || request(token.clone()))
                .await?;
            let (page_items, next) = page.into_parts();
            items.extend(page_items);
            let next = pages.next(operation, next.as_deref()).map_err(|repeated| {
                ProviderError::Internal {
                    message: repeated.to_string(),
                    source: None,
                }
            })?;
            match next {
                Some(next) => token = next,
                None => return Ok(items),
            }
        }
    }

    // ------------------------------------------------------------------ reads

    /// The zones of the region.
    pub async fn zones(&self) -> Result<Vec<String>, ProviderError> {
        let filter = format!("region eq .*/regions/{}", self.region);
        let list = self
            .read("zones", "zones.list", || {
                send!(self, global, zones.list().set_filter(&filter))
            })
            .await?;
        let mut zones: Vec<String> = list.items.into_iter().filter_map(|z| z.name).collect();
        zones.sort();
        Ok(zones)
    }

    /// Network tags of the named instances in a zone.
    pub async fn instance_tags(
        &self,
        zone: &str,
        names: &[String],
    ) -> Result<Vec<(String, Vec<String>)>, ProviderError> {
        let pattern: Vec<String> = names.iter().map(|n| regex_escape(n)).collect();
        let filter = format!("name eq ({})", pattern.join("|"));
        let instances = self
            .list_all("instances", "instances.list", |token| {
                send!(
                    self,
                    zone(zone),
                    instances.list().set_filter(&filter).set_page_token(token)
                )
            })
            .await?;
        Ok(instances
            .into_iter()
            .map(|instance| {
                let tags = instance.tags.map(|t| t.items).unwrap_or_default();
                (instance.name.unwrap_or_default(), tags)
            })
            .collect())
    }

    /// Whether any target pool (legacy HTTP check) or regional backend service (HTTP check) of
    /// the region refers to the health check `name`: read (paged lists) before a shared check
    /// is collected, so a check in use is never sent a delete.
    pub async fn health_check_referenced(
        &self,
        kind: HealthCheckKind,
        name: &str,
    ) -> Result<bool, ProviderError> {
        let users = match kind {
            HealthCheckKind::LegacyHttp => self.list(Collection::TargetPools).await?,
            HealthCheckKind::Http => self.list(Collection::BackendServices).await?,
        };
        let link = format!("/{}/{name}", kind.collection());
        Ok(users
            .iter()
            .any(|user| user.references.iter().any(|r| r.ends_with(&link))))
    }

    /// Every resource of a collection (all pages), with what [`Listed`] keeps of each. Any
    /// refused or failed page is an error: a partial listing is never returned.
    pub async fn list(&self, collection: Collection) -> Result<Vec<Listed>, ProviderError> {
        Ok(match &collection {
            Collection::ForwardingRules => self
                .list_all("forwardingRules", "forwardingRules.list", |token| {
                    send!(self, region, forwarding_rules.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|r| Listed {
                    references: r.target.iter().chain(&r.backend_service).cloned().collect(),
                    ..Listed::new(r.name, r.description, r.creation_timestamp)
                })
                .collect(),
            Collection::Addresses => self
                .list_all("addresses", "addresses.list", |token| {
                    send!(self, region, addresses.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|a| Listed::new(a.name, a.description, a.creation_timestamp))
                .collect(),
            Collection::TargetPools => self
                .list_all("targetPools", "targetPools.list", |token| {
                    send!(self, region, target_pools.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|p| Listed {
                    references: p.health_checks.clone(),
                    ..Listed::new(p.name, p.description, p.creation_timestamp)
                })
                .collect(),
            Collection::BackendServices => self
                .list_all("backendServices", "regionBackendServices.list", |token| {
                    send!(self, region, backend_services.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|b| Listed {
                    references: b
                        .health_checks
                        .iter()
                        .cloned()
                        .chain(b.backends.iter().filter_map(|x| x.group.clone()))
                        .collect(),
                    ..Listed::new(b.name, b.description, b.creation_timestamp)
                })
                .collect(),
            Collection::HttpHealthChecks => self
                .list_all("healthChecks", "httpHealthChecks.list", |token| {
                    send!(
                        self,
                        global,
                        http_health_checks.list().set_page_token(token)
                    )
                })
                .await?
                .into_iter()
                .map(|h| Listed::new(h.name, h.description, h.creation_timestamp))
                .collect(),
            Collection::HealthChecks => self
                .list_all("healthChecks", "healthChecks.list", |token| {
                    send!(self, global, health_checks.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|h| Listed::new(h.name, h.description, h.creation_timestamp))
                .collect(),
            Collection::Firewalls => self
                .list_all("firewalls", "firewalls.list", |token| {
                    send!(self, global, firewalls.list().set_page_token(token))
                })
                .await?
                .into_iter()
                .map(|f| Listed::new(f.name, f.description, f.creation_timestamp))
                .collect(),
            Collection::InstanceGroups(zone) => self
                .list_all("instanceGroups", "instanceGroups.list", |token| {
                    send!(
                        self,
                        zone(zone),
                        instance_groups.list().set_page_token(token)
                    )
                })
                .await?
                .into_iter()
                .map(|g| Listed::new(g.name, g.description, g.creation_timestamp))
                .collect(),
        })
    }

    /// Address by name.
    pub async fn get_address(&self, name: &str) -> Result<Option<Address>, ProviderError> {
        self.get_one("addresses", "addresses.get", address_from, || {
            send!(self, region, addresses.get().set_address(name))
        })
        .await
    }

    /// The address holding `ip` in the region, if any.
    pub async fn address_by_ip(
        &self,
        ip: std::net::IpAddr,
    ) -> Result<Option<Address>, ProviderError> {
        let filter = format!("address eq {}", regex_escape(&ip.to_string()));
        let list = self
            .read("addresses", "addresses.list", || {
                send!(self, region, addresses.list().set_filter(&filter))
            })
            .await?;
        Ok(list.items.into_iter().next().map(address_from))
    }

    /// Forwarding rule by name.
    pub async fn get_rule(&self, name: &str) -> Result<Option<ForwardingRule>, ProviderError> {
        self.get_one("forwardingRules", "forwardingRules.get", rule_from, || {
            send!(
                self,
                region,
                forwarding_rules.get().set_forwarding_rule(name)
            )
        })
        .await
    }

    /// Firewall by name.
    pub async fn get_firewall(&self, name: &str) -> Result<Option<Firewall>, ProviderError> {
        self.get_one("firewalls", "firewalls.get", firewall_from, || {
            send!(self, global, firewalls.get().set_firewall(name))
        })
        .await
    }

    /// Health check by kind and name.
    pub async fn get_health_check(
        &self,
        kind: HealthCheckKind,
        name: &str,
    ) -> Result<Option<HealthCheck>, ProviderError> {
        match kind {
            HealthCheckKind::LegacyHttp => {
                let operation = "httpHealthChecks.get";
                self.get_one("healthChecks", operation, legacy_health_check_from, || {
                    send!(
                        self,
                        global,
                        http_health_checks.get().set_http_health_check(name)
                    )
                })
                .await
            }
            HealthCheckKind::Http => {
                self.get_one(
                    "healthChecks",
                    "healthChecks.get",
                    health_check_from,
                    || send!(self, global, health_checks.get().set_health_check(name)),
                )
                .await
            }
        }
    }

    /// Target pool by name.
    pub async fn get_target_pool(&self, name: &str) -> Result<Option<TargetPool>, ProviderError> {
        self.get_one("targetPools", "targetPools.get", target_pool_from, || {
            send!(self, region, target_pools.get().set_target_pool(name))
        })
        .await
    }

    /// Regional backend service by name.
    pub async fn get_backend_service(
        &self,
        name: &str,
    ) -> Result<Option<BackendService>, ProviderError> {
        let operation = "regionBackendServices.get";
        self.get_one("backendServices", operation, backend_service_from, || {
            send!(
                self,
                region,
                backend_services.get().set_backend_service(name)
            )
        })
        .await
    }

    /// Instance group with its members, by zone and name.
    pub async fn get_instance_group(
        &self,
        zone: &str,
        name: &str,
    ) -> Result<Option<InstanceGroup>, ProviderError> {
        let exists = self
            .get_one(
                "instanceGroups",
                "instanceGroups.get",
                |_| (),
                || {
                    send!(
                        self,
                        zone(zone),
                        instance_groups.get().set_instance_group(name)
                    )
                },
            )
            .await?
            .is_some();
        if !exists {
            return Ok(None);
        }
        let listed = self
            .list_all("instanceGroups", "instanceGroups.listInstances", |token| {
                let mut body = gm::InstanceGroupsListInstancesRequest::default();
                body.instance_state =
                    Some(gm::instance_groups_list_instances_request::InstanceState::from("ALL"));
                send!(
                    self,
                    zone(zone),
                    instance_groups
                        .list_instances()
                        .set_instance_group(name)
                        .set_page_token(token)
                        .set_body(body)
                )
            })
            .await?;
        let members: BTreeSet<String> = listed
            .into_iter()
            .filter_map(|i| i.instance)
            .map(|i| canon(&i))
            .collect();
        Ok(Some(InstanceGroup {
            zone: zone.to_string(),
            name: name.to_string(),
            members,
        }))
    }

    // ------------------------------------------------------------------ writes

    /// Reserves an address.
    pub async fn insert_address(&self, address: &Address) -> Outcome<()> {
        let body = address_body(address);
        self.mutate("addresses", "addresses.insert", OpScope::Region, || {
            send!(self, region, addresses.insert().set_body(body.clone()))
        })
        .await
    }

    /// Releases an address.
    pub async fn delete_address(&self, name: &str) -> Outcome<()> {
        self.mutate("addresses", "addresses.delete", OpScope::Region, || {
            send!(self, region, addresses.delete().set_address(name))
        })
        .await
    }

    /// Creates a forwarding rule.
    pub async fn insert_rule(&self, rule: &ForwardingRule) -> Outcome<()> {
        let body = rule_body(rule);
        let operation = "forwardingRules.insert";
        self.mutate("forwardingRules", operation, OpScope::Region, || {
            send!(
                self,
                region,
                forwarding_rules.insert().set_body(body.clone())
            )
        })
        .await
    }

    /// Patches `allowGlobalAccess` (with the fingerprint read back).
    pub async fn patch_global_access(
        &self,
        name: &str,
        allow: bool,
        fingerprint: Option<&[u8]>,
    ) -> Outcome<()> {
        let mut body = gm::ForwardingRule::default();
        body.allow_global_access = Some(allow);
        body.fingerprint = fingerprint.map(bytes_of);
        let operation = "forwardingRules.patch";
        self.mutate("forwardingRules", operation, OpScope::Region, || {
            send!(
                self,
                region,
                forwarding_rules
                    .patch()
                    .set_forwarding_rule(name)
                    .set_body(body.clone())
            )
        })
        .await
    }

    /// Deletes a forwarding rule.
    pub async fn delete_rule(&self, name: &str) -> Outcome<()> {
        let operation = "forwardingRules.delete";
        self.mutate("forwardingRules", operation, OpScope::Region, || {
            send!(
                self,
                region,
                forwarding_rules.delete().set_forwarding_rule(name)
            )
        })
        .await
    }

    /// Creates (`update == false`) or replaces a firewall.
    pub async fn put_firewall(&self, firewall: &Firewall, update: bool) -> Outcome<()> {
        let body = firewall_body(firewall);
        if update {
            self.mutate("firewalls", "firewalls.update", OpScope::Global, || {
                send!(
                    self,
                    global,
                    firewalls
                        .update()
                        .set_firewall(&firewall.name)
                        .set_body(body.clone())
                )
            })
            .await
        } else {
            self.mutate("firewalls", "firewalls.insert", OpScope::Global, || {
                send!(self, global, firewalls.insert().set_body(body.clone()))
            })
            .await
        }
    }

    /// Deletes a firewall.
    pub async fn delete_firewall(&self, name: &str) -> Outcome<()> {
        self.mutate("firewalls", "firewalls.delete", OpScope::Global, || {
            send!(self, global, firewalls.delete().set_firewall(name))
        })
        .await
    }

    /// Creates (`update == false`) or replaces a health check.
    pub async fn put_health_check(&self, hc: &HealthCheck, update: bool) -> Outcome<()> {
        let (family, scope) = ("healthChecks", OpScope::Global);
        match (hc.kind, update) {
            (HealthCheckKind::LegacyHttp, true) => {
                let body = legacy_health_check_body(hc);
                self.mutate(family, "httpHealthChecks.update", scope, || {
                    send!(
                        self,
                        global,
                        http_health_checks
                            .update()
                            .set_http_health_check(&hc.name)
                            .set_body(body.clone())
                    )
                })
                .await
            }
            (HealthCheckKind::LegacyHttp, false) => {
                let body = legacy_health_check_body(hc);
                self.mutate(family, "httpHealthChecks.insert", scope, || {
                    send!(
                        self,
                        global,
                        http_health_checks.insert().set_body(body.clone())
                    )
                })
                .await
            }
            (HealthCheckKind::Http, true) => {
                let body = health_check_body(hc);
                self.mutate(family, "healthChecks.update", scope, || {
                    send!(
                        self,
                        global,
                        health_checks
                            .update()
                            .set_health_check(&hc.name)
                            .set_body(body.clone())
                    )
                })
                .await
            }
            (HealthCheckKind::Http, false) => {
                let body = health_check_body(hc);
                self.mutate(family, "healthChecks.insert", scope, || {
                    send!(self, global, health_checks.insert().set_body(body.clone()))
                })
                .await
            }
        }
    }

    /// Deletes a health check.
    pub async fn delete_health_check(&self, kind: HealthCheckKind, name: &str) -> Outcome<()> {
        let (family, scope) = ("healthChecks", OpScope::Global);
        match kind {
            HealthCheckKind::LegacyHttp => {
                self.mutate(family, "httpHealthChecks.delete", scope, || {
                    send!(
                        self,
                        global,
                        http_health_checks.delete().set_http_health_check(name)
                    )
                })
                .await
            }
            HealthCheckKind::Http => {
                self.mutate(family, "healthChecks.delete", scope, || {
                    send!(self, global, health_checks.delete().set_health_check(name))
                })
                .await
            }
        }
    }

    /// Creates a target pool.
    pub async fn insert_target_pool(&self, pool: &TargetPool) -> Outcome<()> {
        let body = target_pool_body(pool);
        self.mutate("targetPools", "targetPools.insert", OpScope::Region, || {
            send!(self, region, target_pools.insert().set_body(body.clone()))
        })
        .await
    }

    /// Deletes a target pool.
    pub async fn delete_target_pool(&self, name: &str) -> Outcome<()> {
        self.mutate("targetPools", "targetPools.delete", OpScope::Region, || {
            send!(self, region, target_pools.delete().set_target_pool(name))
        })
        .await
    }

    /// Adds (`add`) or removes instances from a target pool, in batches.
    pub async fn pool_instances(
        &self,
        pool: &str,
        instances: &BTreeSet<String>,
        add: bool,
    ) -> Outcome<()> {
        in_batches(instances, |refs| async move {
            if add {
                let mut body = gm::TargetPoolsAddInstanceRequest::default();
                body.instances = refs;
                let operation = "targetPools.addInstance";
                self.mutate("targetPools", operation, OpScope::Region, || {
                    send!(
                        self,
                        region,
                        target_pools
                            .add_instance()
                            .set_target_pool(pool)
                            .set_body(body.clone())
                    )
                })
                .await
            } else {
                let mut body = gm::TargetPoolsRemoveInstanceRequest::default();
                body.instances = refs;
                let operation = "targetPools.removeInstance";
                self.mutate("targetPools", operation, OpScope::Region, || {
                    send!(
                        self,
                        region,
                        target_pools
                            .remove_instance()
                            .set_target_pool(pool)
                            .set_body(body.clone())
                    )
                })
                .await
            }
        })
        .await
    }

    /// Adds (`add`) or removes legacy health checks of a target pool.
    pub async fn pool_health_checks(
        &self,
        pool: &str,
        health_checks: &BTreeSet<String>,
        add: bool,
    ) -> Outcome<()> {
        let refs: Vec<gm::HealthCheckReference> = health_checks
            .iter()
            .map(|h| {
                let mut r = gm::HealthCheckReference::default();
                r.health_check = Some(h.clone());
                r
            })
            .collect();
        if add {
            let mut body = gm::TargetPoolsAddHealthCheckRequest::default();
            body.health_checks = refs;
            let operation = "targetPools.addHealthCheck";
            self.mutate("targetPools", operation, OpScope::Region, || {
                send!(
                    self,
                    region,
                    target_pools
                        .add_health_check()
                        .set_target_pool(pool)
                        .set_body(body.clone())
                )
            })
            .await
        } else {
            let mut body = gm::TargetPoolsRemoveHealthCheckRequest::default();
            body.health_checks = refs;
            let operation = "targetPools.removeHealthCheck";
            self.mutate("targetPools", operation, OpScope::Region, || {
                send!(
                    self,
                    region,
                    target_pools
                        .remove_health_check()
                        .set_target_pool(pool)
                        .set_body(body.clone())
                )
            })
            .await
        }
    }

    /// Creates an empty instance group in the cluster network.
    pub async fn insert_instance_group(&self, zone: &str, name: &str) -> Outcome<()> {
        let mut body = gm::InstanceGroup::default();
        body.name = Some(name.to_string());
        body.network = Some(self.network.clone());
        let scope = OpScope::Zone(zone.to_string());
        self.mutate("instanceGroups", "instanceGroups.insert", scope, || {
            send!(
                self,
                zone(zone),
                instance_groups.insert().set_body(body.clone())
            )
        })
        .await
    }

    /// Deletes an instance group.
    pub async fn delete_instance_group(&self, zone: &str, name: &str) -> Outcome<()> {
        let scope = OpScope::Zone(zone.to_string());
        self.mutate("instanceGroups", "instanceGroups.delete", scope, || {
            send!(
                self,
                zone(zone),
                instance_groups.delete().set_instance_group(name)
            )
        })
        .await
    }

    /// Adds (`add`) or removes instances of an instance group, in batches.
    pub async fn group_instances(
        &self,
        zone: &str,
        name: &str,
        instances: &BTreeSet<String>,
        add: bool,
    ) -> Outcome<()> {
        in_batches(instances, |refs| async move {
            let scope = OpScope::Zone(zone.to_string());
            if add {
                let mut body = gm::InstanceGroupsAddInstancesRequest::default();
                body.instances = refs;
                self.mutate(
                    "instanceGroups",
                    "instanceGroups.addInstances",
                    scope,
                    || {
                        send!(
                            self,
                            zone(zone),
                            instance_groups
                                .add_instances()
                                .set_instance_group(name)
                                .set_body(body.clone())
                        )
                    },
                )
                .await
            } else {
                let mut body = gm::InstanceGroupsRemoveInstancesRequest::default();
                body.instances = refs;
                let operation = "instanceGroups.removeInstances";
                self.mutate("instanceGroups", operation, scope, || {
                    send!(
                        self,
                        zone(zone),
                        instance_groups
                            .remove_instances()
                            .set_instance_group(name)
                            .set_body(body.clone())
                    )
                })
                .await
            }
        })
        .await
    }

    /// Creates (`update == false`) or replaces (fingerprint-checked) a backend service.
    pub async fn put_backend_service(&self, service: &BackendService, update: bool) -> Outcome<()> {
        let body = backend_service_body(service);
        if update {
            let operation = "regionBackendServices.update";
            self.mutate("backendServices", operation, OpScope::Region, || {
                send!(
                    self,
                    region,
                    backend_services
                        .update()
                        .set_backend_service(&service.name)
                        .set_body(body.clone())
                )
            })
            .await
        } else {
            let operation = "regionBackendServices.insert";
            self.mutate("backendServices", operation, OpScope::Region, || {
                send!(
                    self,
                    region,
                    backend_services.insert().set_body(body.clone())
                )
            })
            .await
        }
    }

    /// Deletes a backend service.
    pub async fn delete_backend_service(&self, name: &str) -> Outcome<()> {
        let operation = "regionBackendServices.delete";
        self.mutate("backendServices", operation, OpScope::Region, || {
            send!(
                self,
                region,
                backend_services.delete().set_backend_service(name)
            )
        })
        .await
    }
}

/// Sends `instances` to `send` in batches of at most [`INSTANCE_BATCH`] references, in order,
/// stopping at the first batch Compute refuses (its failure is the outcome).
async fn in_batches<F, Fut>(instances: &BTreeSet<String>, mut send: F) -> Outcome<()>
where
    F: FnMut(Vec<gm::InstanceReference>) -> Fut,
    Fut: Future<Output = Outcome<()>>,
{
    let all: Vec<&String> = instances.iter().collect();
    for batch in all.chunks(INSTANCE_BATCH) {
        let outcome = send(batch.iter().map(|i| instance_ref(i)).collect()).await?;
        if outcome.is_err() {
            return Ok(outcome);
        }
    }
    Ok(Ok(()))
}

// ---------------------------------------------------------------------- conversions

fn is_done(op: &gm::Operation) -> bool {
    op.status.as_ref().and_then(|s| s.name()) == Some("DONE")
}

fn operation_result(op: &gm::Operation) -> Result<(), Failure> {
    let Some(error) = &op.error else {
        return Ok(());
    };
    let first = error.errors.first();
    Err(Failure {
        status: op
            .http_error_status_code
            .and_then(|s| u16::try_from(s).ok()),
        reason: first.and_then(|e| e.code.clone()).unwrap_or_default(),
        message: first
            .and_then(|e| e.message.clone())
            .or_else(|| op.http_error_message.clone())
            .unwrap_or_else(|| "operation failed".to_string()),
        retry_after: None,
    })
}

/// Escapes RE2 metacharacters for GCE list filters.
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn bytes_of(data: &[u8]) -> bytes::Bytes {
    bytes::Bytes::copy_from_slice(data)
}

fn instance_ref(link: &str) -> gm::InstanceReference {
    let mut r = gm::InstanceReference::default();
    r.instance = Some(link.to_string());
    r
}

fn enum_name<T>(value: Option<&T>, name: impl Fn(&T) -> Option<&str>) -> Option<String> {
    value.and_then(name).map(str::to_string)
}

fn address_from(a: gm::Address) -> Address {
    let internal = enum_name(a.address_type.as_ref(), |t| t.name()).as_deref() == Some("INTERNAL");
    Address {
        name: a.name.unwrap_or_default(),
        description: a.description.unwrap_or_default(),
        ip: a.address.and_then(|ip| ip.parse().ok()),
        internal,
        tier: if internal {
            None
        } else {
            enum_name(a.network_tier.as_ref(), |t| t.name())
        },
        subnetwork: a.subnetwork.map(|s| canon(&s)),
    }
}

fn address_body(a: &Address) -> gm::Address {
    let mut body = gm::Address::default();
    body.name = Some(a.name.clone());
    body.description = Some(a.description.clone());
    body.address = a.ip.map(|ip| ip.to_string());
    if a.internal {
        body.address_type = Some(gm::address::AddressType::from("INTERNAL"));
        body.subnetwork = a.subnetwork.clone();
    } else {
        body.address_type = Some(gm::address::AddressType::from("EXTERNAL"));
        body.network_tier = Some(gm::address::NetworkTier::from(
            a.tier.as_deref().unwrap_or("PREMIUM"),
        ));
    }
    body
}

fn rule_from(r: gm::ForwardingRule) -> ForwardingRule {
    let internal =
        enum_name(r.load_balancing_scheme.as_ref(), |s| s.name()).as_deref() == Some("INTERNAL");
    let ports = if r.all_ports == Some(true) {
        RulePorts::All
    } else if !r.ports.is_empty() {
        RulePorts::List(
            r.ports
                .iter()
                .filter_map(|p| parse_range(p))
                .flat_map(|(low, high)| low..=high)
                .collect(),
        )
    } else {
        match r.port_range.as_deref().and_then(parse_range) {
            Some((low, high)) => RulePorts::Range(low, high),
            None => RulePorts::All,
        }
    };
    ForwardingRule {
        name: r.name.unwrap_or_default(),
        description: r.description.unwrap_or_default(),
        ip: r.ip_address.and_then(|ip| ip.parse().ok()),
        protocol: enum_name(r.ip_protocol.as_ref(), |p| p.name()).unwrap_or_else(|| "TCP".into()),
        ports,
        target: r.target.map(|t| canon(&t)),
        backend_service: r.backend_service.map(|b| canon(&b)),
        internal,
        network: r.network.map(|n| canon(&n)),
        subnetwork: r.subnetwork.map(|s| canon(&s)),
        tier: if internal {
            None
        } else {
            enum_name(r.network_tier.as_ref(), |t| t.name())
        },
        global_access: r.allow_global_access.unwrap_or(false),
        fingerprint: r.fingerprint.map(|f| f.to_vec()),
    }
}

fn rule_body(r: &ForwardingRule) -> gm::ForwardingRule {
    let mut body = gm::ForwardingRule::default();
    body.name = Some(r.name.clone());
    body.description = Some(r.description.clone());
    body.ip_address = r.ip.map(|ip| ip.to_string());
    body.ip_protocol = Some(gm::forwarding_rule::IPProtocol::from(r.protocol.as_str()));
    match &r.ports {
        RulePorts::Range(low, high) => body.port_range = Some(format!("{low}-{high}")),
        RulePorts::List(ports) => body.ports = ports.iter().map(u16::to_string).collect(),
        RulePorts::All => body.all_ports = Some(true),
    }
    body.target = r.target.clone();
    body.backend_service = r.backend_service.clone();
    if r.internal {
        body.load_balancing_scheme =
            Some(gm::forwarding_rule::LoadBalancingScheme::from("INTERNAL"));
        body.network = r.network.clone();
        body.subnetwork = r.subnetwork.clone();
        body.allow_global_access = Some(r.global_access);
    } else {
        body.load_balancing_scheme =
            Some(gm::forwarding_rule::LoadBalancingScheme::from("EXTERNAL"));
        body.network_tier = Some(gm::forwarding_rule::NetworkTier::from(
            r.tier.as_deref().unwrap_or("PREMIUM"),
        ));
    }
    body
}

fn firewall_from(f: gm::Firewall) -> Firewall {
    Firewall {
        name: f.name.unwrap_or_default(),
        description: f.description.unwrap_or_default(),
        network: f.network.map(|n| canon(&n)).unwrap_or_default(),
        allowed: f
            .allowed
            .into_iter()
            .map(|a| {
                let ranges = if a.ports.is_empty() {
                    vec![(1, u16::MAX)]
                } else {
                    a.ports.iter().filter_map(|p| parse_range(p)).collect()
                };
                (a.ip_protocol.unwrap_or_default(), merge_ranges(ranges))
            })
            .collect(),
        source_ranges: f.source_ranges.into_iter().collect(),
        destination_ranges: f.destination_ranges.into_iter().collect(),
        target_tags: f.target_tags.into_iter().collect(),
    }
}

fn firewall_body(f: &Firewall) -> gm::Firewall {
    let mut body = gm::Firewall::default();
    body.name = Some(f.name.clone());
    body.description = Some(f.description.clone());
    body.network = Some(f.network.clone());
    body.direction = Some(gm::firewall::Direction::from("INGRESS"));
    body.allowed = f
        .allowed
        .iter()
        .map(|(protocol, ranges)| {
            let mut allowed = gm::firewall::Allowed::default();
            allowed.ip_protocol = Some(protocol.clone());
            allowed.ports = ranges.iter().map(|r| range_text(*r)).collect();
            allowed
        })
        .collect();
    body.source_ranges = f.source_ranges.iter().cloned().collect();
    body.destination_ranges = f.destination_ranges.iter().cloned().collect();
    body.target_tags = f.target_tags.iter().cloned().collect();
    body
}

fn timing_of(
    interval: Option<i32>,
    timeout: Option<i32>,
    healthy: Option<i32>,
    unhealthy: Option<i32>,
) -> Timing {
    Timing {
        interval: interval.unwrap_or(5),
        timeout: timeout.unwrap_or(5),
        healthy: healthy.unwrap_or(2),
        unhealthy: unhealthy.unwrap_or(2),
    }
}

fn legacy_health_check_from(h: gm::HttpHealthCheck) -> HealthCheck {
    HealthCheck {
        kind: HealthCheckKind::LegacyHttp,
        name: h.name.unwrap_or_default(),
        description: h.description.unwrap_or_default(),
        port: h.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(80),
        path: h.request_path.unwrap_or_else(|| "/".into()),
        timing: timing_of(
            h.check_interval_sec,
            h.timeout_sec,
            h.healthy_threshold,
            h.unhealthy_threshold,
        ),
    }
}

fn legacy_health_check_body(h: &HealthCheck) -> gm::HttpHealthCheck {
    let mut body = gm::HttpHealthCheck::default();
    body.name = Some(h.name.clone());
    body.description = Some(h.description.clone());
    body.port = Some(i32::from(h.port));
    body.request_path = Some(h.path.clone());
    body.check_interval_sec = Some(h.timing.interval);
    body.timeout_sec = Some(h.timing.timeout);
    body.healthy_threshold = Some(h.timing.healthy);
    body.unhealthy_threshold = Some(h.timing.unhealthy);
    body
}

fn health_check_from(h: gm::HealthCheck) -> HealthCheck {
    let http = h.http_health_check.unwrap_or_default();
    HealthCheck {
        kind: HealthCheckKind::Http,
        name: h.name.unwrap_or_default(),
        description: h.description.unwrap_or_default(),
        port: http.port.and_then(|p| u16::try_from(p).ok()).unwrap_or(80),
        path: http.request_path.unwrap_or_else(|| "/".into()),
        timing: timing_of(
            h.check_interval_sec,
            h.timeout_sec,
            h.healthy_threshold,
            h.unhealthy_threshold,
        ),
    }
}

fn health_check_body(h: &HealthCheck) -> gm::HealthCheck {
    let mut http = gm::HTTPHealthCheck::default();
    http.port = Some(i32::from(h.port));
    http.request_path = Some(h.path.clone());
    let mut body = gm::HealthCheck::default();
    body.name = Some(h.name.clone());
    body.description = Some(h.description.clone());
    body.r#type = Some(gm::health_check::Type::from("HTTP"));
    body.http_health_check = Some(http);
    body.check_interval_sec = Some(h.timing.interval);
    body.timeout_sec = Some(h.timing.timeout);
    body.healthy_threshold = Some(h.timing.healthy);
    body.unhealthy_threshold = Some(h.timing.unhealthy);
    body
}

fn target_pool_from(p: gm::TargetPool) -> TargetPool {
    TargetPool {
        name: p.name.unwrap_or_default(),
        description: p.description.unwrap_or_default(),
        instances: p.instances.iter().map(|i| canon(i)).collect(),
        health_checks: p.health_checks.iter().map(|h| canon(h)).collect(),
        session_affinity: enum_name(p.session_affinity.as_ref(), |s| s.name())
            .unwrap_or_else(|| "NONE".into()),
    }
}

fn target_pool_body(p: &TargetPool) -> gm::TargetPool {
    let mut body = gm::TargetPool::default();
    body.name = Some(p.name.clone());
    body.description = Some(p.description.clone());
    body.instances = p.instances.iter().cloned().collect();
    body.health_checks = p.health_checks.iter().cloned().collect();
    body.session_affinity = Some(gm::target_pool::SessionAffinity::from(
        p.session_affinity.as_str(),
    ));
    body
}

fn backend_service_from(b: gm::BackendService) -> BackendService {
    BackendService {
        name: b.name.unwrap_or_default(),
        description: b.description.unwrap_or_default(),
        protocol: enum_name(b.protocol.as_ref(), |p| p.name()).unwrap_or_default(),
        health_checks: b.health_checks.iter().map(|h| canon(h)).collect(),
        groups: b
            .backends
            .iter()
            .filter_map(|x| x.group.as_deref())
            .map(canon)
            .collect(),
        session_affinity: enum_name(b.session_affinity.as_ref(), |s| s.name())
            .unwrap_or_else(|| "NONE".into()),
        fingerprint: b.fingerprint.map(|f| f.to_vec()),
    }
}

fn backend_service_body(b: &BackendService) -> gm::BackendService {
    let mut body = gm::BackendService::default();
    body.name = Some(b.name.clone());
    body.description = Some(b.description.clone());
    body.protocol = Some(gm::backend_service::Protocol::from(b.protocol.as_str()));
    body.load_balancing_scheme = Some(gm::backend_service::LoadBalancingScheme::from("INTERNAL"));
    body.health_checks = b.health_checks.iter().cloned().collect();
    body.backends = b
        .groups
        .iter()
        .map(|g| {
            let mut backend = gm::Backend::default();
            backend.group = Some(g.clone());
            backend.balancing_mode = Some(gm::backend::BalancingMode::from("CONNECTION"));
            backend
        })
        .collect();
    body.session_affinity = Some(gm::backend_service::SessionAffinity::from(
        b.session_affinity.as_str(),
    ));
    body.fingerprint = b.fingerprint.as_deref().map(bytes_of);
    body
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use kube_lb_provider_core::{CallCounter, RateLimits, RetryPolicy};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// What the hand-made Compute endpoint answers a request whose head (method, path,
    /// headers; lower case) is given: a JSON body, or `None` to hold the request open and never
    /// answer it.
    type Answer = fn(&str) -> Option<&'static str>;

    /// A Compute endpoint answering as `answer` says, counting the requests it read.
    async fn endpoint(answer: Answer) -> (String, Arc<AtomicU32>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicU32::new(0));
        let seen = requests.clone();
        tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                tokio::spawn(serve(connection, answer, seen.clone()));
            }
        });
        (url, requests)
    }

    /// Serves one keep-alive connection until `answer` holds a request: from then on it reads
    /// whatever comes and sends nothing back, until the client gives the connection up.
    async fn serve(mut connection: TcpStream, answer: Answer, requests: Arc<AtomicU32>) {
        let mut buffer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                match connection.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
                continue;
            };
            let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            while buffer.len() < head_end + 4 + length {
                match connection.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            buffer.drain(..head_end + 4 + length);
            requests.fetch_add(1, Ordering::SeqCst);
            let Some(body) = answer(&head) else {
                while matches!(connection.read(&mut chunk).await, Ok(n) if n > 0) {}
                return;
            };
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if connection.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
    }

    /// Quick in-place retries for the tests against the hand-made endpoint.
    const RETRY: RetryPolicy = RetryPolicy {
        base: Duration::from_millis(5),
        max: Duration::from_millis(20),
        max_attempts: 3,
    };

    /// Quick operation polls.
    const POLL: PollSettings = PollSettings {
        initial: Duration::from_millis(1),
        max: Duration::from_millis(10),
        timeout: Duration::from_secs(600),
    };

    async fn connect(url: &str, attempt_timeout: Duration) -> Gce {
        let api = CloudApi::new("gcp", CallCounter::new(), RateLimits::unlimited(), RETRY);
        Gce::connect(
            Some(url),
            true,
            "p",
            "r",
            "projects/p/global/networks/n",
            api,
            POLL,
            attempt_timeout,
        )
        .await
        .unwrap()
    }

    /// A listing whose every page names the same next page fails (an internal error, retried
    /// with backoff) after the second page instead of paging forever.
    #[tokio::test]
    async fn a_listing_that_repeats_its_page_token_ends() {
        let (url, requests) =
            endpoint(|_| Some(r#"{"items":[{"name":"a1"}],"nextPageToken":"page-2"}"#)).await;
        let gce = connect(&url, Duration::from_secs(5)).await;
        let listed = tokio::time::timeout(
            Duration::from_secs(10),
            gce.list(Collection::ForwardingRules),
        )
        .await
        .expect("the listing never ended");
        match listed {
            Err(ProviderError::Internal { message, .. }) => {
                assert!(message.contains("page-2"), "{message}");
            }
            other => panic!("expected an internal error, got {other:?}"),
        }
        assert_eq!(requests.load(Ordering::SeqCst), 2);
    }

    /// A delete GCE accepted, whose operation GET then hangs, fails within the attempt timeout
    /// per poll attempt (plus the retry steps), as a transient error: the wait for an
    /// operation cannot hold the Service's sync either.
    #[tokio::test]
    async fn an_operation_wait_whose_poll_hangs_gives_up_in_time() {
        // Deletes are accepted with an operation still running; the operation GET hangs.
        let (url, requests) = endpoint(|head| {
            (!head.starts_with("get ")).then_some(
                r#"{"kind":"compute#operation","name":"operation-1","status":"RUNNING"}"#,
            )
        })
        .await;
        let attempt_timeout = Duration::from_millis(300);
        let gce = connect(&url, attempt_timeout).await;
        let (retry, poll) = (RETRY, POLL);

        let started = std::time::Instant::now();
        let outcome = gce
            .delete_health_check(HealthCheckKind::Http, "k8s-c1-node")
            .await;
        let took = started.elapsed();

        let error = match outcome {
            Err(error) => error,
            Ok(answer) => panic!("a hung operation poll answered: {answer:?}"),
        };
        assert!(error.is_transient(), "not transient: {error}");
        // The delete, then one poll per attempt.
        assert_eq!(
            requests.load(Ordering::SeqCst),
            1 + retry.max_attempts,
            "{error}"
        );
        // Every poll attempt waits out the timeout; the retry steps are at most `max` each.
        let bound = attempt_timeout * retry.max_attempts
            + retry.max * (retry.max_attempts - 1)
            + poll.max
            + Duration::from_secs(1);
        assert!(took < bound, "took {took:?}, bound {bound:?}");
        assert!(
            took >= attempt_timeout * retry.max_attempts,
            "gave up after {took:?}, before the timeout of each attempt"
        );
    }

    #[test]
    fn filters_escape_regex_metacharacters() {
        assert_eq!(regex_escape("10.0.0.1"), "10\\.0\\.0\\.1");
        assert_eq!(regex_escape("node-1"), "node-1");
    }

    #[test]
    fn models_round_trip_through_sdk_bodies() {
        let rule = ForwardingRule {
            name: "a1".into(),
            description: "d".into(),
            ip: Some("10.0.0.5".parse().unwrap()),
            protocol: "TCP".into(),
            ports: RulePorts::List([80, 443].into()),
            target: None,
            backend_service: Some("projects/p/regions/r/backendServices/a1".into()),
            internal: true,
            network: Some("projects/p/global/networks/n".into()),
            subnetwork: Some("projects/p/regions/r/subnetworks/s".into()),
            tier: None,
            global_access: true,
            fingerprint: None,
        };
        assert_eq!(rule_from(rule_body(&rule)), rule);
        let firewall = Firewall {
            name: "k8s-fw-a1".into(),
            description: "x".into(),
            network: "projects/p/global/networks/n".into(),
            allowed: vec![("tcp".into(), vec![(80, 80), (443, 443)])],
            source_ranges: ["0.0.0.0/0".to_string()].into(),
            destination_ranges: ["10.0.0.5".to_string()].into(),
            target_tags: ["node".to_string()].into(),
        };
        assert_eq!(firewall_from(firewall_body(&firewall)), firewall);
        let hc = HealthCheck {
            kind: HealthCheckKind::Http,
            name: "k8s-c-node".into(),
            description: "x".into(),
            port: 10256,
            path: "/healthz".into(),
            timing: crate::model::DEFAULT_TIMING,
        };
        assert_eq!(health_check_from(health_check_body(&hc)), hc);
        let legacy = HealthCheck {
            kind: HealthCheckKind::LegacyHttp,
            ..hc
        };
        assert_eq!(
            legacy_health_check_from(legacy_health_check_body(&legacy)),
            legacy
        );
    }
}
