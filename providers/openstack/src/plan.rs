//! Pure parts of the provider: cloud-provider-openstack's names and ownership phrases, the
//! desired Octavia graph for a Service, and the diff of an observed graph against it.

use std::collections::BTreeMap;

use kube_lb_annotations::keys::openstack as key;
use kube_lb_annotations::{
    LabelRequirement, LoadBalancerSpec, OpenstackProxyProtocol, OpenstackSpec, Protocol,
    ProviderSpec, Scheme, SelectorOperator, ServiceKey, TrafficPolicy,
};
use kube_lb_provider_core::{
    BackendNode, ChangeAction, IpMode, LoadBalancerIngress, LoadBalancerStatus, PlannedChange,
    ProviderError,
};
use serde_json::{Value, json};

use crate::config::{LoadBalancerClass, LoadBalancerConfig};
use crate::model::{HealthMonitor, Listener, LoadBalancer, Member, Pool};

/// Octavia names are at most 255 characters.
const MAX_NAME: usize = 255;
/// The tag prefix recording which Service (by UID) a load balancer was made for, so two
/// clusters sharing a `--cluster-name` (upstream's most reported bug) never take over each
/// other's load balancers.
pub const UID_TAG_PREFIX: &str = "kube_lb_uid_";
/// The tag prefix recording the identity of the cluster a load balancer was made in
/// (`--cluster-id`, by default the UID of its kube-system namespace). With it, a load balancer
/// that an earlier Service of the same namespace/name left behind is told from one of another
/// cluster that shares the `--cluster-name`.
pub const CLUSTER_TAG_PREFIX: &str = "kube_lb_cluster_";

/// The tag naming cluster identity `id`.
pub fn cluster_tag(id: &str) -> String {
    format!("{CLUSTER_TAG_PREFIX}{id}")
}

/// True when `tags` name another cluster's identity and not this one's `ours` (pure): such a
/// load balancer belongs to another cluster with the same `--cluster-name`, whatever its
/// description says. Unknown (`ours` is `None`) or untagged is not known to be another's.
pub fn another_clusters(tags: &[String], ours: Option<&str>) -> bool {
    kube_lb_provider_core::naming::marks_another_cluster(
        tags.iter().map(String::as_str),
        CLUSTER_TAG_PREFIX,
        ours,
    )
}

fn cut(name: String) -> String {
    name.chars().take(MAX_NAME).collect()
}

/// `kube_service_<cluster>_<namespace>_<name>`, as upstream names it.
pub fn load_balancer_name(cluster: &str, service: &ServiceKey) -> String {
    cut(format!(
        "kube_service_{cluster}_{}_{}",
        service.namespace, service.name
    ))
}

/// `listener_<index>_<lbName>`.
pub fn listener_name(index: usize, lb_name: &str) -> String {
    cut(format!("listener_{index}_{lb_name}"))
}

/// `pool_<index>_<lbName>`.
pub fn pool_name(index: usize, lb_name: &str) -> String {
    cut(format!("pool_{index}_{lb_name}"))
}

/// `monitor_<index>_<lbName>`.
pub fn monitor_name(index: usize, lb_name: &str) -> String {
    cut(format!("monitor_{index}_{lb_name}"))
}

/// How upstream's load-balancer descriptions begin.
pub const LOAD_BALANCER_PHRASE: &str = "Kubernetes external service ";
/// How upstream's floating-IP descriptions begin (upstream releases only floating IPs whose
/// description contains it).
pub const FLOATING_IP_PHRASE: &str = "Floating IP for Kubernetes external service ";

/// Upstream's load-balancer description, which also marks it as the cluster's.
pub fn load_balancer_description(cluster: &str, service: &ServiceKey) -> String {
    format!("{LOAD_BALANCER_PHRASE}{service} from cluster {cluster}")
}

/// Upstream's floating-IP description: the marker of a floating IP the controller created
/// (only those are released).
pub fn floating_ip_description(cluster: &str, service: &ServiceKey) -> String {
    format!("{FLOATING_IP_PHRASE}{service} from cluster {cluster}")
}

/// The Service a description written by kube-lb, upstream or the in-tree provider for
/// `cluster` names (pure): `<phrase><ns>/<name> from cluster <cluster>` (optionally with
/// [`KEEP_SUFFIX`]), or the in-tree form `<phrase>a<UID digits> from cluster <cluster>`, which
/// records only the UID (31 of its 32 hex digits; for a load balancer only when
/// `legacy_name`, its name, is that same word).
pub fn recorded_owner(
    description: &str,
    phrase: &str,
    cluster: &str,
    legacy_name: Option<&str>,
) -> Option<ServiceKey> {
    let description = description.strip_suffix(KEEP_SUFFIX).unwrap_or(description);
    let rest = description
        .strip_prefix(phrase)?
        .strip_suffix(&format!(" from cluster {cluster}"))?;
    if let Some((namespace, name)) = rest.split_once('/') {
        return Some(ServiceKey {
            namespace: namespace.into(),
            name: name.into(),
            uid: String::new(),
        });
    }
    let digits = rest.strip_prefix('a')?;
    let legacy = rest.len() <= 32
        && digits.len() >= 16
        && digits.chars().all(|c| c.is_ascii_hexdigit())
        && legacy_name.is_none_or(|name| name == rest);
    legacy.then(|| ServiceKey {
        namespace: String::new(),
        name: String::new(),
        uid: digits.into(),
    })
}

/// The tag carrying the Service UID.
pub fn uid_tag(service: &ServiceKey) -> String {
    format!("{UID_TAG_PREFIX}{}", service.uid)
}

/// The name Kubernetes' in-tree provider gave load balancers before 2019 (upstream still
/// looks it up when `kube_service_...` is not found): `a` + the Service UID without dashes,
/// cut to 32 characters (`cloudprovider.DefaultLoadBalancerName`). `None` without a UID.
pub fn legacy_load_balancer_name(service: &ServiceKey) -> Option<String> {
    if service.uid.is_empty() {
        return None;
    }
    let name: String = std::iter::once('a')
        .chain(service.uid.chars().filter(|c| *c != '-'))
        .take(32)
        .collect();
    Some(name)
}

/// The description the in-tree provider gave a load balancer named `legacy_name`.
pub fn legacy_load_balancer_description(cluster: &str, legacy_name: &str) -> String {
    format!("Kubernetes external service {legacy_name} from cluster {cluster}")
}

/// The description the in-tree provider gave the floating IP of `legacy_name`.
pub fn legacy_floating_ip_description(cluster: &str, legacy_name: &str) -> String {
    format!("Floating IP for Kubernetes external service {legacy_name} from cluster {cluster}")
}

/// What marks `keep-floatingip` on a floating IP kube-lb created: appended to upstream's
/// phrase, which stays a prefix (upstream recognises its floating IPs by that phrase, so a
/// rollback to it still knows the address as the Service's own).
pub const KEEP_SUFFIX: &str = " (keep-floatingip: kept when the Service is deleted)";

/// True when two Service UIDs are the same: equal, or one is the other cut short (a legacy
/// name carries only 31 of the 32 hex digits), compared without dashes and case.
pub fn same_uid(a: &str, b: &str) -> bool {
    let digits = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '-')
            .map(|c| c.to_ascii_lowercase())
            .collect()
    };
    let (a, b) = (digits(a), digits(b));
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short == long || (short.len() >= 16 && long.starts_with(&short))
}

/// How a floating IP's description records who made it and what happens to it when the
/// Service is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatingIpRecord {
    /// Not made for this Service by kube-lb or upstream (a user's): never released.
    NotOurs,
    /// Made for this Service; released when the Service is deleted.
    Release,
    /// Made for this Service with `keep-floatingip`: detached and handed over to the user
    /// when the Service is deleted.
    Keep,
}

/// The floating-IP descriptions of one Service: what kube-lb writes, and what it recognises
/// as its own (upstream's phrase, the legacy in-tree phrase).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FloatingIpMarks {
    /// Upstream's phrase: released on Service deletion.
    pub release: String,
    /// Upstream's phrase with [`KEEP_SUFFIX`]: kept on Service deletion.
    pub keep: String,
    /// The in-tree provider's phrase (by legacy name), when the Service has a UID.
    pub legacy: Option<String>,
    /// What a kept floating IP says once its Service is deleted: no longer any ownership
    /// phrase, so neither kube-lb nor upstream ever releases it and audits do not count it.
    pub handed_over: String,
}

impl FloatingIpMarks {
    /// The marks for `service` in `cluster`.
    pub fn new(cluster: &str, service: &ServiceKey) -> Self {
        let release = floating_ip_description(cluster, service);
        FloatingIpMarks {
            keep: format!("{release}{KEEP_SUFFIX}"),
            release,
            legacy: legacy_load_balancer_name(service)
                .map(|name| legacy_floating_ip_description(cluster, &name)),
            handed_over: format!(
                "Kept floating IP of deleted Kubernetes Service {service} of cluster {cluster} (keep-floatingip); no longer managed by kube-lb"
            ),
        }
    }

    /// The description kube-lb writes for the current `keep-floatingip` value.
    pub fn current(&self, keep: bool) -> &str {
        if keep { &self.keep } else { &self.release }
    }

    /// What `description` records (pure).
    pub fn record(&self, description: &str) -> FloatingIpRecord {
        if description == self.keep {
            FloatingIpRecord::Keep
        } else if description == self.release || self.legacy.as_deref() == Some(description) {
            FloatingIpRecord::Release
        } else {
            FloatingIpRecord::NotOurs
        }
    }
}

