//! Label and field selectors: parsing and matching, kept free of I/O.

use std::collections::BTreeSet;

use serde_json::Value;

/// A selector that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// A requirement has no key.
    #[error("empty key in selector requirement {0:?}")]
    EmptyKey(String),
    /// A set-based requirement lacks its parenthesised value list.
    #[error("expected a parenthesised value list in {0:?}")]
    MissingValues(String),
    /// Parentheses do not balance.
    #[error("unbalanced parentheses in selector {0:?}")]
    Unbalanced(String),
    /// A label key is not a qualified name, or a value not a label value (`labels.Parse`
    /// validates both); the message is kube-apiserver's field error.
    #[error("{0}")]
    InvalidLabel(String),
    /// A field selector requirement is not `field=value` / `field!=value`.
    #[error("invalid field selector requirement {0:?}")]
    InvalidField(String),
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LabelRequirement {
    /// `key=value` / `key==value`.
    Equals(String, String),
    /// `key!=value` (also true when the label is absent).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, BTreeSet<String>),
    /// `key notin (a,b)` (also true when the label is absent).
    NotIn(String, BTreeSet<String>),
    /// `key`.
    Exists(String),
    /// `!key`.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

/// Splits on commas that are not inside parentheses.
fn split_top_level(input: &str) -> Result<Vec<&str>, SelectorError> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth < 0 {
                    return Err(SelectorError::Unbalanced(input.to_string()));
                }
            }
            ',' if depth == 0 => {
                parts.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err(SelectorError::Unbalanced(input.to_string()));
    }
    parts.push(&input[start..]);
    Ok(parts
        .into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect())
}

fn parse_value_set(rest: &str, whole: &str) -> Result<BTreeSet<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::MissingValues(whole.to_string()))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

fn non_empty_key(key: &str, whole: &str) -> Result<String, SelectorError> {
    let key = key.trim();
    if key.is_empty() {
        Err(SelectorError::EmptyKey(whole.to_string()))
    } else {
        Ok(key.to_string())
    }
}

fn parse_requirement(req: &str) -> Result<LabelRequirement, SelectorError> {
    if let Some(key) = req.strip_prefix('!') {
        return Ok(LabelRequirement::DoesNotExist(non_empty_key(key, req)?));
    }
    if let Some((key, value)) = req.split_once("!=") {
        return Ok(LabelRequirement::NotEquals(
            non_empty_key(key, req)?,
            value.trim().to_string(),
        ));
    }
    if let Some((key, value)) = req.split_once("==").or_else(|| req.split_once('=')) {
        return Ok(LabelRequirement::Equals(
            non_empty_key(key, req)?,
            value.trim().to_string(),
        ));
    }
    // Set-based forms: `key in (...)`, `key notin (...)`.
    let mut words = req.splitn(2, char::is_whitespace);
    let key = words.next().unwrap_or_default();
    let rest = words.next().unwrap_or_default().trim_start();
    if let Some(values) = rest.strip_prefix("notin") {
        return Ok(LabelRequirement::NotIn(
            non_empty_key(key, req)?,
            parse_value_set(values, req)?,
        ));
    }
    if let Some(values) = rest.strip_prefix("in") {
        return Ok(LabelRequirement::In(
            non_empty_key(key, req)?,
            parse_value_set(values, req)?,
        ));
    }
    if rest.is_empty() && !key.contains('(') {
        return Ok(LabelRequirement::Exists(non_empty_key(key, req)?));
    }
    Err(SelectorError::MissingValues(req.to_string()))
}

