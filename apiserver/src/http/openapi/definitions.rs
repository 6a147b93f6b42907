//! The OpenAPI v2 definitions of the built-in kinds, generated from a compact table.
//!
//! Names, required fields and patch extensions follow kube-apiserver's published
//! `swagger.json` (Kubernetes 1.33, plus `ServiceSpec.topologyKeys` of 1.17–1.21). Clients use
//! these definitions two ways, and both shape the table:
//! - kubectl before 1.27 validates manifests against them client side: an unknown field is an
//!   error, so every field a user may write is listed, and a structure this server does not
//!   model field by field (a Pod's spec, a node's image list) is left untyped ([`Ty::Free`]),
//!   which accepts anything;
//! - `kubectl apply` computes strategic merge patches from `x-kubernetes-patch-strategy` and
//!   `x-kubernetes-patch-merge-key` ([`Ty::Merge`], [`Ty::MergeSet`]), so a Service port
//!   removed from a manifest is removed on the server.
//!
//! Every array has an item schema and every reference names a definition here: kubectl refuses
//! the whole document otherwise.

use serde_json::{Map, Value, json};

/// The type of one field.
#[derive(Debug, Clone, Copy)]
pub(super) enum Ty {
    Str,
    Int32,
    Int64,
    Bool,
    /// `metav1.Time`.
    Time,
    /// `metav1.MicroTime`.
    MicroTime,
    /// `resource.Quantity`.
    Quantity,
    /// `intstr.IntOrString`.
    IntOrStr,
    /// `[]byte`: base64 text in JSON.
    Bytes,
    /// No type: any value passes client-side validation.
    Free,
    /// Another definition, by its short name in this table.
    Ref(&'static str),
    /// `[]T`, replaced as a whole by a strategic merge patch.
    List(&'static Ty),
    /// `map[string]T`.
    Map(&'static Ty),
    /// `[]T` merged by a key (`patchStrategy:"merge" patchMergeKey:"<key>"`).
    Merge(&'static str, &'static Ty),
    /// `[]string` merged as a set (`patchStrategy:"merge"`, e.g. finalizers).
    MergeSet(&'static Ty),
}

use Ty::{
    Bool, Bytes, Free, Int32, Int64, IntOrStr, List, Map as MapOf, Merge, MergeSet, MicroTime,
    Quantity, Ref, Str, Time,
};

/// One definition: a struct of named fields, maybe a top-level kind.
#[derive(Debug)]
pub(super) struct Def {
    /// Short name (`core.v1.Service`); the published name is [`full_name`] of it.
    pub name: &'static str,
    /// `(group, version, kind)` for top-level kinds: what `x-kubernetes-group-version-kind`
    /// says, and how kubectl finds the schema of a manifest.
    pub gvk: Option<(&'static str, &'static str, &'static str)>,
    pub required: &'static [&'static str],
    pub fields: &'static [(&'static str, Ty)],
}

const fn def(name: &'static str, fields: &'static [(&'static str, Ty)]) -> Def {
    Def {
        name,
        gvk: None,
        required: &[],
        fields,
    }
}

impl Def {
    const fn kind(
        mut self,
        group: &'static str,
        version: &'static str,
        kind: &'static str,
    ) -> Self {
        self.gvk = Some((group, version, kind));
        self
    }

    const fn required(mut self, fields: &'static [&'static str]) -> Self {
        self.required = fields;
        self
    }
}

/// The published name of a short name: the Go package path kube-openapi derives names from.
pub(super) fn full_name(short: &str) -> String {
    let (prefix, rest) = short.split_once('.').unwrap_or(("", short));
    let package = match prefix {
        "meta" => "io.k8s.apimachinery.pkg.apis.meta",
        "core" => "io.k8s.api.core",
        "discovery" => "io.k8s.api.discovery",
        "coordination" => "io.k8s.api.coordination",
        "events" => "io.k8s.api.events",
        "apiextensions" => "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        "admissionregistration" => "io.k8s.api.admissionregistration",
        "resource" => "io.k8s.apimachinery.pkg.api.resource",
        "intstr" => "io.k8s.apimachinery.pkg.util.intstr",
        _ => return short.to_string(),
    };
    format!("{package}.{rest}")
}

/// Fields every top-level kind starts with.
macro_rules! kind_fields {
    ($($field:expr),* $(,)?) => {
        &[("apiVersion", Str), ("kind", Str), ("metadata", Ref("meta.v1.ObjectMeta")), $($field),*]
    };
}

const STRINGS: Ty = List(&Str);
const STRING_MAP: Ty = MapOf(&Str);

/// The table. Order is the published order (kube-apiserver sorts by name; kubectl does not
/// care).
pub(super) const DEFS: &[Def] = &[
    // --- meta/v1 -------------------------------------------------------------------------
    def(
        "meta.v1.ObjectMeta",
        &[
            ("annotations", STRING_MAP),
            ("creationTimestamp", Time),
            ("deletionGracePeriodSeconds", Int64),
            ("deletionTimestamp", Time),
            ("finalizers", MergeSet(&Str)),
            ("generateName", Str),
            ("generation", Int64),
            ("labels", STRING_MAP),
            ("managedFields", List(&Ref("meta.v1.ManagedFieldsEntry"))),
            ("name", Str),
            ("namespace", Str),
            (
                "ownerReferences",
                Merge("uid", &Ref("meta.v1.OwnerReference")),
            ),
            ("resourceVersion", Str),
            ("selfLink", Str),
            ("uid", Str),
        ],
    ),
    def(
        "meta.v1.ManagedFieldsEntry",
        &[
            ("apiVersion", Str),
            ("fieldsType", Str),
            ("fieldsV1", Free),
            ("manager", Str),
            ("operation", Str),
            ("subresource", Str),
            ("time", Time),
        ],
    ),
    def(
        "meta.v1.OwnerReference",
        &[
            ("apiVersion", Str),
            ("blockOwnerDeletion", Bool),
            ("controller", Bool),
            ("kind", Str),
            ("name", Str),
            ("uid", Str),
        ],
    )
    .required(&["apiVersion", "kind", "name", "uid"]),
    def(
        "meta.v1.ListMeta",
        &[
            ("continue", Str),
            ("remainingItemCount", Int64),
            ("resourceVersion", Str),
            ("selfLink", Str),
        ],
    ),
    def(
        "meta.v1.Condition",
        &[
            ("lastTransitionTime", Time),
            ("message", Str),
            ("observedGeneration", Int64),
            ("reason", Str),
            ("status", Str),
            ("type", Str),
        ],
    )
    .required(&["type", "status", "lastTransitionTime", "reason", "message"]),
    def(
        "meta.v1.LabelSelector",
        &[
            (
                "matchExpressions",
                List(&Ref("meta.v1.LabelSelectorRequirement")),
            ),
            ("matchLabels", STRING_MAP),
        ],
    ),
    def(
        "meta.v1.LabelSelectorRequirement",
        &[("key", Str), ("operator", Str), ("values", STRINGS)],
    )
    .required(&["key", "operator"]),
    // --- core/v1 -------------------------------------------------------------------------
    def(
        "core.v1.Service",
        kind_fields![
            ("spec", Ref("core.v1.ServiceSpec")),
            ("status", Ref("core.v1.ServiceStatus")),
        ],
    )
    .kind("", "v1", "Service"),
    def(
        "core.v1.ServiceSpec",
        &[
            ("allocateLoadBalancerNodePorts", Bool),
            ("clusterIP", Str),
            ("clusterIPs", STRINGS),
            ("externalIPs", STRINGS),
            ("externalName", Str),
            ("externalTrafficPolicy", Str),
            ("healthCheckNodePort", Int32),
            ("internalTrafficPolicy", Str),
            ("ipFamilies", STRINGS),
            ("ipFamilyPolicy", Str),
            ("loadBalancerClass", Str),
            ("loadBalancerIP", Str),
            ("loadBalancerSourceRanges", STRINGS),
            ("ports", Merge("port", &Ref("core.v1.ServicePort"))),
            ("publishNotReadyAddresses", Bool),
            ("selector", STRING_MAP),
            ("sessionAffinity", Str),
            (
                "sessionAffinityConfig",
                Ref("core.v1.SessionAffinityConfig"),
            ),
            // Served by Kubernetes 1.17–1.21 and by this server (seed 002's manifests).
            ("topologyKeys", STRINGS),
            ("trafficDistribution", Str),
            ("type", Str),
        ],
    ),
    def(
        "core.v1.ServicePort",
        &[
            ("appProtocol", Str),
            ("name", Str),
            ("nodePort", Int32),
            ("port", Int32),
            ("protocol", Str),
            ("targetPort", IntOrStr),
        ],
    )
    .required(&["port"]),
    def(
        "core.v1.SessionAffinityConfig",
        &[("clientIP", Ref("core.v1.ClientIPConfig"))],
    ),
    def("core.v1.ClientIPConfig", &[("timeoutSeconds", Int32)]),
    def(
        "core.v1.ServiceStatus",
        &[
            ("conditions", Merge("type", &Ref("meta.v1.Condition"))),
            ("loadBalancer", Ref("core.v1.LoadBalancerStatus")),
        ],
    ),
    def(
        "core.v1.LoadBalancerStatus",
        &[("ingress", List(&Ref("core.v1.LoadBalancerIngress")))],
    ),
    def(
        "core.v1.LoadBalancerIngress",
        &[
            ("hostname", Str),
            ("ip", Str),
            ("ipMode", Str),
            ("ports", List(&Ref("core.v1.PortStatus"))),
        ],
    ),
    def(
        "core.v1.PortStatus",
        &[("error", Str), ("port", Int32), ("protocol", Str)],
    )
    .required(&["port", "protocol"]),
    def(
        "core.v1.Endpoints",
        kind_fields![("subsets", List(&Ref("core.v1.EndpointSubset")))],
    )
    .kind("", "v1", "Endpoints"),
    def(
        "core.v1.EndpointSubset",
        &[
            ("addresses", List(&Ref("core.v1.EndpointAddress"))),
            ("notReadyAddresses", List(&Ref("core.v1.EndpointAddress"))),
            ("ports", List(&Ref("core.v1.EndpointPort"))),
        ],
    ),
    def(
        "core.v1.EndpointAddress",
        &[
            ("hostname", Str),
            ("ip", Str),
            ("nodeName", Str),
            ("targetRef", Ref("core.v1.ObjectReference")),
        ],
    )
    .required(&["ip"]),
    def(
        "core.v1.EndpointPort",
        &[
            ("appProtocol", Str),
            ("name", Str),
            ("port", Int32),
            ("protocol", Str),
        ],
    )
    .required(&["port"]),
    def(
        "core.v1.ObjectReference",
        &[
            ("apiVersion", Str),
            ("fieldPath", Str),
            ("kind", Str),
            ("name", Str),
            ("namespace", Str),
            ("resourceVersion", Str),
            ("uid", Str),
        ],
    ),
    def(
        "core.v1.Namespace",
        kind_fields![
            ("spec", Ref("core.v1.NamespaceSpec")),
            ("status", Ref("core.v1.NamespaceStatus")),
        ],
    )
    .kind("", "v1", "Namespace"),
    def("core.v1.NamespaceSpec", &[("finalizers", STRINGS)]),
    def(
        "core.v1.NamespaceStatus",
        &[("conditions", Merge("type", &Free)), ("phase", Str)],
    ),
    def(
        "core.v1.Node",
        kind_fields![
            ("spec", Ref("core.v1.NodeSpec")),
            ("status", Ref("core.v1.NodeStatus")),
        ],
    )
    .kind("", "v1", "Node"),
    def(
        "core.v1.NodeSpec",
        &[
            ("configSource", Free),
            ("externalID", Str),
            ("podCIDR", Str),
            ("podCIDRs", MergeSet(&Str)),
            ("providerID", Str),
            ("taints", List(&Ref("core.v1.Taint"))),
            ("unschedulable", Bool),
        ],
    ),
    def(
        "core.v1.Taint",
        &[
            ("effect", Str),
            ("key", Str),
            ("timeAdded", Time),
            ("value", Str),
        ],
    )
    .required(&["key", "effect"]),
    def(
        "core.v1.NodeStatus",
        &[
            ("addresses", Merge("type", &Ref("core.v1.NodeAddress"))),
            ("allocatable", MapOf(&Quantity)),
            ("capacity", MapOf(&Quantity)),
            ("conditions", Merge("type", &Ref("core.v1.NodeCondition"))),
            ("config", Free),
            ("daemonEndpoints", Free),
            ("features", Free),
            ("images", List(&Free)),
            ("nodeInfo", Free),
            ("phase", Str),
            ("runtimeHandlers", List(&Free)),
            ("volumesAttached", List(&Free)),
            ("volumesInUse", STRINGS),
        ],
    ),
    def("core.v1.NodeAddress", &[("address", Str), ("type", Str)]).required(&["type", "address"]),
    def(
        "core.v1.NodeCondition",
        &[
            ("lastHeartbeatTime", Time),
            ("lastTransitionTime", Time),
            ("message", Str),
            ("reason", Str),
            ("status", Str),
            ("type", Str),
        ],
    )
    .required(&["type", "status"]),
    // A Pod's spec and status are opaque to this server (no kubelet, no scheduler).
    def(
        "core.v1.Pod",
        kind_fields![("spec", Free), ("status", Free)],
    )
    .kind("", "v1", "Pod"),
    def(
        "core.v1.ConfigMap",
        kind_fields![
            ("binaryData", MapOf(&Str)),
            ("data", STRING_MAP),
            ("immutable", Bool),
        ],
    )
    .kind("", "v1", "ConfigMap"),
    def(
        "core.v1.Event",
        kind_fields![
            ("action", Str),
            ("count", Int32),
            ("eventTime", MicroTime),
            ("firstTimestamp", Time),
            ("involvedObject", Ref("core.v1.ObjectReference")),
            ("lastTimestamp", Time),
            ("message", Str),
            ("reason", Str),
            ("related", Ref("core.v1.ObjectReference")),
            ("reportingComponent", Str),
            ("reportingInstance", Str),
            ("series", Ref("core.v1.EventSeries")),
            ("source", Ref("core.v1.EventSource")),
            ("type", Str),
        ],
    )
    .kind("", "v1", "Event")
    .required(&["metadata", "involvedObject"]),
    def(
        "core.v1.EventSeries",
        &[("count", Int32), ("lastObservedTime", MicroTime)],
    ),
    def("core.v1.EventSource", &[("component", Str), ("host", Str)]),
    // --- discovery.k8s.io/v1 -------------------------------------------------------------
    def(
        "discovery.v1.EndpointSlice",
        kind_fields![
            ("addressType", Str),
            ("endpoints", List(&Ref("discovery.v1.Endpoint"))),
            ("ports", List(&Ref("discovery.v1.EndpointPort"))),
        ],
    )
    .kind("discovery.k8s.io", "v1", "EndpointSlice")
    .required(&["addressType", "endpoints"]),
    def(
        "discovery.v1.Endpoint",
        &[
            ("addresses", MergeSet(&Str)),
            ("conditions", Ref("discovery.v1.EndpointConditions")),
            ("deprecatedTopology", STRING_MAP),
            ("hints", Free),
            ("hostname", Str),
            ("nodeName", Str),
            ("targetRef", Ref("core.v1.ObjectReference")),
            ("zone", Str),
        ],
    )
    .required(&["addresses"]),
    def(
        "discovery.v1.EndpointConditions",
        &[("ready", Bool), ("serving", Bool), ("terminating", Bool)],
    ),
    def(
        "discovery.v1.EndpointPort",
        &[
            ("appProtocol", Str),
            ("name", Str),
            ("port", Int32),
            ("protocol", Str),
        ],
    ),
    // --- coordination.k8s.io/v1 ----------------------------------------------------------
    def(
        "coordination.v1.Lease",
        kind_fields![("spec", Ref("coordination.v1.LeaseSpec"))],
    )
    .kind("coordination.k8s.io", "v1", "Lease"),
    def(
        "coordination.v1.LeaseSpec",
        &[
            ("acquireTime", MicroTime),
            ("holderIdentity", Str),
            ("leaseDurationSeconds", Int32),
            ("leaseTransitions", Int32),
            ("preferredHolder", Str),
            ("renewTime", MicroTime),
            ("strategy", Str),
        ],
    ),
    // --- events.k8s.io/v1 ----------------------------------------------------------------
    def(
        "events.v1.Event",
        kind_fields![
            ("action", Str),
            ("deprecatedCount", Int32),
            ("deprecatedFirstTimestamp", Time),
            ("deprecatedLastTimestamp", Time),
            ("deprecatedSource", Ref("core.v1.EventSource")),
            ("eventTime", MicroTime),
            ("note", Str),
            ("reason", Str),
            ("regarding", Ref("core.v1.ObjectReference")),
            ("related", Ref("core.v1.ObjectReference")),
            ("reportingController", Str),
            ("reportingInstance", Str),
            ("series", Ref("events.v1.EventSeries")),
            ("type", Str),
        ],
    )
    .kind("events.k8s.io", "v1", "Event")
    .required(&["eventTime"]),
    def(
        "events.v1.EventSeries",
        &[("count", Int32), ("lastObservedTime", MicroTime)],
    )
    .required(&["count", "lastObservedTime"]),
    // --- apiextensions.k8s.io/v1 ---------------------------------------------------------
    // The schema inside a CRD is free-form JSON Schema; only the outer structure is typed.
    def(
        "apiextensions.v1.CustomResourceDefinition",
        kind_fields![("spec", Free), ("status", Free)],
    )
    .kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
    .required(&["spec"]),
    // --- admissionregistration.k8s.io/v1 ------------------------------------------------
    def(
        "admissionregistration.v1.ValidatingWebhookConfiguration",
        kind_fields![(
            "webhooks",
            Merge("name", &Ref("admissionregistration.v1.ValidatingWebhook"))
        )],
    )
    .kind(
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
    ),
    def(
        "admissionregistration.v1.ValidatingWebhook",
        &[
            ("admissionReviewVersions", STRINGS),
            (
                "clientConfig",
                Ref("admissionregistration.v1.WebhookClientConfig"),
            ),
            ("failurePolicy", Str),
            (
                "matchConditions",
                Merge("name", &Ref("admissionregistration.v1.MatchCondition")),
            ),
            ("matchPolicy", Str),
            ("name", Str),
            ("namespaceSelector", Ref("meta.v1.LabelSelector")),
            ("objectSelector", Ref("meta.v1.LabelSelector")),
            (
                "rules",
                List(&Ref("admissionregistration.v1.RuleWithOperations")),
            ),
            ("sideEffects", Str),
            ("timeoutSeconds", Int32),
        ],
    )
    .required(&[
        "name",
        "clientConfig",
        "sideEffects",
        "admissionReviewVersions",
    ]),
    def(
        "admissionregistration.v1.WebhookClientConfig",
        &[
            ("caBundle", Bytes),
            ("service", Ref("admissionregistration.v1.ServiceReference")),
            ("url", Str),
        ],
    ),
    def(
        "admissionregistration.v1.ServiceReference",
        &[
            ("name", Str),
            ("namespace", Str),
            ("path", Str),
            ("port", Int32),
        ],
    )
    .required(&["namespace", "name"]),
    def(
        "admissionregistration.v1.RuleWithOperations",
        &[
            ("apiGroups", STRINGS),
            ("apiVersions", STRINGS),
            ("operations", STRINGS),
            ("resources", STRINGS),
            ("scope", Str),
        ],
    ),
    def(
        "admissionregistration.v1.MatchCondition",
        &[("expression", Str), ("name", Str)],
    )
    .required(&["name", "expression"]),
];

/// The JSON schema of a field type.
fn schema(ty: &Ty) -> Value {
    let reference = |short: &str| json!({"$ref": format!("#/definitions/{}", full_name(short))});
    match ty {
        Str => json!({"type": "string"}),
        Int32 => json!({"type": "integer", "format": "int32"}),
        Int64 => json!({"type": "integer", "format": "int64"}),
        Bool => json!({"type": "boolean"}),
        Time => reference("meta.v1.Time"),
        MicroTime => reference("meta.v1.MicroTime"),
        Quantity => reference("resource.Quantity"),
        IntOrStr => reference("intstr.IntOrString"),
        Bytes => json!({"type": "string", "format": "byte"}),
        Free => json!({"description": "Not described by this server: any value is accepted."}),
        Ref(short) => reference(short),
        List(item) => json!({"type": "array", "items": schema(item)}),
        MapOf(value) => json!({"type": "object", "additionalProperties": schema(value)}),
        Merge(key, item) => json!({
            "type": "array",
            "items": schema(item),
            "x-kubernetes-patch-merge-key": key,
            "x-kubernetes-patch-strategy": "merge",
        }),
        MergeSet(item) => json!({
            "type": "array",
            "items": schema(item),
            "x-kubernetes-patch-strategy": "merge",
        }),
    }
}

/// `x-kubernetes-group-version-kind` as published: a list of one.
pub(super) fn gvk_extension(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "version": version, "kind": kind}])
}