/// What ensure does to a floating IP associated with the VIP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachedFloatingIp {
    /// Leave it.
    Leave,
    /// Rewrite its description (`keep-floatingip` changed, or a legacy phrase).
    Describe(String),
    /// Release it (ours, the Service turned internal, not kept).
    Release,
    /// Detach it (the Service turned internal: a user's, or kept), with a new description
    /// when ours and it records another `keep-floatingip` value.
    Detach(Option<String>),
}

/// Decides what ensure does to a floating IP on the VIP, from its description and the
/// Service's wishes (pure).
pub fn attached_floating_ip(description: &str, desired: &Desired) -> AttachedFloatingIp {
    let marks = &desired.floating_ip_marks;
    let record = marks.record(description);
    let wanted = marks.current(desired.keep_floating_ip);
    let rewrite =
        (record != FloatingIpRecord::NotOurs && description != wanted).then(|| wanted.to_string());
    match (desired.internal, record) {
        (false, _) => rewrite.map_or(AttachedFloatingIp::Leave, AttachedFloatingIp::Describe),
        (true, FloatingIpRecord::NotOurs) => AttachedFloatingIp::Detach(None),
        (true, _) if desired.keep_floating_ip => AttachedFloatingIp::Detach(rewrite),
        (true, _) => AttachedFloatingIp::Release,
    }
}

/// Whether an observed load balancer with our name is ours to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Made for this Service (or by upstream for it: same description, no UID tag yet).
    Ours,
    /// Made in this cluster (it carries this cluster's identity tag) for an earlier Service
    /// of the same namespace/name, the one named here by its UID. That Service is gone (a
    /// namespace/name belongs to one Service at a time) and was deleted without its load
    /// balancer (its finalizer removed by hand, say): the ensure removes it as that
    /// Service's delete would have, and then makes this Service's own.
    Leftover(ServiceKey),
    /// Someone else's: a different description, or another Service UID's tag. Holds who
    /// owns it, in words for the Warning.
    Foreign(String),
}

/// Decides ownership from the description, the UID tag and, when the cluster's identity is
/// known (`cluster_tag`), the cluster tag (pure). A load balancer under the legacy name is ours
/// when it carries the in-tree provider's description for that name.
pub fn ownership(
    lb: &LoadBalancer,
    cluster: &str,
    cluster_tag: Option<&str>,
    service: &ServiceKey,
) -> Ownership {
    let legacy = legacy_load_balancer_name(service)
        .filter(|name| *name == lb.name)
        .is_some_and(|name| lb.description == legacy_load_balancer_description(cluster, &name));
    if !legacy && lb.description != load_balancer_description(cluster, service) {
        return Ownership::Foreign(format!(
            "the owner its description {:?} names (not this cluster's Service)",
            lb.description
        ));
    }
    let Some(uid) = lb
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(UID_TAG_PREFIX))
        .filter(|uid| !same_uid(uid, &service.uid))
    else {
        return Ownership::Ours;
    };
    let this_cluster = cluster_tag.is_some_and(|tag| lb.tags.iter().any(|t| t == tag));
    if this_cluster && !legacy && !service.uid.is_empty() {
        return Ownership::Leftover(ServiceKey {
            uid: uid.to_string(),
            ..service.clone()
        });
    }
    let why = match cluster_tag {
        None => "kube-lb does not know this cluster's identity (--cluster-id), so it cannot tell a leftover of a deleted Service of this cluster from another cluster's with the same --cluster-name".to_string(),
        Some(tag) => format!("it lacks this cluster's tag {tag}: another cluster's with the same --cluster-name, or a leftover from before kube-lb tagged its cluster"),
    };
    Ownership::Foreign(format!(
        "Service UID {uid}, not {} ({why}; delete it to let kube-lb create a new one)",
        service.uid
    ))
}

/// A member the pool should have.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct DesiredMember {
    /// Node name.
    pub name: String,
    /// Node address.
    pub address: String,
    /// Node port.
    pub protocol_port: u16,
    /// Health-check port when it differs (HTTP monitor on the health-check node port).
    pub monitor_port: Option<u16>,
    /// Member subnet.
    pub subnet_id: Option<String>,
}

impl DesiredMember {
    fn body(&self) -> Value {
        // `monitor_port` always sent, `null` included: Octavia's batch update changes only the
        // attributes a matched member is sent, so leaving it out would keep an old health-check
        // port after a switch from Local to Cluster.
        let mut body = json!({"name": self.name, "address": self.address,
            "protocol_port": self.protocol_port, "monitor_port": self.monitor_port});
        if let Some(subnet) = &self.subnet_id {
            body["subnet_id"] = json!(subnet);
        }
        body
    }

    fn key(&self) -> (String, String, u16, Option<u16>) {
        (
            self.name.clone(),
            self.address.clone(),
            self.protocol_port,
            self.monitor_port,
        )
    }
}

/// The health monitor a pool should have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredMonitor {
    /// Name.
    pub name: String,
    /// `TCP`, `UDP-CONNECT` or `HTTP`.
    pub kind: &'static str,
    /// Seconds between checks.
    pub delay: u64,
    /// Seconds per check.
    pub timeout: u64,
    /// Successes to mark up.
    pub max_retries: u8,
    /// Failures to mark down.
    pub max_retries_down: u8,
}

impl DesiredMonitor {
    fn body(&self) -> Value {
        let mut body = json!({"name": self.name, "type": self.kind, "delay": self.delay, "timeout": self.timeout,
            "max_retries": self.max_retries, "max_retries_down": self.max_retries_down});
        if self.kind == "HTTP" {
            body["http_method"] = json!("GET");
            body["url_path"] = json!("/healthz");
            body["expected_codes"] = json!("200");
        }
        body
    }

    fn differs(&self, observed: &HealthMonitor) -> Vec<(&'static str, String, String)> {
        let mut changes = Vec::new();
        let mut check = |field, old: String, new: String| {
            if old != new {
                changes.push((field, old, new));
            }
        };
        check("delay", observed.delay.to_string(), self.delay.to_string());
        check(
            "timeout",
            observed.timeout.to_string(),
            self.timeout.to_string(),
        );
        check(
            "max_retries",
            observed.max_retries.to_string(),
            self.max_retries.to_string(),
        );
        check(
            "max_retries_down",
            observed
                .max_retries_down
                .map(|v| v.to_string())
                .unwrap_or_default(),
            self.max_retries_down.to_string(),
        );
        changes
    }
}

/// Octavia's listener timeout defaults (ms), restored when an annotation is removed.
pub const DEFAULT_TIMEOUTS: [(&str, u32); 4] = [
    ("timeout_client_data", 50_000),
    ("timeout_member_connect", 5_000),
    ("timeout_member_data", 50_000),
    ("timeout_tcp_inspect", 0),
];

/// A listener with its default pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DesiredListener {
    /// Listener name.
    pub name: String,
    /// `TCP`, `UDP`, `HTTP` (X-Forwarded-For) or `TERMINATED_HTTPS` (TLS container).
    pub protocol: &'static str,
    /// Service port.
    pub port: u16,
    /// `connection_limit` (-1: unlimited).
    pub connection_limit: i64,
    /// `allowed_cidrs` (`None`: everyone).
    pub allowed_cidrs: Option<Vec<String>>,
    /// `insert_headers` (`X-Forwarded-For` with the annotation).
    pub insert_headers: BTreeMap<String, String>,
    /// `default_tls_container_ref` for `TERMINATED_HTTPS`.
    pub tls_container_ref: Option<String>,
    /// The four timeouts, in [`DEFAULT_TIMEOUTS`] order; `None` when the provider driver has
    /// none (`ovn`). Only annotated ones are sent on create; all are compared.
    pub timeouts: Option<[(&'static str, u32, bool); 4]>,
    /// Tags (the Service UID on a load balancer kube-lb did not create).
    pub tags: Vec<String>,
    /// Pool name.
    pub pool_name: String,
    /// Pool protocol (`TCP`, `UDP`, `HTTP`, `PROXY`, `PROXYV2`).
    pub pool_protocol: &'static str,
    /// Pool algorithm.
    pub lb_algorithm: &'static str,
    /// Members.
    pub members: Vec<DesiredMember>,
    /// Health monitor.
    pub monitor: Option<DesiredMonitor>,
}

impl DesiredListener {
    /// The listener create body (without the pool).
    pub fn listener_body(&self, lb_id: Option<&str>) -> Value {
        let mut body = json!({"name": self.name, "protocol": self.protocol, "protocol_port": self.port,
            "connection_limit": self.connection_limit});
        if let Some(cidrs) = &self.allowed_cidrs {
            body["allowed_cidrs"] = json!(cidrs);
        }
        if !self.insert_headers.is_empty() {
            body["insert_headers"] = json!(self.insert_headers);
        }
        if let Some(reference) = &self.tls_container_ref {
            body["default_tls_container_ref"] = json!(reference);
        }
        for (field, value, annotated) in self.timeouts.iter().flatten() {
            if *annotated {
                body[*field] = json!(value);
            }
        }
        if !self.tags.is_empty() {
            body["tags"] = json!(self.tags);
        }
        if let Some(lb) = lb_id {
            body["loadbalancer_id"] = json!(lb);
        }
        body
    }

    /// The pool create body (without members and monitor).
    pub fn pool_body(&self, listener_id: Option<&str>) -> Value {
        let mut body = json!({"name": self.pool_name, "protocol": self.pool_protocol, "lb_algorithm": self.lb_algorithm});
        if let Some(listener) = listener_id {
            body["listener_id"] = json!(listener);
        }
        body
    }

    /// Member bodies for the batch update.
    pub fn member_bodies(&self) -> Vec<Value> {
        self.members.iter().map(DesiredMember::body).collect()
    }

    /// The monitor create body for `pool_id`.
    pub fn monitor_body(&self, pool_id: &str) -> Option<Value> {
        self.monitor.as_ref().map(|m| {
            let mut body = m.body();
            body["pool_id"] = json!(pool_id);
            body
        })
    }

    /// The listener with its pool, members and monitor inline, for a fully populated create.
    fn populated(&self) -> Value {
        let mut pool = self.pool_body(None);
        pool["members"] = json!(self.member_bodies());
        if let Some(monitor) = &self.monitor {
            pool["healthmonitor"] = monitor.body();
        }
        let mut listener = self.listener_body(None);
        listener["default_pool"] = pool;
        listener
    }

    /// The listener fields whose observed value differs (pure).
    fn listener_changes(&self, listener: &Listener) -> serde_json::Map<String, Value> {
        let mut body = serde_json::Map::new();
        if listener.connection_limit != self.connection_limit {
            body.insert("connection_limit".into(), json!(self.connection_limit));
        }
        let observed_cidrs = listener.allowed_cidrs.clone().filter(|c| !c.is_empty());
        if observed_cidrs != self.allowed_cidrs {
            body.insert("allowed_cidrs".into(), json!(self.allowed_cidrs));
        }
        // Octavia echoes header values as strings; compare as such.
        let observed_headers: BTreeMap<String, String> = listener
            .insert_headers
            .iter()
            .map(|(k, v)| {
                (
                    k.clone(),
                    v.as_str().map_or_else(|| v.to_string(), str::to_string),
                )
            })
            .collect();
        if observed_headers != self.insert_headers {
            body.insert("insert_headers".into(), json!(self.insert_headers));
        }
        if listener
            .default_tls_container_ref
            .as_ref()
            .filter(|r| !r.is_empty())
            != self.tls_container_ref.as_ref()
        {
            body.insert(
                "default_tls_container_ref".into(),
                json!(self.tls_container_ref),
            );
        }
        for (field, value, _) in self.timeouts.iter().flatten() {
            // A listener document without the field (Octavia < 2.1) is not compared.
            if let Some(observed) = listener.timeout(field)
                && observed != u64::from(*value)
            {
                body.insert((*field).into(), json!(value));
            }
        }
        body
    }
}

/// Where the VIP goes (at least one is set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vip {
    /// `vip_port_id`: a pre-created port.
    pub port_id: Option<String>,
    /// `vip_subnet_id`.
    pub subnet_id: Option<String>,
    /// `vip_network_id`.
    pub network_id: Option<String>,
    /// `vip_address` (internal Services' `loadBalancerIP`).
    pub address: Option<String>,
}