/// Checks a requirement's key and values as labels.Parse does
/// (k8s.io/apimachinery/pkg/labels/selector.go `validateLabelKey`, `validateLabelValue`).
fn validate_requirement(req: &LabelRequirement) -> Result<(), SelectorError> {
    let (key, values): (&String, Vec<&String>) = match req {
        LabelRequirement::Equals(k, v) | LabelRequirement::NotEquals(k, v) => (k, vec![v]),
        LabelRequirement::In(k, vs) | LabelRequirement::NotIn(k, vs) => (k, vs.iter().collect()),
        LabelRequirement::Exists(k) | LabelRequirement::DoesNotExist(k) => (k, Vec::new()),
    };
    if !crate::meta::is_qualified_name(key) {
        return Err(SelectorError::InvalidLabel(format!(
            "key: Invalid value: {key:?}: {}",
            crate::meta::QUALIFIED_NAME_DETAIL
        )));
    }
    for (i, value) in values.iter().enumerate() {
        if !crate::meta::is_label_value(value) {
            return Err(SelectorError::InvalidLabel(format!(
                "values[{i}][{key}]: Invalid value: {value:?}: {}",
                crate::meta::LABEL_VALUE_DETAIL
            )));
        }
    }
    Ok(())
}

impl LabelSelector {
    /// Parses the `labelSelector` query parameter syntax; keys and values must be valid
    /// label keys and values.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let requirements: Vec<LabelRequirement> = split_top_level(input)?
            .into_iter()
            .map(parse_requirement)
            .collect::<Result<_, _>>()?;
        for req in &requirements {
            validate_requirement(req)?;
        }
        Ok(Self { requirements })
    }

    /// Whether the selector has no requirements (matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        let labels = object.pointer("/metadata/labels");
        let label = |key: &str| labels.and_then(|l| l.get(key)).and_then(Value::as_str);
        self.requirements.iter().all(|req| match req {
            LabelRequirement::Equals(k, v) => label(k) == Some(v.as_str()),
            LabelRequirement::NotEquals(k, v) => label(k) != Some(v.as_str()),
            LabelRequirement::In(k, vs) => label(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::NotIn(k, vs) => !label(k).is_some_and(|l| vs.contains(l)),
            LabelRequirement::Exists(k) => label(k).is_some(),
            LabelRequirement::DoesNotExist(k) => label(k).is_none(),
        })
    }
}

/// One requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    /// The label as the client wrote it.
    label: String,
    /// The object paths the label reads: the first holding a non-empty value gives it.
    paths: Vec<Vec<String>>,
    value: String,
    negated: bool,
    /// What the field reads as when the object leaves it out (kube-apiserver's selectable
    /// fields are computed from the typed object, where a missing bool is `false`).
    missing: &'static str,
}