/// Every built-in definition by published name, the scalar ones (`Time`, `IntOrString`, …)
/// and a `…List` for each kind included.
pub(super) fn all() -> Map<String, Value> {
    let mut out = Map::new();
    for (name, schema) in [
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.Time",
            json!({"type": "string", "format": "date-time"}),
        ),
        (
            "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime",
            json!({"type": "string", "format": "date-time"}),
        ),
        (
            "io.k8s.apimachinery.pkg.api.resource.Quantity",
            json!({"type": "string"}),
        ),
        (
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
            json!({"type": "string", "format": "int-or-string"}),
        ),
    ] {
        out.insert(name.to_string(), schema);
    }
    for d in DEFS {
        let properties: Map<String, Value> = d
            .fields
            .iter()
            .map(|(field, ty)| ((*field).to_string(), schema(ty)))
            .collect();
        let mut definition = json!({"type": "object", "properties": properties});
        if !d.required.is_empty() {
            definition["required"] = json!(d.required);
        }
        if let Some((group, version, kind)) = d.gvk {
            definition["x-kubernetes-group-version-kind"] = gvk_extension(group, version, kind);
            out.insert(
                format!("{}List", full_name(d.name)),
                list_definition(&full_name(d.name), group, version, kind),
            );
        }
        out.insert(full_name(d.name), definition);
    }
    out
}

/// The `<Kind>List` definition for items of `item_definition`.
pub(super) fn list_definition(
    item_definition: &str,
    group: &str,
    version: &str,
    kind: &str,
) -> Value {
    json!({
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta"},
            "items": {"type": "array", "items": {"$ref": format!("#/definitions/{item_definition}")}},
        },
        "x-kubernetes-group-version-kind": gvk_extension(group, version, &format!("{kind}List")),
    })
}

/// The published definition name of a built-in kind, if the table has it.
pub(super) fn kind_definition(group: &str, version: &str, kind: &str) -> Option<String> {
    DEFS.iter()
        .find(|d| d.gvk == Some((group, version, kind)))
        .map(|d| full_name(d.name))
}