/// Where a floating IP comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FloatingSource {
    /// The network (`None`: the first external network).
    pub network_id: Option<String>,
    /// A fixed subnet.
    pub subnet_id: Option<String>,
    /// A subnet name pattern (`*` wildcards).
    pub subnet_name: Option<String>,
    /// Tags the subnet must carry.
    pub subnet_tags: Vec<String>,
}

/// Everything one Service's load balancer should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Load-balancer name.
    pub name: String,
    /// Load-balancer description (ownership phrase).
    pub description: String,
    /// Tags: the name (as upstream) and the Service UID.
    pub tags: Vec<String>,
    /// Where the VIP goes.
    pub vip: Vip,
    /// Octavia provider driver.
    pub provider: Option<String>,
    /// Octavia flavor (create only).
    pub flavor_id: Option<String>,
    /// Availability zone (create only).
    pub availability_zone: Option<String>,
    /// `load-balancer-id`: an existing load balancer to use instead of creating one.
    pub existing_id: Option<String>,
    /// One per Service port.
    pub listeners: Vec<DesiredListener>,
    /// No floating IP.
    pub internal: bool,
    /// Where a floating IP comes from.
    pub floating: FloatingSource,
    /// The floating IP the Service asks for (external `loadBalancerIP`).
    pub floating_ip_address: Option<String>,
    /// The descriptions marking floating IPs kube-lb creates for this Service.
    pub floating_ip_marks: FloatingIpMarks,
    /// `keep-floatingip`: a floating IP kube-lb made is detached, not released, when the
    /// Service turns internal or is deleted (recorded in its description, since a delete
    /// sees no annotations).
    pub keep_floating_ip: bool,
    /// The in-tree provider's name for this Service's load balancer, looked up when
    /// [`Desired::name`] is not found.
    pub legacy_name: Option<String>,
    /// `hostname`: reported instead of the address.
    pub hostname: Option<String>,
    /// `enable-ingress-hostname` with PROXY protocol: report `<ip>.<suffix>`.
    pub ingress_hostname_suffix: Option<String>,
    /// The members' subnet (where `manage-security-groups` attaches the Service's group).
    pub member_subnet_id: Option<String>,
    /// kube-lb recorded on the Service that it made a security group for it (so one is to
    /// be converged, or removed once `manage-security-groups` is off).
    pub security_group_recorded: bool,
}

impl Desired {
    /// The description kube-lb gives the floating IP it creates.
    pub fn floating_ip_description(&self) -> &str {
        self.floating_ip_marks.current(self.keep_floating_ip)
    }

    /// Puts the members on `subnet_id`, found for a Service whose configuration names no
    /// member subnet (see [`crate::member_subnet`]).
    pub fn use_member_subnet(&mut self, subnet_id: &str) {
        self.member_subnet_id = Some(subnet_id.to_string());
        for member in self.listeners.iter_mut().flat_map(|l| l.members.iter_mut()) {
            member.subnet_id = Some(subnet_id.to_string());
        }
    }

    /// True when `lb` carries this Service's name or its legacy name.
    pub fn names(&self, lb: &LoadBalancer) -> bool {
        lb.name == self.name || self.legacy_name.as_deref() == Some(lb.name.as_str())
    }

    /// The fully populated create body.
    pub fn create_body(&self) -> Value {
        let mut body = json!({"name": self.name, "description": self.description, "tags": self.tags,
            "listeners": self.listeners.iter().map(DesiredListener::populated).collect::<Vec<_>>()});
        let optional = [
            ("vip_port_id", &self.vip.port_id),
            ("vip_subnet_id", &self.vip.subnet_id),
            ("vip_network_id", &self.vip.network_id),
            ("vip_address", &self.vip.address),
            ("provider", &self.provider),
            ("flavor_id", &self.flavor_id),
            ("availability_zone", &self.availability_zone),
        ];
        for (field, value) in optional {
            if let Some(value) = value {
                body[field] = json!(value);
            }
        }
        body
    }

    /// `.status.loadBalancer` for a load balancer reachable at `address` (pure).
    pub fn status(&self, address: &str) -> LoadBalancerStatus {
        let hostname = self.hostname.clone().or_else(|| {
            self.ingress_hostname_suffix
                .as_ref()
                .map(|suffix| format!("{address}.{suffix}"))
        });
        // PROXY protocol: clients inside the cluster must go through the load balancer too
        // (a node proxy short-circuiting the IP would deliver no PROXY header), which is what
        // `ipMode: Proxy` tells them. The hostname form (enable-ingress-hostname) predates it.
        let proxied = self
            .listeners
            .iter()
            .any(|l| matches!(l.pool_protocol, "PROXY" | "PROXYV2"));
        let ingress = match hostname {
            Some(hostname) => Some(LoadBalancerIngress {
                hostname: Some(hostname),
                ..LoadBalancerIngress::default()
            }),
            None => address.parse().ok().map(|ip| LoadBalancerIngress {
                ip: Some(ip),
                ip_mode: proxied.then_some(IpMode::Proxy),
                ..LoadBalancerIngress::default()
            }),
        };
        LoadBalancerStatus {
            ingress: ingress.into_iter().collect(),
            ..Default::default()
        }
    }
}

/// The value of [`key::CREATED_WITH`] for `lb` (pure): its create-only settings as Octavia
/// reports them, so the annotation parser can tell a later change of flavor, zone or VIP
/// annotations (which Octavia cannot apply) from the values the load balancer has; with the
/// floating IP on its VIP (`floating_ip`), which kube-lb, as upstream, never moves to another
/// `loadBalancerIP` once attached; the security group kube-lb manages for the Service
/// (`security_group`), so turning `manage-security-groups` off removes it without a lookup on
/// every resync of Services that never had one; and its id (`load_balancer_id`), which tells
/// the parser that the `load-balancer-id` kube-lb writes back ([`occm_written_back`]) names
/// this load balancer, not an existing one to use.
pub fn created_with(
    lb: &LoadBalancer,
    floating_ip: Option<&str>,
    security_group: Option<&str>,
) -> String {
    let fields = [
        ("availability_zone", &lb.availability_zone),
        ("flavor_id", &lb.flavor_id),
        ("floating_ip_address", &floating_ip.map(str::to_string)),
        ("load_balancer_id", &Some(lb.id.clone())),
        ("security_group", &security_group.map(str::to_string)),
        ("vip_address", &Some(lb.vip_address.clone())),
        ("vip_network_id", &lb.vip_network_id),
        ("vip_port_id", &Some(lb.vip_port_id.clone())),
        ("vip_subnet_id", &lb.vip_subnet_id),
    ];
    let recorded: BTreeMap<&str, &str> = fields
        .iter()
        .filter_map(|(field, value)| {
            value
                .as_deref()
                .filter(|v| !v.is_empty())
                .map(|v| (*field, v))
        })
        .collect();
    json!(recorded).to_string()
}