/// One field label kube-apiserver accepts: its name, the paths of the stored object it reads
/// (the first non-empty one wins, as for an Event's `source`), and the value of a missing
/// field.
type Label = (&'static str, &'static [&'static str], &'static str);

/// The field labels kube-apiserver accepts for a kind, as registered with
/// `AddFieldLabelConversionFunc` (pkg/apis/core/v1/conversion.go,
/// pkg/apis/events/v1/conversion.go); kinds without a function get
/// `runtime.DefaultMetaV1FieldSelectorConversion` (name and namespace only). `None`: a
/// kind whose table this server does not know, whose selectors stay unchecked.
enum FieldLabels {
    /// A conversion function's list.
    Listed(&'static [Label]),
    /// `metadata.name` and `metadata.namespace` only.
    MetaOnly,
}

const META: [Label; 2] = [
    ("metadata.name", &["metadata.name"], ""),
    ("metadata.namespace", &["metadata.namespace"], ""),
];

fn field_labels(group: &str, kind: &str) -> Option<FieldLabels> {
    const SERVICE: &[Label] = &[
        META[0],
        META[1],
        ("spec.clusterIP", &["spec.clusterIP"], ""),
        ("spec.type", &["spec.type"], ""),
    ];
    const POD: &[Label] = &[
        META[0],
        META[1],
        ("spec.nodeName", &["spec.nodeName"], ""),
        // Old v1 clients' name for spec.nodeName.
        ("spec.host", &["spec.nodeName"], ""),
        ("spec.restartPolicy", &["spec.restartPolicy"], ""),
        ("spec.schedulerName", &["spec.schedulerName"], ""),
        ("spec.serviceAccountName", &["spec.serviceAccountName"], ""),
        ("spec.hostNetwork", &["spec.hostNetwork"], "false"),
        ("status.phase", &["status.phase"], ""),
        ("status.podIP", &["status.podIP"], ""),
        ("status.podIPs", &["status.podIP"], ""),
        (
            "status.nominatedNodeName",
            &["status.nominatedNodeName"],
            "",
        ),
    ];
    const NODE: &[Label] = &[
        META[0],
        ("spec.unschedulable", &["spec.unschedulable"], "false"),
    ];
    const NAMESPACE: &[Label] = &[META[0], ("status.phase", &["status.phase"], "")];
    // `AddFieldLabelConversionsForEvent` (core/v1), read as `EventToSelectableFields`
    // (pkg/registry/core/event/strategy.go) computes them: `source` is the source component,
    // else the reporting controller.
    const EVENT: &[Label] = &[
        META[0],
        META[1],
        ("involvedObject.kind", &["involvedObject.kind"], ""),
        (
            "involvedObject.namespace",
            &["involvedObject.namespace"],
            "",
        ),
        ("involvedObject.name", &["involvedObject.name"], ""),
        ("involvedObject.uid", &["involvedObject.uid"], ""),
        (
            "involvedObject.apiVersion",
            &["involvedObject.apiVersion"],
            "",
        ),
        (
            "involvedObject.resourceVersion",
            &["involvedObject.resourceVersion"],
            "",
        ),
        (
            "involvedObject.fieldPath",
            &["involvedObject.fieldPath"],
            "",
        ),
        ("reason", &["reason"], ""),
        ("reportingComponent", &["reportingComponent"], ""),
        ("source", &["source.component", "reportingComponent"], ""),
        ("type", &["type"], ""),
    ];
    // `AddFieldLabelConversionsForEvent` of events.k8s.io/v1: its own spellings only (never
    // `involvedObject.*` or `reportingComponent`), mapped onto the same selectable fields;
    // read here from the events.k8s.io form this server stores them in.
    const EVENT_V1: &[Label] = &[
        META[0],
        META[1],
        ("regarding.kind", &["regarding.kind"], ""),
        ("regarding.namespace", &["regarding.namespace"], ""),
        ("regarding.name", &["regarding.name"], ""),
        ("regarding.uid", &["regarding.uid"], ""),
        ("regarding.apiVersion", &["regarding.apiVersion"], ""),
        (
            "regarding.resourceVersion",
            &["regarding.resourceVersion"],
            "",
        ),
        ("regarding.fieldPath", &["regarding.fieldPath"], ""),
        ("reason", &["reason"], ""),
        ("reportingController", &["reportingController"], ""),
        (
            "source",
            &["deprecatedSource.component", "reportingController"],
            "",
        ),
        ("type", &["type"], ""),
    ];
    Some(match (group, kind) {
        ("", "Service") => FieldLabels::Listed(SERVICE),
        ("", "Pod") => FieldLabels::Listed(POD),
        ("", "Node") => FieldLabels::Listed(NODE),
        ("", "Namespace") => FieldLabels::Listed(NAMESPACE),
        ("", "Event") => FieldLabels::Listed(EVENT),
        ("events.k8s.io", "Event") => FieldLabels::Listed(EVENT_V1),
        ("", "ConfigMap" | "Endpoints")
        | ("coordination.k8s.io", "Lease")
        | ("discovery.k8s.io", "EndpointSlice")
        | ("apiextensions.k8s.io", "CustomResourceDefinition")
        | ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            FieldLabels::MetaOnly
        }
        _ => return None,
    })
}

fn split_path(path: &str) -> Vec<String> {
    path.split('.').map(str::to_string).collect()
}

/// A parsed field selector (`metadata.name=x,spec.nodeName!=y`).
///
/// Any dotted path to a scalar parses; [`FieldSelector::restrict_to`] (built-in kinds) and
/// [`FieldSelector::restrict_to_custom`] (custom resources) then limit it to the labels
/// kube-apiserver supports for the kind served. A missing field compares as the empty string
/// (`false` for the boolean labels), as in kube-apiserver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses the `fieldSelector` query parameter syntax.
    pub fn parse(input: &str) -> Result<Self, SelectorError> {
        let mut requirements = Vec::new();
        for part in input.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (path, value, negated) = if let Some((p, v)) = part.split_once("!=") {
                (p, v, true)
            } else if let Some((p, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (p, v, false)
            } else {
                return Err(SelectorError::InvalidField(part.to_string()));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(SelectorError::InvalidField(part.to_string()));
            }
            requirements.push(FieldRequirement {
                label: path.to_string(),
                paths: vec![split_path(path)],
                value: value.trim().to_string(),
                negated,
                missing: "",
            });
        }
        Ok(Self { requirements })
    }

    /// Restricts the selector to the field labels kube-apiserver supports for `kind` of
    /// `group`, mapping each to the object fields it reads. An unsupported label is the
    /// message of kube-apiserver's 400 (handlers/get.go turns the conversion error into a
    /// BadRequest). Kinds this server has no table for are left as parsed.
    pub fn restrict_to(&mut self, group: &str, kind: &str) -> Result<(), String> {
        let Some(labels) = field_labels(group, kind) else {
            return Ok(());
        };
        for req in &mut self.requirements {
            let list: &[Label] = match &labels {
                FieldLabels::Listed(list) => list,
                FieldLabels::MetaOnly => &META,
            };
            match list.iter().find(|(l, _, _)| *l == req.label) {
                Some((_, paths, missing)) => {
                    req.paths = paths.iter().map(|p| split_path(p)).collect();
                    req.missing = missing;
                }
                None if matches!(labels, FieldLabels::Listed(_)) => {
                    return Err(format!("field label not supported: {}", req.label));
                }
                None => {
                    return Err(format!(
                        "{:?} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        req.label
                    ));
                }
            }
        }
        Ok(())
    }

    /// Restricts the selector to what a custom resource accepts: `metadata.name`,
    /// `metadata.namespace` when the resource is namespaced, and the `selectable` fields of
    /// the version served (`crConverter.ConvertFieldLabel`, apiextensions-apiserver
    /// pkg/apiserver/conversion/converter.go). Anything else is kube-apiserver's 400 message.
    pub fn restrict_to_custom(
        &mut self,
        namespaced: bool,
        selectable: &[String],
    ) -> Result<(), String> {
        for req in &self.requirements {
            let accepted = req.label == "metadata.name"
                || (namespaced && req.label == "metadata.namespace")
                || selectable.contains(&req.label);
            if !accepted {
                return Err(format!("field label not supported: {}", req.label));
            }
        }
        Ok(())
    }

    /// Whether the object satisfies every requirement.
    pub fn matches(&self, object: &Value) -> bool {
        self.requirements.iter().all(|req| {
            let read = |path: &Vec<String>| {
                let mut current = Some(object);
                for segment in path {
                    current = current.and_then(|v| v.get(segment));
                }
                match current {
                    Some(Value::String(s)) => Some(s.clone()),
                    Some(Value::Null) | None => None,
                    Some(other) => Some(other.to_string()),
                }
            };
            let actual = req
                .paths
                .iter()
                .find_map(|path| read(path).filter(|v| !v.is_empty()))
                .unwrap_or_else(|| req.missing.to_string());
            (actual == req.value) != req.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels}, "spec": {"nodeName": "n1"}})
    }

    #[test]
    fn label_selector_table() {
        let labels = json!({"app": "web", "tier": "front", "env": "prod"});
        let cases: &[(&str, bool)] = &[
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db, cache)", false),
            ("app notin (db)", true),
            ("app notin (web)", false),
            ("missing notin (x)", true),
            ("missing in (x)", false),
            ("tier", true),
            ("missing", false),
            ("!missing", true),
            ("!tier", false),
            ("app=web,tier in (front,back),!missing", true),
            ("app=web,env=dev", false),
            ("  app = web , tier ", true),
        ];
        for (selector, want) in cases {
            let parsed = LabelSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&obj(labels.clone())), *want, "{selector}");
        }
    }

    #[test]
    fn label_selector_without_labels() {
        let no_labels = json!({"metadata": {"name": "a"}});
        assert!(LabelSelector::parse("!app").unwrap().matches(&no_labels));
        assert!(!LabelSelector::parse("app").unwrap().matches(&no_labels));
        assert!(LabelSelector::parse("app!=x").unwrap().matches(&no_labels));
    }

    #[test]
    fn label_selector_errors() {
        for bad in [
            "app in (a",
            "app in a",
            "=x",
            "!",
            "app in",
            "a)",
            // Keys and values are validated like labels (400 in kube-apiserver).
            "-a",
            "a===b",
            "app=-x",
            "app in (ok, not ok)",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad} should fail");
        }
    }

    #[test]
    fn field_labels_are_restricted_per_kind() {
        // (group, kind, selector, accepted)
        let cases = [
            (
                "",
                "Service",
                "spec.type=LoadBalancer,metadata.name=a",
                true,
            ),
            ("", "Service", "spec.clusterIP=None", true),
            ("", "Service", "spec.ports=x", false),
            ("", "Node", "spec.unschedulable=false", true),
            ("", "Node", "metadata.namespace=x", false),
            ("", "Namespace", "status.phase=Active", true),
            ("", "Event", "involvedObject.name=web,source=kubelet", true),
            (
                "",
                "Event",
                "involvedObject.kind=Service,involvedObject.namespace=a,involvedObject.uid=u,\
                 involvedObject.apiVersion=v1,involvedObject.resourceVersion=1,\
                 involvedObject.fieldPath=f,reason=r,reportingComponent=c,type=Normal,\
                 metadata.name=n,metadata.namespace=a",
                true,
            ),
            ("", "Event", "message=x", false),
            ("", "Event", "regarding.name=web", false),
            ("", "Event", "reportingController=c", false),
            (
                "events.k8s.io",
                "Event",
                "regarding.kind=Service,regarding.namespace=a,regarding.name=web,\
                 regarding.uid=u,regarding.apiVersion=v1,regarding.resourceVersion=1,\
                 regarding.fieldPath=f,reason=r,reportingController=c,source=c,type=Normal,\
                 metadata.name=n,metadata.namespace=a",
                true,
            ),
            ("events.k8s.io", "Event", "involvedObject.name=web", false),
            ("events.k8s.io", "Event", "reportingComponent=c", false),
            ("events.k8s.io", "Event", "note=x", false),
            ("", "Pod", "spec.host=n1", true),
            ("", "ConfigMap", "metadata.namespace=x", true),
            ("", "ConfigMap", "data.k=v", false),
            (
                "coordination.k8s.io",
                "Lease",
                "spec.holderIdentity=x",
                false,
            ),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "metadata.name=kube-lb",
                true,
            ),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "webhooks.name=x",
                false,
            ),
            ("example.com", "Widget", "spec.anything=x", true),
        ];
        for (group, kind, selector, accepted) in cases {
            let mut parsed = FieldSelector::parse(selector).unwrap();
            assert_eq!(
                parsed.restrict_to(group, kind).is_ok(),
                accepted,
                "{kind} {selector}"
            );
        }
        let mut unsupported = FieldSelector::parse("data.k=v").unwrap();
        assert_eq!(
            unsupported.restrict_to("", "ConfigMap").unwrap_err(),
            "\"data.k\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        let mut unsupported = FieldSelector::parse("spec.ports=x").unwrap();
        assert_eq!(
            unsupported.restrict_to("", "Service").unwrap_err(),
            "field label not supported: spec.ports"
        );
        // Labels read the fields they name; a missing boolean reads as false.
        let mut schedulable = FieldSelector::parse("spec.unschedulable=false").unwrap();
        schedulable.restrict_to("", "Node").unwrap();
        assert!(schedulable.matches(&json!({"spec": {}})));
        assert!(!schedulable.matches(&json!({"spec": {"unschedulable": true}})));
        let mut source = FieldSelector::parse("source=kubelet").unwrap();
        source.restrict_to("", "Event").unwrap();
        assert!(source.matches(&json!({"source": {"component": "kubelet"}})));
        // An Event without a source component is selected by its reporting controller.
        assert!(source.matches(&json!({"source": {}, "reportingComponent": "kubelet"})));
        assert!(!source.matches(&json!({"source": {"component": "other"},
                                         "reportingComponent": "kubelet"})));
        let mut source_v1 = FieldSelector::parse("source=kube-lb,regarding.name=web").unwrap();
        source_v1.restrict_to("events.k8s.io", "Event").unwrap();
        assert!(source_v1.matches(&json!({"reportingController": "kube-lb",
                                           "regarding": {"name": "web"}})));
        assert!(
            source_v1.matches(&json!({"deprecatedSource": {"component": "kube-lb"},
                                           "reportingController": "x",
                                           "regarding": {"name": "web"}}))
        );
        let mut unsupported = FieldSelector::parse("involvedObject.name=web").unwrap();
        assert_eq!(
            unsupported
                .restrict_to("events.k8s.io", "Event")
                .unwrap_err(),
            "field label not supported: involvedObject.name"
        );
        let mut host = FieldSelector::parse("spec.host=n1").unwrap();
        host.restrict_to("", "Pod").unwrap();
        assert!(host.matches(&json!({"spec": {"nodeName": "n1"}})));
    }

    /// `crConverter.ConvertFieldLabel`: name always, namespace only for namespaced
    /// resources, and the version's selectable fields, which read the field they name.
    #[test]
    fn custom_resource_field_labels() {
        let selectable = vec!["spec.color".to_string(), "spec.size".to_string()];
        // (namespaced, selector, accepted)
        let cases = [
            (true, "metadata.name=a,metadata.namespace=b", true),
            (false, "metadata.name=a", true),
            (false, "metadata.namespace=b", false),
            (true, "spec.color=red,spec.size=3", true),
            (true, "spec.shape=round", false),
            (true, "status.free=1", false),
        ];
        for (namespaced, selector, accepted) in cases {
            let mut parsed = FieldSelector::parse(selector).unwrap();
            assert_eq!(
                parsed.restrict_to_custom(namespaced, &selectable).is_ok(),
                accepted,
                "namespaced={namespaced} {selector}"
            );
        }
        let mut unsupported = FieldSelector::parse("spec.shape=round").unwrap();
        assert_eq!(
            unsupported
                .restrict_to_custom(true, &selectable)
                .unwrap_err(),
            "field label not supported: spec.shape"
        );
        let mut color = FieldSelector::parse("spec.color=red,spec.size!=3").unwrap();
        color.restrict_to_custom(true, &selectable).unwrap();
        assert!(color.matches(&json!({"spec": {"color": "red", "size": 4}})));
        assert!(!color.matches(&json!({"spec": {"color": "red", "size": 3}})));
        assert!(!color.matches(&json!({"spec": {"color": "blue"}})));
    }

    #[test]
    fn field_selector_table() {
        let o = obj(json!({}));
        let cases: &[(&str, bool)] = &[
            ("metadata.name=a", true),
            ("metadata.name==a", true),
            ("metadata.name=b", false),
            ("metadata.name!=b", true),
            ("metadata.namespace=ns,metadata.name=a", true),
            ("spec.nodeName=n1", true),
            ("spec.nodeName=", false),
            ("spec.missing=", true),
            ("spec.missing!=", false),
        ];
        for (selector, want) in cases {
            let parsed = FieldSelector::parse(selector).unwrap();
            assert_eq!(parsed.matches(&o), *want, "{selector}");
        }
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("=a").is_err());
    }
}