/// What cloud-provider-openstack writes back on the Service after every ensure, so a cluster
/// going back to OCCM, or a tool reading them, finds them (pure): the load balancer's id
/// (`load-balancer-id`) and the address the Service is reached at (`load-balancer-address`),
/// the floating IP or, without one, the VIP, as OCCM's `ensureFloatingIP` returns it.
pub fn occm_written_back(lb_id: &str, address: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (key::LOAD_BALANCER_ID.to_string(), lb_id.to_string()),
        (key::LOAD_BALANCER_ADDRESS.to_string(), address.to_string()),
    ])
}

/// The address a node's members use (pure): its InternalIP, else its first address.
pub fn member_address(node: &BackendNode) -> Option<std::net::IpAddr> {
    node.internal_ip()
        .or_else(|| node.addresses.first().map(|a| a.ip))
}

/// The value of [`key::CREATED_WITH`] for a load balancer kube-lb did not create (adopted
/// with `load-balancer-id`): only the security group it manages for the Service, if any
/// (pure).
pub fn recorded_security_group(security_group: Option<&str>) -> String {
    let recorded: BTreeMap<&str, &str> = security_group
        .filter(|g| !g.is_empty())
        .map(|g| ("security_group", g))
        .into_iter()
        .collect();
    json!(recorded).to_string()
}

/// True when `node` satisfies every requirement of an upstream node selector (`k=v`, `k`).
pub fn node_selected(selector: Option<&[LabelRequirement]>, node: &BackendNode) -> bool {
    selector.unwrap_or_default().iter().all(|r| {
        let value = node.labels.get(&r.key);
        match r.operator {
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
            SelectorOperator::Equals | SelectorOperator::In => {
                value.is_some_and(|v| r.values.contains(v))
            }
            SelectorOperator::NotEquals | SelectorOperator::NotIn => {
                value.is_none_or(|v| !r.values.contains(v))
            }
        }
    })
}

fn user_error(
    key: &str,
    value: impl std::fmt::Display,
    why: impl std::fmt::Display,
) -> ProviderError {
    ProviderError::user(format!("annotation {key} = \"{value}\": {why}"))
}

/// The desired graph for `spec` over `backends` (pure). Errors are the Service author's, or
/// a configuration gap (no VIP subnet anywhere).
pub fn desired(
    spec: &LoadBalancerSpec,
    backends: &[BackendNode],
    cluster: &str,
    config: &LoadBalancerConfig,
) -> Result<Desired, ProviderError> {
    let default_spec = OpenstackSpec::default();
    let os = match &spec.provider {
        ProviderSpec::Openstack(os) => os,
        _ => &default_spec,
    };
    let class = match &os.class {
        None => None,
        Some(name) => Some(config.classes.get(name).ok_or_else(|| {
            let known: Vec<&str> = config.classes.keys().map(String::as_str).collect();
            user_error(
                key::CLASS,
                name,
                format!(
                    "cloud.conf has no [LoadBalancerClass \"{name}\"] (known classes: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            )
        })?),
    };
    // Class, then annotation, then [LoadBalancer] (upstream's order).
    let pick = |of_class: fn(&LoadBalancerClass) -> &Option<String>, annotated: &Option<String>| {
        class
            .and_then(|c| of_class(c).clone())
            .or_else(|| annotated.clone())
            .or_else(|| of_class(&config.network).clone())
    };
    let internal = config.internal_lb || spec.scheme == Scheme::Internal || os.internal;
    let name = load_balancer_name(cluster, &spec.service);
    let vip = Vip {
        port_id: os.port_id.clone(),
        subnet_id: pick(|c| &c.subnet_id, &os.subnet_id),
        network_id: pick(|c| &c.network_id, &os.network_id),
        address: spec
            .requested_ip
            .filter(|_| internal)
            .map(|ip| ip.to_string()),
    };
    if os.load_balancer_id.is_none()
        && vip.port_id.is_none()
        && vip.subnet_id.is_none()
        && vip.network_id.is_none()
    {
        return Err(ProviderError::environment(
            "config",
            kube_lb_provider_core::EnvironmentCause::MissingDependency,
            "no VIP subnet: set [LoadBalancer] subnet-id (or network-id) in cloud.conf, or the loadbalancer.openstack.org/subnet-id annotation",
        ));
    }
    let member_subnet =
        pick(|c| &c.member_subnet_id, &os.member_subnet_id).or_else(|| vip.subnet_id.clone());
    let lb_algorithm = os.lb_method.unwrap_or(config.lb_method).as_str();
    let health_check_node_port = match spec.traffic_policy {
        TrafficPolicy::Local {
            health_check_node_port,
        } => Some(health_check_node_port),
        TrafficPolicy::Cluster => None,
    };
    // Local traffic needs a monitor: without one, nodes with no endpoint black-hole traffic.
    let monitor_wanted = os.health_monitor.enabled.unwrap_or(config.create_monitor)
        || health_check_node_port.is_some();
    let hm = &os.health_monitor;
    let monitor_delay = hm.delay.map_or(config.monitor_delay.as_secs(), u64::from);
    let monitor_timeout = hm
        .timeout
        .map_or(config.monitor_timeout.as_secs(), u64::from);
    if monitor_wanted && monitor_timeout > monitor_delay {
        return Err(user_error(
            key::HEALTH_MONITOR_TIMEOUT,
            monitor_timeout,
            format!(
                "Octavia refuses a monitor timeout above its delay ({monitor_delay} s, from {} or cloud.conf monitor-delay)",
                key::HEALTH_MONITOR_DELAY
            ),
        ));
    }
    let clamp =
        |v: Option<u32>, default: u8| v.and_then(|v| u8::try_from(v).ok()).unwrap_or(default);
    let ovn = config.lb_provider.as_deref() == Some("ovn");
    let annotated = [
        os.timeouts.client_data,
        os.timeouts.member_connect,
        os.timeouts.member_data,
        os.timeouts.tcp_inspect,
    ];
    let timeouts = (!ovn).then(|| {
        let mut t = [("", 0, false); 4];
        for (i, (field, default)) in DEFAULT_TIMEOUTS.iter().enumerate() {
            t[i] = (
                *field,
                annotated[i].unwrap_or(*default),
                annotated[i].is_some(),
            );
        }
        t
    });
    let selected: Vec<&BackendNode> = backends
        .iter()
        .filter(|node| node_selected(os.node_selector.as_deref(), node))
        .collect();
    let mut listeners = Vec::new();
    for (index, port) in spec.ports.iter().enumerate() {
        let transport = match port.protocol {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => {
                return Err(ProviderError::user(format!(
                    "port {}: SCTP is not supported by the OpenStack provider (TCP and UDP are)",
                    port.port
                )));
            }
        };
        let protocol = match transport {
            "TCP" if os.default_tls_container_ref.is_some() => "TERMINATED_HTTPS",
            "TCP" if os.x_forwarded_for => "HTTP",
            other => other,
        };
        let pool_protocol = match (os.proxy_protocol, transport) {
            (Some(_), "UDP") => {
                return Err(user_error(
                    key::PROXY_PROTOCOL,
                    "on",
                    format!("applies to TCP ports only; port {} is UDP", port.port),
                ));
            }
            (Some(OpenstackProxyProtocol::V1), _) => "PROXY",
            (Some(OpenstackProxyProtocol::V2), _) => "PROXYV2",
            (None, _) if protocol == "TCP" || protocol == "UDP" => protocol,
            (None, _) => "HTTP",
        };
        let http_check_port = health_check_node_port
            .flatten()
            .filter(|_| transport == "TCP");
        let members = match port.node_port {
            None => Vec::new(),
            Some(node_port) => {
                let mut members: Vec<DesiredMember> = selected
                    .iter()
                    .filter_map(|node| {
                        let address = member_address(node)?;
                        Some(DesiredMember {
                            name: node.name.clone(),
                            address: address.to_string(),
                            protocol_port: node_port,
                            monitor_port: http_check_port.filter(|_| monitor_wanted),
                            subnet_id: member_subnet.clone(),
                        })
                    })
                    .collect();
                members.sort();
                members
            }
        };
        let monitor = monitor_wanted.then(|| DesiredMonitor {
            name: monitor_name(index, &name),
            kind: match (transport, http_check_port) {
                ("UDP", _) => "UDP-CONNECT",
                (_, Some(_)) => "HTTP",
                _ => "TCP",
            },
            delay: monitor_delay,
            timeout: monitor_timeout,
            max_retries: clamp(hm.max_retries, config.monitor_max_retries),
            max_retries_down: clamp(hm.max_retries_down, config.monitor_max_retries_down),
        });
        let allowed_cidrs = (!spec.source_ranges.allows_all()).then(|| {
            spec.source_ranges
                .cidrs
                .iter()
                .map(ToString::to_string)
                .collect()
        });
        let insert_headers = if os.x_forwarded_for && protocol != transport {
            BTreeMap::from([("X-Forwarded-For".to_string(), "true".to_string())])
        } else {
            BTreeMap::new()
        };
        listeners.push(DesiredListener {
            name: listener_name(index, &name),
            protocol,
            port: port.port,
            connection_limit: os.connection_limit,
            allowed_cidrs,
            insert_headers,
            tls_container_ref: os
                .default_tls_container_ref
                .clone()
                .filter(|_| protocol == "TERMINATED_HTTPS"),
            timeouts,
            tags: if os.load_balancer_id.is_some() {
                vec![uid_tag(&spec.service)]
            } else {
                Vec::new()
            },
            pool_name: pool_name(index, &name),
            pool_protocol,
            lb_algorithm,
            members,
            monitor,
        });
    }
    let requested = spec.requested_ip.map(|ip| ip.to_string());
    Ok(Desired {
        description: load_balancer_description(cluster, &spec.service),
        tags: vec![name.clone(), uid_tag(&spec.service)],
        name,
        vip,
        provider: config.lb_provider.clone(),
        flavor_id: os.flavor_id.clone().or_else(|| config.flavor_id.clone()),
        availability_zone: os
            .availability_zone
            .clone()
            .or_else(|| config.availability_zone.clone()),
        existing_id: os.load_balancer_id.clone(),
        listeners,
        internal,
        floating: FloatingSource {
            network_id: pick(|c| &c.floating_network_id, &os.floating_network_id),
            subnet_id: pick(|c| &c.floating_subnet_id, &os.floating_subnet_id),
            subnet_name: pick(|c| &c.floating_subnet, &os.floating_subnet),
            subnet_tags: class
                .map(|c| c.floating_subnet_tags.clone())
                .filter(|t| !t.is_empty())
                .or_else(|| Some(os.floating_subnet_tags.clone()).filter(|t| !t.is_empty()))
                .unwrap_or_else(|| config.network.floating_subnet_tags.clone()),
        },
        floating_ip_address: requested.filter(|_| !internal),
        floating_ip_marks: FloatingIpMarks::new(cluster, &spec.service),
        keep_floating_ip: os.keep_floating_ip,
        security_group_recorded: os.security_group_recorded,
        legacy_name: legacy_load_balancer_name(&spec.service),
        hostname: os.hostname.clone(),
        ingress_hostname_suffix: (config.enable_ingress_hostname && os.proxy_protocol.is_some())
            .then(|| config.ingress_hostname_suffix.clone()),
        member_subnet_id: member_subnet,
    })
}

/// True when `name` matches `pattern`, where `*` stands for any run of characters.
pub fn name_matches(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(at) => rest = &rest[at + middle.len()..],
            None => return false,
        }
    }
    true
}

/// What exists under one load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Its listeners.
    pub listeners: Vec<Listener>,
    /// Its pools.
    pub pools: Vec<Pool>,
    /// Members by pool id.
    pub members: BTreeMap<String, Vec<Member>>,
    /// Monitors by id.
    pub monitors: BTreeMap<String, HealthMonitor>,
}

/// The Octavia object a step works on: one observed (its id), or one an earlier step of the
/// same phase creates (named; its id exists only once that step ran, so the flow resolves it
/// through a slot when the step runs).
#[derive(Debug, Clone, PartialEq)]
pub enum Ref {
    /// Observed, with this id.
    Known(String),
    /// Created earlier in the same phase, under this name.
    New(String),
}

/// One change under an existing load balancer, in the order it is applied.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Add our tags (adopting an upstream load balancer, or a lost tag).
    TagLoadBalancer {
        /// The full tag list.
        tags: Vec<String>,
    },
    /// Delete a pool (members and monitor go with it).
    DeletePool {
        /// Pool id.
        id: String,
        /// Its name, for plans.
        name: String,
    },
    /// Delete a listener.
    DeleteListener {
        /// Listener id.
        id: String,
        /// Its name.
        name: String,
    },
    /// Change a listener in place.
    UpdateListener {
        /// Listener id.
        id: String,
        /// Its name.
        name: String,
        /// The changed fields.
        body: Value,
    },
    /// Create a listener (its pool, members and monitor are steps of their own).
    CreateListener(Box<DesiredListener>),
    /// Create the default pool of a listener.
    CreatePool {
        /// The listener.
        listener: Ref,
        /// What to build.
        desired: Box<DesiredListener>,
    },
    /// Change a pool's algorithm.
    UpdatePool {
        /// Pool id.
        id: String,
        /// Its name.
        name: String,
        /// The changed fields.
        body: Value,
    },
    /// Replace a pool's members in one batch call.
    ReplaceMembers {
        /// The pool.
        pool: Ref,
        /// Its name.
        name: String,
        /// The member bodies.
        members: Vec<Value>,
    },
    /// Create a monitor.
    CreateMonitor {
        /// The pool it watches.
        pool: Ref,
        /// The body, without its pool id (added when the pool's id is known).
        body: Value,
        /// Its name.
        name: String,
    },
    /// Change a monitor in place.
    UpdateMonitor {
        /// Monitor id.
        id: String,
        /// Its name.
        name: String,
        /// The changed fields.
        body: Value,
    },
    /// Delete a monitor.
    DeleteMonitor {
        /// Monitor id.
        id: String,
        /// Its name.
        name: String,
    },
}

impl Step {
    /// The step as `kube-lb plan` prints it.
    pub fn planned(&self) -> PlannedChange {
        match self {
            Step::TagLoadBalancer { tags } => PlannedChange::new(
                ChangeAction::Modify,
                "LoadBalancer",
                "",
                "PUT loadbalancers",
            )
            .field("tags", None, Some(tags.join(","))),
            Step::DeletePool { name, .. } => {
                PlannedChange::new(ChangeAction::Delete, "Pool", name, "DELETE pools")
            }
            Step::DeleteListener { name, .. } => {
                PlannedChange::new(ChangeAction::Delete, "Listener", name, "DELETE listeners")
            }
            Step::UpdateListener { name, body, .. } => fields(
                PlannedChange::new(ChangeAction::Modify, "Listener", name, "PUT listeners"),
                body,
            ),
            Step::CreateListener(desired) => PlannedChange::new(
                ChangeAction::Create,
                "Listener",
                &desired.name,
                "POST listeners",
            )
            .field("protocol_port", None, Some(desired.port.to_string())),
            Step::CreatePool { desired, .. } => PlannedChange::new(
                ChangeAction::Create,
                "Pool",
                &desired.pool_name,
                "POST pools",
            ),
            Step::UpdatePool { name, body, .. } => fields(
                PlannedChange::new(ChangeAction::Modify, "Pool", name, "PUT pools"),
                body,
            ),
            Step::ReplaceMembers { name, members, .. } => {
                PlannedChange::new(ChangeAction::Modify, "Pool", name, "PUT pools/members").field(
                    "members",
                    None,
                    Some(
                        members
                            .iter()
                            .map(|m| {
                                format!(
                                    "{}:{}",
                                    m["address"].as_str().unwrap_or_default(),
                                    m["protocol_port"]
                                )
                            })
                            .collect::<Vec<_>>()
                            .join(","),
                    ),
                )
            }
            Step::CreateMonitor { name, .. } => PlannedChange::new(
                ChangeAction::Create,
                "HealthMonitor",
                name,
                "POST healthmonitors",
            ),
            Step::UpdateMonitor { name, body, .. } => fields(
                PlannedChange::new(
                    ChangeAction::Modify,
                    "HealthMonitor",
                    name,
                    "PUT healthmonitors",
                ),
                body,
            ),
            Step::DeleteMonitor { name, .. } => PlannedChange::new(
                ChangeAction::Delete,
                "HealthMonitor",
                name,
                "DELETE healthmonitors",
            ),
        }
    }
}

fn fields(mut change: PlannedChange, body: &Value) -> PlannedChange {
    if let Some(object) = body.as_object() {
        for (key, value) in object {
            change = change.field(key.clone(), None, Some(value.to_string()));
        }
    }
    change
}

/// The steps that turn `observed` (under `lb`) into `desired` (pure). Listeners are matched
/// by protocol and port, as upstream does: a changed port is a new listener and a deleted
/// one, and nothing else is touched.
pub fn plan(lb: &LoadBalancer, observed: &Observed, desired: &Desired) -> Vec<Step> {
    let mut steps = Vec::new();
    let missing_tags: Vec<&String> = desired
        .tags
        .iter()
        .filter(|t| !lb.tags.contains(t))
        .collect();
    if !missing_tags.is_empty() {
        // Keep others' tags (e.g. a Service sharing the LB upstream-style), drop a stale UID tag.
        let mut tags: Vec<String> = lb
            .tags
            .iter()
            .filter(|t| !t.starts_with(UID_TAG_PREFIX))
            .cloned()
            .collect();
        for tag in &desired.tags {
            if !tags.contains(tag) {
                tags.push(tag.clone());
            }
        }
        steps.push(Step::TagLoadBalancer { tags });
    }
    let wanted = |l: &Listener| {
        desired
            .listeners
            .iter()
            .any(|d| d.protocol == l.protocol && d.port == l.protocol_port)
    };
    // Leftover listeners first, so a port moved between listeners never clashes.
    for listener in observed.listeners.iter().filter(|l| !wanted(l)) {
        if let Some(pool) = listener
            .default_pool_id
            .as_ref()
            .and_then(|id| observed.pools.iter().find(|p| &p.id == id))
        {
            steps.push(Step::DeletePool {
                id: pool.id.clone(),
                name: pool.name.clone(),
            });
        }
        steps.push(Step::DeleteListener {
            id: listener.id.clone(),
            name: listener.name.clone(),
        });
    }
    for want in &desired.listeners {
        let Some(listener) = observed
            .listeners
            .iter()
            .find(|l| l.protocol == want.protocol && l.protocol_port == want.port)
        else {
            steps.push(Step::CreateListener(Box::new(want.clone())));
            build_pool(&mut steps, Ref::New(want.name.clone()), want);
            continue;
        };
        let body = want.listener_changes(listener);
        if !body.is_empty() {
            steps.push(Step::UpdateListener {
                id: listener.id.clone(),
                name: listener.name.clone(),
                body: Value::Object(body),
            });
        }
        let pool = listener
            .default_pool_id
            .as_ref()
            .and_then(|id| observed.pools.iter().find(|p| &p.id == id));
        let pool = match pool {
            Some(pool) if pool.protocol == want.pool_protocol => pool,
            stale => {
                // A pool's protocol cannot change: replace it (members and monitor go with it).
                if let Some(pool) = stale {
                    steps.push(Step::DeletePool {
                        id: pool.id.clone(),
                        name: pool.name.clone(),
                    });
                }
                build_pool(&mut steps, Ref::Known(listener.id.clone()), want);
                continue;
            }
        };
        if pool.lb_algorithm != want.lb_algorithm {
            steps.push(Step::UpdatePool {
                id: pool.id.clone(),
                name: pool.name.clone(),
                body: json!({"lb_algorithm": want.lb_algorithm}),
            });
        }
        let mut have: Vec<_> = observed
            .members
            .get(&pool.id)
            .into_iter()
            .flatten()
            .map(|m| {
                (
                    m.name.clone(),
                    m.address.clone(),
                    m.protocol_port,
                    m.monitor_port,
                )
            })
            .collect();
        have.sort();
        let mut want_members: Vec<_> = want.members.iter().map(DesiredMember::key).collect();
        want_members.sort();
        if have != want_members {
            steps.push(Step::ReplaceMembers {
                pool: Ref::Known(pool.id.clone()),
                name: pool.name.clone(),
                members: want.member_bodies(),
            });
        }
        let monitor = pool
            .healthmonitor_id
            .as_ref()
            .and_then(|id| observed.monitors.get(id));
        match (monitor, &want.monitor) {
            (None, None) => {}
            (Some(monitor), None) => steps.push(Step::DeleteMonitor {
                id: monitor.id.clone(),
                name: monitor.name.clone(),
            }),
            (None, Some(wanted)) => steps.push(Step::CreateMonitor {
                pool: Ref::Known(pool.id.clone()),
                body: wanted.body(),
                name: wanted.name.clone(),
            }),
            (Some(monitor), Some(wanted)) if monitor.kind != wanted.kind => {
                steps.push(Step::DeleteMonitor {
                    id: monitor.id.clone(),
                    name: monitor.name.clone(),
                });
                steps.push(Step::CreateMonitor {
                    pool: Ref::Known(pool.id.clone()),
                    body: wanted.body(),
                    name: wanted.name.clone(),
                });
            }
            (Some(monitor), Some(wanted)) => {
                let changes = wanted.differs(monitor);
                if !changes.is_empty() {
                    let mut body = serde_json::Map::new();
                    for (field, _, new) in changes {
                        let number: u64 = new.parse().unwrap_or_default();
                        body.insert(field.into(), json!(number));
                    }
                    steps.push(Step::UpdateMonitor {
                        id: monitor.id.clone(),
                        name: monitor.name.clone(),
                        body: Value::Object(body),
                    });
                }
            }
        }
    }
    steps
}

/// A new pool for `listener` with its members (one batch call) and monitor: the chain a new
/// listener or a replaced pool needs, each step after the pool taking the pool's new id.
fn build_pool(steps: &mut Vec<Step>, listener: Ref, want: &DesiredListener) {
    steps.push(Step::CreatePool {
        listener,
        desired: Box::new(want.clone()),
    });
    let pool = Ref::New(want.pool_name.clone());
    if !want.members.is_empty() {
        steps.push(Step::ReplaceMembers {
            pool: pool.clone(),
            name: want.pool_name.clone(),
            members: want.member_bodies(),
        });
    }
    if let Some(monitor) = &want.monitor {
        steps.push(Step::CreateMonitor {
            pool,
            body: monitor.body(),
            name: monitor.name.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A load balancer with the create-only fields unset.
    fn lb_fixture() -> LoadBalancer {
        LoadBalancer {
            id: "lb".into(),
            name: String::new(),
            description: String::new(),
            provisioning_status: "ACTIVE".into(),
            vip_address: String::new(),
            vip_port_id: String::new(),
            tags: Vec::new(),
            created_at: None,
            vip_subnet_id: None,
            vip_network_id: None,
            flavor_id: None,
            availability_zone: None,
        }
    }

    fn key() -> ServiceKey {
        ServiceKey {
            namespace: "prod".into(),
            name: "web".into(),
            uid: "u-1".into(),
        }
    }

    #[test]
    fn names_and_phrases_match_upstream() {
        let lb = load_balancer_name("kubernetes", &key());
        assert_eq!(lb, "kube_service_kubernetes_prod_web");
        assert_eq!(
            listener_name(0, &lb),
            "listener_0_kube_service_kubernetes_prod_web"
        );
        assert_eq!(pool_name(1, &lb), "pool_1_kube_service_kubernetes_prod_web");
        assert_eq!(
            monitor_name(2, &lb),
            "monitor_2_kube_service_kubernetes_prod_web"
        );
        assert_eq!(
            load_balancer_description("c1", &key()),
            "Kubernetes external service prod/web from cluster c1"
        );
        assert_eq!(
            floating_ip_description("c1", &key()),
            "Floating IP for Kubernetes external service prod/web from cluster c1"
        );
        let long = ServiceKey {
            namespace: "n".repeat(200),
            name: "s".repeat(200),
            uid: String::new(),
        };
        assert_eq!(load_balancer_name("c", &long).chars().count(), 255);
    }

    #[test]
    fn legacy_names_uids_and_recorded_owners() {
        let service = ServiceKey {
            namespace: "prod".into(),
            name: "web".into(),
            uid: "3c9f1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b".into(),
        };
        let legacy = legacy_load_balancer_name(&service).expect("has a UID");
        assert_eq!(legacy, "a3c9f1a2b4d5e4f608a7b9c0d1e2f3a4", "a + 31 digits");
        assert_eq!(legacy_load_balancer_name(&key()), Some("au1".into()));
        assert_eq!(
            legacy_load_balancer_name(&ServiceKey {
                uid: String::new(),
                ..key()
            }),
            None
        );

        let digits = "3c9f1a2b4d5e4f608a7b9c0d1e2f3a4";
        for (a, b, same) in [
            (service.uid.as_str(), service.uid.as_str(), true),
            (service.uid.as_str(), digits, true),
            (digits, "3C9F1A2B-4D5E-4F60-8A7B-9C0D1E2F3A4B", true),
            (service.uid.as_str(), "3c9f1a2b4d5e", false),
            (
                service.uid.as_str(),
                "11111111-2222-3333-4444-555555555555",
                false,
            ),
            ("u-1", "u-2", false),
        ] {
            assert_eq!(same_uid(a, b), same, "{a} {b}");
        }

        let by_name = |namespace: &str, name: &str| {
            Some(ServiceKey {
                namespace: namespace.into(),
                name: name.into(),
                uid: String::new(),
            })
        };
        let by_uid = Some(ServiceKey {
            namespace: String::new(),
            name: String::new(),
            uid: digits.into(),
        });
        let cases = [
            (
                load_balancer_description("c", &service),
                LOAD_BALANCER_PHRASE,
                None,
                by_name("prod", "web"),
            ),
            (
                floating_ip_description("c", &service),
                FLOATING_IP_PHRASE,
                None,
                by_name("prod", "web"),
            ),
            (
                format!("{}{KEEP_SUFFIX}", floating_ip_description("c", &service)),
                FLOATING_IP_PHRASE,
                None,
                by_name("prod", "web"),
            ),
            (
                floating_ip_description("other", &service),
                FLOATING_IP_PHRASE,
                None,
                None,
            ),
            (
                legacy_load_balancer_description("c", &legacy),
                LOAD_BALANCER_PHRASE,
                Some(legacy.as_str()),
                by_uid.clone(),
            ),
            (
                legacy_load_balancer_description("c", &legacy),
                LOAD_BALANCER_PHRASE,
                Some("renamed"),
                None,
            ),
            (
                legacy_floating_ip_description("c", &legacy),
                FLOATING_IP_PHRASE,
                None,
                by_uid,
            ),
            (
                FloatingIpMarks::new("c", &service).handed_over,
                FLOATING_IP_PHRASE,
                None,
                None,
            ),
            (
                "Floating IP for Kubernetes external service ahello from cluster c".into(),
                FLOATING_IP_PHRASE,
                None,
                None,
            ),
        ];
        for (description, phrase, name, want) in cases {
            assert_eq!(
                recorded_owner(&description, phrase, "c", name),
                want,
                "{description}"
            );
        }
    }

    #[test]
    fn floating_ip_records_decide_release_keep_and_hand_over() {
        let service = ServiceKey {
            uid: "3c9f1a2b-4d5e-4f60-8a7b-9c0d1e2f3a4b".into(),
            ..key()
        };
        let marks = FloatingIpMarks::new("c", &service);
        let legacy = marks.legacy.clone().expect("legacy phrase");
        for (description, record) in [
            (marks.release.as_str(), FloatingIpRecord::Release),
            (marks.keep.as_str(), FloatingIpRecord::Keep),
            (legacy.as_str(), FloatingIpRecord::Release),
            (marks.handed_over.as_str(), FloatingIpRecord::NotOurs),
            ("reserved by hand", FloatingIpRecord::NotOurs),
        ] {
            assert_eq!(marks.record(description), record, "{description}");
        }
        assert!(
            marks.keep.starts_with(&marks.release),
            "upstream still sees its phrase"
        );
        assert!(!marks.handed_over.contains(FLOATING_IP_PHRASE.trim_end()));

        let desired = |internal: bool, keep: bool| Desired {
            internal,
            keep_floating_ip: keep,
            floating_ip_marks: marks.clone(),
            ..desired(
                &parsed(json!({}), json!([tcp(80, 30080)]), false),
                &backends(),
                "c",
                &config(),
            )
            .expect("desired")
        };
        use AttachedFloatingIp::*;
        let cases = [
            // (description, internal, keep, action)
            (&marks.release, false, false, Leave),
            (&marks.release, false, true, Describe(marks.keep.clone())),
            (&marks.keep, false, false, Describe(marks.release.clone())),
            (&legacy, false, false, Describe(marks.release.clone())),
            (&"a user's".to_string(), false, true, Leave),
            (&marks.release, true, false, Release),
            (&marks.keep, true, false, Release),
            (&marks.release, true, true, Detach(Some(marks.keep.clone()))),
            (&marks.keep, true, true, Detach(None)),
            (&"a user's".to_string(), true, false, Detach(None)),
        ];
        for (description, internal, keep, want) in cases {
            assert_eq!(
                attached_floating_ip(description, &desired(internal, keep)),
                want,
                "{description} internal={internal} keep={keep}"
            );
        }
    }

    #[test]
    fn created_with_records_the_create_only_fields_octavia_reports() {
        let lb = LoadBalancer {
            vip_port_id: "port".into(),
            vip_subnet_id: Some("subnet".into()),
            flavor_id: Some(String::new()),
            availability_zone: Some("az1".into()),
            ..lb_fixture()
        };
        assert_eq!(
            created_with(&lb, None, None),
            r#"{"availability_zone":"az1","load_balancer_id":"lb","vip_port_id":"port","vip_subnet_id":"subnet"}"#
        );
        let lb = LoadBalancer {
            vip_address: "10.0.0.9".into(),
            ..lb
        };
        assert_eq!(
            created_with(&lb, Some("203.0.113.7"), None),
            r#"{"availability_zone":"az1","floating_ip_address":"203.0.113.7","load_balancer_id":"lb","vip_address":"10.0.0.9","vip_port_id":"port","vip_subnet_id":"subnet"}"#
        );
    }

    #[test]
    fn occm_writes_back_the_id_and_the_address_the_service_is_reached_at() {
        let written = occm_written_back("lb-1", "203.0.113.7");
        assert_eq!(
            written,
            BTreeMap::from([
                (key::LOAD_BALANCER_ID.to_string(), "lb-1".to_string()),
                (
                    key::LOAD_BALANCER_ADDRESS.to_string(),
                    "203.0.113.7".to_string()
                ),
            ])
        );
        // The id written back is the one recorded, so the parser reads it as this Service's
        // own load balancer.
        let lb = LoadBalancer {
            id: "lb-1".into(),
            ..lb_fixture()
        };
        let recorded: Value = serde_json::from_str(&created_with(&lb, None, None)).unwrap();
        assert_eq!(recorded["load_balancer_id"], written[key::LOAD_BALANCER_ID]);
    }

    #[test]
    fn ownership_needs_our_description_and_no_other_uid() {
        let lb = |description: &str, tags: &[&str]| LoadBalancer {
            id: "id".into(),
            name: "n".into(),
            description: description.into(),
            provisioning_status: "ACTIVE".into(),
            vip_address: String::new(),
            vip_port_id: String::new(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            created_at: None,
            ..lb_fixture()
        };
        let ours = load_balancer_description("c", &key());
        let legacy = |description: &str, name: &str| LoadBalancer {
            name: name.into(),
            description: description.into(),
            ..lb_fixture()
        };
        let in_tree = legacy_load_balancer_description("c", "au1");
        for (lb, want) in [
            (legacy(&in_tree, "au1"), true),
            (legacy(&in_tree, "au2"), false),
            (
                legacy(&legacy_load_balancer_description("other", "au1"), "au1"),
                false,
            ),
        ] {
            assert_eq!(
                ownership(&lb, "c", None, &key()) == Ownership::Ours,
                want,
                "{lb:?}"
            );
        }
        let cases = [
            (lb(&ours, &[]), true),
            (lb(&ours, &["kube_lb_uid_u-1"]), true),
            (lb(&ours, &["kube_lb_uid_other"]), false),
            (lb("made by hand", &[]), false),
            (
                lb(&load_balancer_description("other-cluster", &key()), &[]),
                false,
            ),
        ];
        for (lb, want) in cases {
            assert_eq!(
                ownership(&lb, "c", None, &key()) == Ownership::Ours,
                want,
                "{lb:?}"
            );
        }
    }

    #[test]
    fn another_clusters_tag_without_ours_marks_another_cluster() {
        let tags = |t: &[&str]| t.iter().map(|t| t.to_string()).collect::<Vec<_>>();
        let ours = Some("kube_lb_cluster_k1");
        // (case, tags, this cluster's tag, want)
        let cases = [
            ("ours", tags(&["x", "kube_lb_cluster_k1"]), ours, false),
            ("another's", tags(&["x", "kube_lb_cluster_k2"]), ours, true),
            (
                "both",
                tags(&["kube_lb_cluster_k2", "kube_lb_cluster_k1"]),
                ours,
                false,
            ),
            ("untagged", tags(&["x"]), ours, false),
            ("ours unknown", tags(&["kube_lb_cluster_k2"]), None, false),
        ];
        for (case, tags, ours, want) in cases {
            assert_eq!(another_clusters(&tags, ours), want, "{case}");
        }
    }

    #[test]
    fn a_leftover_needs_this_clusters_tag_our_description_and_another_uid() {
        let ours = load_balancer_description("c", &key());
        let lb = |description: &str, tags: &[&str]| LoadBalancer {
            description: description.into(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..lb_fixture()
        };
        let this = cluster_tag("k1");
        let previous = ServiceKey {
            uid: "u-0".into(),
            ..key()
        };
        let unnamed = ServiceKey {
            uid: String::new(),
            ..key()
        };
        // (case, load balancer, known identity, Service, want)
        let cases = [
            (
                "this cluster's, an earlier Service's UID",
                lb(&ours, &["kube_lb_uid_u-0", &this]),
                Some(this.as_str()),
                key(),
                Some(Ownership::Leftover(previous)),
            ),
            (
                "this Service's own",
                lb(&ours, &["kube_lb_uid_u-1", &this]),
                Some(this.as_str()),
                key(),
                Some(Ownership::Ours),
            ),
            (
                "another cluster with the same name",
                lb(&ours, &["kube_lb_uid_u-0", "kube_lb_cluster_k2"]),
                Some(this.as_str()),
                key(),
                None,
            ),
            (
                "no cluster tag (made before kube-lb tagged clusters)",
                lb(&ours, &["kube_lb_uid_u-0"]),
                Some(this.as_str()),
                key(),
                None,
            ),
            (
                "this cluster's identity unknown",
                lb(&ours, &["kube_lb_uid_u-0", &this]),
                None,
                key(),
                None,
            ),
            (
                "another description",
                lb("made by hand", &["kube_lb_uid_u-0", &this]),
                Some(this.as_str()),
                key(),
                None,
            ),
            (
                "a Service without a UID cannot judge",
                lb(&ours, &["kube_lb_uid_u-0", &this]),
                Some(this.as_str()),
                unnamed,
                None,
            ),
        ];
        for (case, lb, tag, service, want) in cases {
            let got = ownership(&lb, "c", tag, &service);
            match want {
                Some(want) => assert_eq!(got, want, "{case}"),
                None => assert!(matches!(got, Ownership::Foreign(_)), "{case}: {got:?}"),
            }
        }
        let Ownership::Foreign(unknown) =
            ownership(&lb(&ours, &["kube_lb_uid_u-0"]), "c", None, &key())
        else {
            panic!("foreign");
        };
        assert!(unknown.contains("--cluster-id"), "{unknown}");
    }

    fn parsed(
        annotations: serde_json::Value,
        ports: serde_json::Value,
        local: bool,
    ) -> LoadBalancerSpec {
        let mut spec = json!({"type": "LoadBalancer", "ports": ports,
            "externalTrafficPolicy": if local { "Local" } else { "Cluster" }});
        if local {
            spec["healthCheckNodePort"] = json!(32000);
        }
        let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "prod", "uid": "u-1", "annotations": annotations},
            "spec": spec}))
        .expect("service");
        kube_lb_annotations::parse(kube_lb_annotations::Cloud::Openstack, &service)
            .expect("annotations")
            .spec
    }

    fn tcp(port: u16, node_port: u16) -> Value {
        json!({"name": format!("p{port}"), "port": port, "protocol": "TCP", "targetPort": port, "nodePort": node_port})
    }

    fn config() -> LoadBalancerConfig {
        LoadBalancerConfig {
            network: LoadBalancerClass {
                subnet_id: Some("vip-subnet".into()),
                ..LoadBalancerClass::default()
            },
            ..LoadBalancerConfig::default()
        }
    }

    fn backends() -> Vec<BackendNode> {
        use kube_lb_provider_core::types::NodeAddressKind;
        ["10.0.0.2", "10.0.0.1"]
            .iter()
            .enumerate()
            .map(|(i, ip)| BackendNode {
                name: format!("n{i}"),
                provider_id: None,
                addresses: vec![kube_lb_provider_core::NodeAddress {
                    kind: NodeAddressKind::InternalIp,
                    ip: ip.parse().expect("ip"),
                }],
                labels: BTreeMap::new(),
            })
            .collect()
    }

    #[test]
    fn desired_graph_follows_annotations_and_config() {
        let proxy = desired(
            &parsed(
                json!({"loadbalancer.openstack.org/proxy-protocol": "v2",
            "loadbalancer.openstack.org/lb-method": "LEAST_CONNECTIONS"}),
                json!([tcp(80, 30080)]),
                false,
            ),
            &backends(),
            "c",
            &config(),
        )
        .expect("desired");
        assert_eq!(proxy.listeners[0].pool_protocol, "PROXYV2");
        assert_eq!(
            proxy.status("203.0.113.5").ingress,
            vec![LoadBalancerIngress {
                ip: Some("203.0.113.5".parse().expect("ip")),
                ip_mode: Some(IpMode::Proxy),
                ..LoadBalancerIngress::default()
            }],
            "PROXY protocol: in-cluster clients must go through the load balancer"
        );
        assert_eq!(proxy.listeners[0].lb_algorithm, "LEAST_CONNECTIONS");
        assert!(proxy.listeners[0].monitor.is_none());
        assert!(!proxy.internal && proxy.vip.address.is_none());
        assert_eq!(
            proxy.listeners[0]
                .members
                .iter()
                .map(|m| m.address.as_str())
                .collect::<Vec<_>>(),
            vec!["10.0.0.2", "10.0.0.1"],
            "sorted by node name (n0, n1)"
        );

        let local = desired(
            &parsed(json!({}), json!([tcp(80, 30080)]), true),
            &backends(),
            "c",
            &config(),
        )
        .expect("desired");
        assert_eq!(
            local.status("203.0.113.5").ingress[0].ip_mode,
            None,
            "without PROXY protocol ipMode stays unset (VIP)"
        );
        let monitor = local.listeners[0]
            .monitor
            .as_ref()
            .expect("Local always gets a monitor");
        assert_eq!(monitor.kind, "HTTP");
        assert!(
            local.listeners[0]
                .members
                .iter()
                .all(|m| m.monitor_port == Some(32000))
        );

        let internal_by_config = LoadBalancerConfig {
            internal_lb: true,
            ..config()
        };
        assert!(
            desired(
                &parsed(json!({}), json!([tcp(80, 30080)]), false),
                &backends(),
                "c",
                &internal_by_config
            )
            .expect("desired")
            .internal
        );

        // What only the provider can judge: the class against cloud.conf, a monitor timeout
        // against the configured delay. (SCTP and PROXY on UDP are refused by the parser.)
        let refused = [
            (
                json!({"loadbalancer.openstack.org/class": "gold"}),
                json!([tcp(80, 30080)]),
                config(),
                "[LoadBalancerClass \"gold\"] (known classes: none)",
            ),
            (
                json!({"loadbalancer.openstack.org/enable-health-monitor": "true",
                       "loadbalancer.openstack.org/health-monitor-timeout": "9"}),
                json!([tcp(80, 30080)]),
                config(),
                "health-monitor-timeout = \"9\"",
            ),
            (
                json!({}),
                json!([tcp(80, 30080)]),
                LoadBalancerConfig::default(),
                "subnet-id",
            ),
        ];
        for (annotations, ports, config, words) in refused {
            let error = desired(
                &parsed(annotations, ports, false),
                &backends(),
                "c",
                &config,
            )
            .expect_err(words);
            assert!(error.to_string().contains(words), "{error}");
        }
    }

    fn observed_for(desired: &Desired) -> (LoadBalancer, Observed) {
        let lb = LoadBalancer {
            id: "lb".into(),
            name: desired.name.clone(),
            description: desired.description.clone(),
            provisioning_status: "ACTIVE".into(),
            vip_address: "10.0.0.9".into(),
            vip_port_id: "port".into(),
            tags: desired.tags.clone(),
            created_at: None,
            ..lb_fixture()
        };
        let mut observed = Observed::default();
        for (i, want) in desired.listeners.iter().enumerate() {
            let (listener, pool) = (format!("l{i}"), format!("p{i}"));
            observed.listeners.push(Listener {
                id: listener.clone(),
                name: want.name.clone(),
                protocol: want.protocol.into(),
                protocol_port: want.port,
                connection_limit: want.connection_limit,
                allowed_cidrs: want.allowed_cidrs.clone(),
                default_pool_id: Some(pool.clone()),
                insert_headers: want
                    .insert_headers
                    .iter()
                    .map(|(k, v)| (k.clone(), json!(v)))
                    .collect(),
                default_tls_container_ref: want.tls_container_ref.clone(),
                timeout_client_data: want.timeouts.map(|t| u64::from(t[0].1)),
                timeout_member_connect: want.timeouts.map(|t| u64::from(t[1].1)),
                timeout_member_data: want.timeouts.map(|t| u64::from(t[2].1)),
                timeout_tcp_inspect: want.timeouts.map(|t| u64::from(t[3].1)),
                tags: want.tags.clone(),
                loadbalancers: vec![crate::model::IdRef { id: "lb".into() }],
            });
            let monitor = want.monitor.as_ref().map(|m| HealthMonitor {
                id: format!("m{i}"),
                name: m.name.clone(),
                kind: m.kind.into(),
                delay: m.delay,
                timeout: m.timeout,
                max_retries: m.max_retries,
                max_retries_down: Some(m.max_retries_down),
                url_path: None,
            });
            observed.pools.push(Pool {
                id: pool.clone(),
                name: want.pool_name.clone(),
                protocol: want.pool_protocol.into(),
                lb_algorithm: want.lb_algorithm.into(),
                listeners: vec![crate::model::IdRef { id: listener }],
                healthmonitor_id: monitor.as_ref().map(|m| m.id.clone()),
                members: Vec::new(),
                loadbalancers: vec![crate::model::IdRef { id: "lb".into() }],
            });
            if let Some(monitor) = monitor {
                observed.monitors.insert(monitor.id.clone(), monitor);
            }
            observed.members.insert(
                pool,
                want.members
                    .iter()
                    .enumerate()
                    .map(|(j, m)| Member {
                        id: format!("mem{i}{j}"),
                        name: m.name.clone(),
                        address: m.address.clone(),
                        protocol_port: m.protocol_port,
                        monitor_port: m.monitor_port,
                        subnet_id: m.subnet_id.clone(),
                    })
                    .collect(),
            );
        }
        (lb, observed)
    }

    /// The kinds of the planned steps, for compact expectations.
    fn kinds(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| {
                format!("{:?}", s)
                    .split([' ', '(', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn plan_changes_only_what_differs() {
        let two_ports = || json!([tcp(80, 30080), tcp(443, 30443)]);
        let base = || parsed(json!({}), two_ports(), false);
        // The Service with `annotations` and `ports`, under the default config.
        let annotated = |annotations: Value, ports: Value| {
            desired(
                &parsed(annotations, ports, false),
                &backends(),
                "c",
                &config(),
            )
            .expect("d")
        };
        let built = desired(&base(), &backends(), "c", &config()).expect("desired");
        let (lb, observed) = observed_for(&built);
        assert!(
            plan(&lb, &observed, &built).is_empty(),
            "in sync: nothing to do"
        );

        let cases: Vec<(&str, Desired, Vec<&str>)> = vec![
            (
                "node removed",
                desired(&base(), &backends()[..1], "c", &config()).expect("d"),
                vec!["ReplaceMembers", "ReplaceMembers"],
            ),
            (
                "port moved",
                annotated(json!({}), json!([tcp(80, 30080), tcp(8443, 30443)])),
                vec![
                    "DeletePool",
                    "DeleteListener",
                    "CreateListener",
                    "CreatePool",
                    "ReplaceMembers",
                ],
            ),
            (
                "algorithm",
                annotated(
                    json!({"loadbalancer.openstack.org/lb-method": "SOURCE_IP"}),
                    two_ports(),
                ),
                vec!["UpdatePool", "UpdatePool"],
            ),
            (
                "connection limit",
                annotated(
                    json!({"loadbalancer.openstack.org/connection-limit": "100"}),
                    two_ports(),
                ),
                vec!["UpdateListener", "UpdateListener"],
            ),
            (
                "proxy protocol",
                annotated(
                    json!({"loadbalancer.openstack.org/proxy-protocol": "v1"}),
                    two_ports(),
                ),
                vec![
                    "DeletePool",
                    "CreatePool",
                    "ReplaceMembers",
                    "DeletePool",
                    "CreatePool",
                    "ReplaceMembers",
                ],
            ),
            (
                "monitor enabled",
                desired(
                    &base(),
                    &backends(),
                    "c",
                    &LoadBalancerConfig {
                        create_monitor: true,
                        ..config()
                    },
                )
                .expect("d"),
                vec!["CreateMonitor", "CreateMonitor"],
            ),
        ];
        for (case, want, steps) in cases {
            assert_eq!(kinds(&plan(&lb, &observed, &want)), steps, "{case}");
        }

        // Monitor settings changed in place; monitor type changed (Cluster → Local) replaced.
        let monitored = LoadBalancerConfig {
            create_monitor: true,
            ..config()
        };
        let with_monitor = desired(&base(), &backends(), "c", &monitored).expect("d");
        let (lb, observed) = observed_for(&with_monitor);
        let slower = desired(
            &base(),
            &backends(),
            "c",
            &LoadBalancerConfig {
                monitor_delay: std::time::Duration::from_secs(10),
                ..monitored.clone()
            },
        )
        .expect("d");
        assert_eq!(
            kinds(&plan(&lb, &observed, &slower)),
            vec!["UpdateMonitor", "UpdateMonitor"]
        );
        let local = desired(
            &parsed(json!({}), json!([tcp(80, 30080), tcp(443, 30443)]), true),
            &backends(),
            "c",
            &monitored,
        )
        .expect("d");
        assert_eq!(
            kinds(&plan(&lb, &observed, &local)),
            vec![
                "ReplaceMembers",
                "DeleteMonitor",
                "CreateMonitor",
                "ReplaceMembers",
                "DeleteMonitor",
                "CreateMonitor"
            ],
            "members gain monitor_port, the TCP monitor becomes HTTP"
        );

        // An upstream-made load balancer (no UID tag) is adopted by adding our tag.
        let mut adopted = lb.clone();
        adopted.tags = vec![with_monitor.name.clone()];
        assert_eq!(
            plan(&adopted, &observed, &with_monitor),
            vec![Step::TagLoadBalancer {
                tags: with_monitor.tags.clone()
            }]
        );
    }
}
