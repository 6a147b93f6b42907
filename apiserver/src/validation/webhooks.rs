//! ValidatingWebhookConfigurations (admissionregistration.k8s.io/v1) as kube-apiserver 1.33
//! defaults and checks them: `SetDefaults_ValidatingWebhook`, `SetDefaults_Rule` and
//! `SetDefaults_ServiceReference` (pkg/apis/admissionregistration/v1/defaults.go), and
//! `ValidateValidatingWebhookConfiguration` with the v1 options (no side effects allowed, a
//! recognised AdmissionReview version required, unique webhook names;
//! pkg/apis/admissionregistration/validation/validation.go), including the webhook URL and
//! Service rules of k8s.io/apiserver/pkg/util/webhook, and on update the relaxations of
//! `ValidateValidatingWebhookConfigurationUpdate`. Match condition expressions are
//! required but not compiled: this server has no CEL environment.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use super::validate_labels;
use crate::meta;
use crate::status::Cause;

/// `SetDefaults_ValidatingWebhook` and friends: failure policy `Fail`, match policy
/// `Equivalent`, empty namespace and object selectors, a 10 second timeout, rule scope `*` and
/// Service port 443. A `null` counts as unset, as a nil pointer does in Go. Other fields are
/// left alone (`sideEffects` and `admissionReviewVersions` have no v1 default).
pub fn default_webhook_configuration(object: &mut Value) {
    let Some(Value::Array(webhooks)) = object.get_mut("webhooks") else {
        return;
    };
    for webhook in webhooks.iter_mut().filter_map(Value::as_object_mut) {
        for (field, default) in [
            ("failurePolicy", json!("Fail")),
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
            ("timeoutSeconds", json!(10)),
        ] {
            if webhook.get(field).is_none_or(Value::is_null) {
                webhook.insert(field.to_string(), default);
            }
        }
        if let Some(Value::Array(rules)) = webhook.get_mut("rules") {
            for rule in rules.iter_mut().filter_map(Value::as_object_mut) {
                if rule.get("scope").is_none_or(Value::is_null) {
                    rule.insert("scope".to_string(), json!("*"));
                }
            }
        }
        if let Some(Value::Object(service)) = webhook
            .get_mut("clientConfig")
            .and_then(|config| config.get_mut("service"))
            && service.get("port").is_none_or(Value::is_null)
        {
            service.insert("port".to_string(), json!(443));
        }
    }
}

/// The AdmissionReview versions this server's kube-apiserver speaks.
const ACCEPTED_REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
/// `noSideEffectClasses`, sorted as Go's `sets.String.List` gives them.
const SIDE_EFFECTS: [&str; 2] = ["None", "NoneOnDryRun"];
/// `supportedSideEffectClasses`: what an update may keep when the stored object has a side
/// effect already (written through v1beta1 in a real cluster).
const ANY_SIDE_EFFECTS: [&str; 4] = ["None", "NoneOnDryRun", "Some", "Unknown"];
const FAILURE_POLICIES: [&str; 2] = ["Fail", "Ignore"];
const MATCH_POLICIES: [&str; 2] = ["Equivalent", "Exact"];
const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
/// `validateMatchConditions`' cap.
const MAX_MATCH_CONDITIONS: usize = 64;
/// The advice kube-apiserver appends to URL errors.
const URL_FORM: &str = "; desired format: https://host[/path]";

/// `field.Required` with a detail (`Required value: <detail>`).
fn required(field: String, detail: &str) -> Cause {
    if detail.is_empty() {
        return Cause::required(field);
    }
    Cause {
        reason: "FieldValueRequired",
        message: format!("Required value: {detail}"),
        field,
    }
}

/// The string at `key`, `""` when absent or not a string (Go's zero value).
fn text<'a>(object: &'a Value, key: &str) -> &'a str {
    object.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The string list at `key`, empty when absent.
fn strings<'a>(object: &'a Value, key: &str) -> Vec<&'a str> {
    object
        .get(key)
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .map(|v| v.as_str().unwrap_or_default())
                .collect()
        })
        .unwrap_or_default()
}

/// The list at `key`, empty when absent.
fn items<'a>(object: &'a Value, key: &str) -> &'a [Value] {
    object
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// A present (non-null) value at `key`.
fn present<'a>(object: &'a Value, key: &str) -> Option<&'a Value> {
    object.get(key).filter(|v| !v.is_null())
}

/// kube-apiserver's `validationOptions`: all strict on create; an update is held only to the
/// rules the stored object already met, so an object admitted under older rules stays
/// editable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Options {
    require_no_side_effects: bool,
    require_accepted_review_version: bool,
    require_unique_names: bool,
    allow_invalid_label_values: bool,
    ignore_match_conditions: bool,
}

impl Options {
    /// `ValidateValidatingWebhookConfiguration` (`old` is `None`) or its `…Update` twin.
    fn new(old: Option<&Value>, object: &Value) -> Self {
        let Some(old) = old else {
            return Self {
                require_no_side_effects: true,
                require_accepted_review_version: true,
                require_unique_names: true,
                allow_invalid_label_values: false,
                ignore_match_conditions: false,
            };
        };
        let old_hooks = items(old, "webhooks");
        let new_hooks = items(object, "webhooks");
        let mut names = BTreeSet::new();
        Self {
            // A webhook stored without one counts as having side effects, as upstream.
            require_no_side_effects: old_hooks.iter().all(|h| {
                present(h, "sideEffects").is_some()
                    && SIDE_EFFECTS.contains(&text(h, "sideEffects"))
            }),
            require_accepted_review_version: old_hooks.iter().all(|h| {
                strings(h, "admissionReviewVersions")
                    .iter()
                    .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(v))
            }),
            require_unique_names: old_hooks
                .iter()
                .all(|h| text(h, "name").is_empty() || names.insert(text(h, "name"))),
            allow_invalid_label_values: old_hooks.iter().any(|h| {
                ["namespaceSelector", "objectSelector"].iter().any(|field| {
                    h.get(field).is_some_and(|selector| {
                        items(selector, "matchExpressions").iter().any(|r| {
                            strings(r, "values")
                                .iter()
                                .any(|v| !meta::label_value_problems(v).is_empty())
                        })
                    })
                })
            }),
            // Unchanged match conditions are not compiled again.
            ignore_match_conditions: old_hooks.len() == new_hooks.len()
                && old_hooks
                    .iter()
                    .zip(new_hooks)
                    .all(|(o, n)| items(o, "matchConditions") == items(n, "matchConditions")),
        }
    }
}

/// `ValidateValidatingWebhookConfiguration` (v1 options) on create, and
/// `ValidateValidatingWebhookConfigurationUpdate` against the stored `old` on update, without
/// the metadata rules, which every kind meets elsewhere: each webhook on its own, then its
/// AdmissionReview versions, then the uniqueness of its name.
pub fn validate_webhook_configuration(old: Option<&Value>, object: &Value) -> Vec<Cause> {
    let options = Options::new(old, object);
    let mut causes = Vec::new();
    let mut names = BTreeSet::new();
    for (i, webhook) in items(object, "webhooks").iter().enumerate() {
        let path = format!("webhooks[{i}]");
        causes.extend(validate_webhook(webhook, &path, options));
        causes.extend(validate_review_versions(
            &strings(webhook, "admissionReviewVersions"),
            &format!("{path}.admissionReviewVersions"),
            options.require_accepted_review_version,
        ));
        let name = text(webhook, "name");
        if options.require_unique_names && !name.is_empty() && !names.insert(name) {
            causes.push(Cause::duplicate(format!("{path}.name"), name));
        }
    }
    causes
}

/// `validateValidatingWebhook`.
fn validate_webhook(webhook: &Value, path: &str, options: Options) -> Vec<Cause> {
    let mut causes = fully_qualified_name(&format!("{path}.name"), text(webhook, "name"));
    for (i, rule) in items(webhook, "rules").iter().enumerate() {
        causes.extend(validate_rule(rule, &format!("{path}.rules[{i}]")));
    }
    for (field, allowed) in [
        ("failurePolicy", &FAILURE_POLICIES),
        ("matchPolicy", &MATCH_POLICIES),
    ] {
        if present(webhook, field).is_some() {
            let value = text(webhook, field);
            if !allowed.contains(&value) {
                causes.push(Cause::not_supported(
                    format!("{path}.{field}"),
                    value,
                    allowed,
                ));
            }
        }
    }
    let side_effects_path = format!("{path}.sideEffects");
    let allowed: &[&str] = if options.require_no_side_effects {
        &SIDE_EFFECTS
    } else {
        &ANY_SIDE_EFFECTS
    };
    match present(webhook, "sideEffects") {
        None => causes.push(required(
            side_effects_path,
            &format!("must specify one of {}", allowed.join(", ")),
        )),
        Some(_) => {
            let value = text(webhook, "sideEffects");
            if !allowed.contains(&value) {
                causes.push(Cause::not_supported(side_effects_path, value, allowed));
            }
        }
    }
    if let Some(timeout) = present(webhook, "timeoutSeconds").and_then(Value::as_i64)
        && !(1..=30).contains(&timeout)
    {
        causes.push(Cause::invalid_literal(
            format!("{path}.timeoutSeconds"),
            &timeout.to_string(),
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for field in ["namespaceSelector", "objectSelector"] {
        if let Some(selector) = present(webhook, field) {
            causes.extend(validate_label_selector(
                selector,
                &format!("{path}.{field}"),
                options.allow_invalid_label_values,
            ));
        }
    }
    let config = webhook.get("clientConfig").unwrap_or(&Value::Null);
    let config_path = format!("{path}.clientConfig");
    match (present(config, "url"), present(config, "service")) {
        (Some(_), None) => causes.extend(validate_url(
            &format!("{config_path}.url"),
            text(config, "url"),
        )),
        (None, Some(service)) => {
            causes.extend(validate_service(&format!("{config_path}.service"), service));
        }
        _ => causes.push(required(
            config_path,
            "exactly one of url or service is required",
        )),
    }
    if !options.ignore_match_conditions {
        causes.extend(validate_match_conditions(
            items(webhook, "matchConditions"),
            &format!("{path}.matchConditions"),
        ));
    }
    causes
}

/// `IsFullyQualifiedName`: a DNS subdomain of at least three labels.
fn fully_qualified_name(path: &str, name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::required(path)];
    }
    let problems = meta::dns1123_subdomain_problems(name);
    if !problems.is_empty() {
        return vec![Cause::invalid(path, name, &problems.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![Cause::invalid(
            path,
            name,
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

/// `validateAdmissionReviewVersions`; `require_accepted` asks for a version kube-apiserver
/// speaks.
fn validate_review_versions(versions: &[&str], path: &str, require_accepted: bool) -> Vec<Cause> {
    if versions.is_empty() {
        return vec![required(
            path.to_string(),
            &format!(
                "must specify one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        )];
    }
    let mut causes = Vec::new();
    let mut seen = BTreeSet::new();
    for (i, version) in versions.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if !seen.insert(*version) {
            causes.push(Cause::invalid(item, version, "duplicate version"));
            continue;
        }
        for problem in meta::dns1035_label_problems(version) {
            causes.push(Cause::invalid(item.clone(), version, &problem));
        }
    }
    if require_accepted
        && !versions
            .iter()
            .any(|v| ACCEPTED_REVIEW_VERSIONS.contains(v))
    {
        causes.push(Cause::invalid_literal(
            path,
            &meta::go_strings(versions),
            &format!(
                "must include at least one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
    causes
}

/// `validateRuleWithOperations` and `validateRule` (subresources allowed); the rule's fields
/// are inlined, so their paths hang off the rule itself.
fn validate_rule(rule: &Value, path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    let operations = strings(rule, "operations");
    let operations_path = format!("{path}.operations");
    if operations.is_empty() {
        causes.push(Cause::required(operations_path.clone()));
    }
    if operations.len() > 1 && operations.contains(&"*") {
        causes.push(Cause::invalid_literal(
            operations_path.clone(),
            &meta::go_strings(&operations),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, operation) in operations.iter().enumerate() {
        if !OPERATIONS.contains(operation) {
            causes.push(Cause::not_supported(
                format!("{operations_path}[{i}]"),
                operation,
                &OPERATIONS,
            ));
        }
    }
    for (field, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let values = strings(rule, field);
        let field_path = format!("{path}.{field}");
        if values.is_empty() {
            causes.push(Cause::required(field_path.clone()));
        }
        if values.len() > 1 && values.contains(&"*") {
            causes.push(Cause::invalid_literal(
                field_path.clone(),
                &meta::go_strings(&values),
                &format!("if '*' is present, must not specify other {what}"),
            ));
        }
        // An empty group is the legacy core group; an empty version means nothing.
        if field == "apiVersions" {
            for (i, _) in values.iter().enumerate().filter(|(_, v)| v.is_empty()) {
                causes.push(Cause::required(format!("{field_path}[{i}]")));
            }
        }
    }
    causes.extend(validate_resources(
        &strings(rule, "resources"),
        &format!("{path}.resources"),
    ));
    if present(rule, "scope").is_some() {
        let scope = text(rule, "scope");
        if !SCOPES.contains(&scope) {
            causes.push(Cause::not_supported(
                format!("{path}.scope"),
                scope,
                &SCOPES,
            ));
        }
    }
    causes
}

/// `validateResources`: no empty entries, and wildcards that do not overlap other entries.
fn validate_resources(resources: &[&str], path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if resources.is_empty() {
        causes.push(Cause::required(path));
    }
    let mut any_sub_of: BTreeSet<&str> = BTreeSet::new();
    let mut sub_of_any: BTreeSet<&str> = BTreeSet::new();
    let mut double_wildcard = false;
    let mut single_wildcard = false;
    let mut plain_resource = false;
    for (i, entry) in resources.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if entry.is_empty() {
            causes.push(Cause::required(item));
            continue;
        }
        double_wildcard |= *entry == "*/*";
        single_wildcard |= *entry == "*";
        let Some((resource, sub)) = entry.split_once('/') else {
            // Upstream keeps only the last plain entry's answer.
            plain_resource = *entry != "*";
            continue;
        };
        if any_sub_of.contains(resource) {
            causes.push(Cause::invalid(
                item.clone(),
                entry,
                &format!("if '{resource}/*' is present, must not specify {entry}"),
            ));
        }
        if sub_of_any.contains(sub) {
            causes.push(Cause::invalid(
                item,
                entry,
                &format!("if '*/{sub}' is present, must not specify {entry}"),
            ));
        }
        if sub == "*" {
            any_sub_of.insert(resource);
        }
        if resource == "*" {
            sub_of_any.insert(sub);
        }
    }
    if resources.len() > 1 && double_wildcard {
        causes.push(Cause::invalid_literal(
            path,
            &meta::go_strings(resources),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single_wildcard && plain_resource {
        causes.push(Cause::invalid_literal(
            path,
            &meta::go_strings(resources),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    causes
}

/// `metav1validation.ValidateLabelSelector`; `allow_invalid_values` skips the label value
/// rule for `matchExpressions` values (`AllowInvalidLabelValueInSelector`).
fn validate_label_selector(selector: &Value, path: &str, allow_invalid_values: bool) -> Vec<Cause> {
    let mut causes = validate_labels(&format!("{path}.matchLabels"), selector.get("matchLabels"));
    for (i, requirement) in items(selector, "matchExpressions").iter().enumerate() {
        let item = format!("{path}.matchExpressions[{i}]");
        let values = strings(requirement, "values");
        let operator = text(requirement, "operator");
        match operator {
            "In" | "NotIn" if values.is_empty() => causes.push(required(
                format!("{item}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => causes.push(Cause::forbidden(
                format!("{item}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => causes.push(Cause::invalid(
                format!("{item}.operator"),
                operator,
                "not a valid selector operator",
            )),
        }
        let key = text(requirement, "key");
        for problem in meta::qualified_name_problems(key) {
            causes.push(Cause::invalid(format!("{item}.key"), key, &problem));
        }
        for (j, value) in values.iter().enumerate().filter(|_| !allow_invalid_values) {
            for problem in meta::label_value_problems(value) {
                causes.push(Cause::invalid(
                    format!("{item}.values[{j}]"),
                    value,
                    &problem,
                ));
            }
        }
    }
    causes
}

/// The parts of a URL the webhook rules look at, split the way Go's `url.Parse` splits them.
#[derive(Debug, Default, PartialEq, Eq)]
struct UrlParts<'a> {
    /// Lowercased, as Go stores it.
    scheme: String,
    userinfo: Option<&'a str>,
    host: &'a str,
    query: &'a str,
    fragment: &'a str,
}

/// Splits `raw` as Go's `url.Parse` does for an absolute URL; the error is Go's text after
/// `parse "<url>": `.
fn split_url(raw: &str) -> Result<UrlParts<'_>, String> {
    let (rest, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    if rest.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    let mut parts = UrlParts {
        fragment,
        ..UrlParts::default()
    };
    let mut rest = rest;
    // getScheme: a letter, then letters, digits, `+`, `-` or `.`, up to the first `:`.
    for (i, c) in rest.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err("missing protocol scheme".to_string()),
            ':' => {
                parts.scheme = rest[..i].to_ascii_lowercase();
                rest = &rest[i + 1..];
                break;
            }
            _ => break,
        }
    }
    let rest = match rest.split_once('?') {
        Some((before, query)) => {
            parts.query = query;
            before
        }
        None => rest,
    };
    if let Some(after) = rest.strip_prefix("//") {
        let authority = after.split('/').next().unwrap_or_default();
        let host = match authority.rsplit_once('@') {
            Some((userinfo, host)) => {
                parts.userinfo = Some(userinfo);
                host
            }
            None => authority,
        };
        if let Some(bad) = host
            .chars()
            .find(|c| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '{' | '}' | '|'))
        {
            return Err(format!(
                "invalid character {:?} in host name",
                bad.to_string()
            ));
        }
        // parseHost: whatever follows the host (or an IPv6 literal's `]`) is `:digits` or
        // nothing.
        let after_host = if host.starts_with('[') {
            let Some(end) = host.rfind(']') else {
                return Err("missing ']' in host".to_string());
            };
            &host[end + 1..]
        } else {
            host.rfind(':').map_or("", |colon| &host[colon..])
        };
        let port_ok = after_host.is_empty()
            || after_host
                .strip_prefix(':')
                .is_some_and(|port| port.bytes().all(|b| b.is_ascii_digit()));
        if !port_ok {
            return Err(format!("invalid port {after_host:?} after host"));
        }
        parts.host = host;
    }
    Ok(parts)
}

/// `webhook.ValidateWebhookURL` with https forced.
fn validate_url(path: &str, url: &str) -> Vec<Cause> {
    let parts = match split_url(url) {
        Ok(parts) => parts,
        Err(error) => {
            return vec![required(
                path.to_string(),
                &format!("url must be a valid URL: parse {url:?}: {error}{URL_FORM}"),
            )];
        }
    };
    let mut causes = Vec::new();
    if parts.scheme != "https" {
        causes.push(Cause::invalid(
            path,
            &parts.scheme,
            &format!("'https' is the only allowed URL scheme{URL_FORM}"),
        ));
    }
    if parts.host.is_empty() {
        causes.push(Cause::invalid(
            path,
            parts.host,
            &format!("host must be specified{URL_FORM}"),
        ));
    }
    if let Some(userinfo) = parts.userinfo {
        causes.push(Cause::invalid(
            path,
            userinfo,
            "user information is not permitted in the URL",
        ));
    }
    if !parts.fragment.is_empty() {
        causes.push(Cause::invalid(
            path,
            parts.fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !parts.query.is_empty() {
        causes.push(Cause::invalid(
            path,
            parts.query,
            "query parameters are not permitted in the URL",
        ));
    }
    causes
}

/// `webhook.ValidateWebhookService`: a name, a namespace, a port (defaulted to 443) and a
/// path of DNS-subdomain segments.
fn validate_service(path: &str, service: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    if text(service, "name").is_empty() {
        causes.push(required(format!("{path}.name"), "service name is required"));
    }
    if text(service, "namespace").is_empty() {
        causes.push(required(
            format!("{path}.namespace"),
            "service namespace is required",
        ));
    }
    let port = service.get("port").and_then(Value::as_i64).unwrap_or(443);
    if !(1..=65535).contains(&port) {
        causes.push(Cause::invalid_literal(
            format!("{path}.port"),
            &port.to_string(),
            "port is not valid: must be between 1 and 65535, inclusive",
        ));
    }
    if present(service, "path").is_none() {
        return causes;
    }
    let url_path = text(service, "path");
    let path_field = format!("{path}.path");
    if url_path.is_empty() || url_path == "/" {
        return causes;
    }
    if url_path == "//" {
        causes.push(Cause::invalid(
            path_field,
            url_path,
            "segment[0] may not be empty",
        ));
        return causes;
    }
    if !url_path.starts_with('/') {
        causes.push(Cause::invalid(
            path_field.clone(),
            url_path,
            "must start with a '/'",
        ));
    }
    // Upstream drops the first byte whatever it is, and one trailing `/`.
    let mut trimmed = url_path.get(1..).unwrap_or_default();
    trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    for (i, segment) in trimmed.split('/').enumerate() {
        if segment.is_empty() {
            causes.push(Cause::invalid(
                path_field.clone(),
                url_path,
                &format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for problem in meta::dns1123_subdomain_problems(segment) {
            causes.push(Cause::invalid(
                path_field.clone(),
                url_path,
                &format!("segment[{i}]: {problem}"),
            ));
        }
    }
    causes
}

/// `validateMatchConditions`: at most 64, each with an expression and a qualified, unique
/// name.
fn validate_match_conditions(conditions: &[Value], path: &str) -> Vec<Cause> {
    let mut causes = Vec::new();
    if conditions.len() > MAX_MATCH_CONDITIONS {
        causes.push(Cause::too_many(
            path,
            conditions.len(),
            MAX_MATCH_CONDITIONS,
        ));
    }
    let mut names = BTreeSet::new();
    for (i, condition) in conditions.iter().enumerate() {
        let item = format!("{path}[{i}]");
        if text(condition, "expression").trim().is_empty() {
            causes.push(Cause::required(format!("{item}.expression")));
        }
        let name = text(condition, "name");
        if name.is_empty() {
            causes.push(Cause::required(format!("{item}.name")));
        } else {
            for problem in meta::qualified_name_problems(name) {
                causes.push(Cause::invalid(format!("{item}.name"), name, &problem));
            }
            if !names.insert(name) {
                causes.push(Cause::duplicate(format!("{item}.name"), name));
            }
        }
    }
    causes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One valid webhook called to a Service, with every optional field left out.
    fn webhook() -> Value {
        json!({
            "name": "services.kube-lb.io",
            "clientConfig": {"service": {"namespace": "kube-lb", "name": "webhook"}},
            "rules": [{
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["services"],
            }],
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        })
    }

    fn configuration(webhooks: Vec<Value>) -> Value {
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "kube-lb"},
            "webhooks": webhooks,
        })
    }

    /// The webhook of [`webhook`] with the JSON pointer `pointer` set to `value` (`null`
    /// removes it).
    fn changed(pointer: &str, value: Value) -> Value {
        let mut hook = webhook();
        let (parent, key) = pointer.rsplit_once('/').unwrap();
        let target = if parent.is_empty() {
            &mut hook
        } else {
            hook.pointer_mut(parent).unwrap()
        };
        let map = target.as_object_mut().unwrap();
        if value.is_null() {
            map.remove(key);
        } else {
            map.insert(key.to_string(), value);
        }
        hook
    }

    #[test]
    fn defaults_fill_what_kube_apiserver_fills() {
        let mut object = configuration(vec![webhook(), json!(null)]);
        default_webhook_configuration(&mut object);
        let hook = &object["webhooks"][0];
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["matchPolicy"], "Equivalent");
        assert_eq!(hook["namespaceSelector"], json!({}));
        assert_eq!(hook["objectSelector"], json!({}));
        assert_eq!(hook["timeoutSeconds"], 10);
        assert_eq!(hook["rules"][0]["scope"], "*");
        assert_eq!(hook["clientConfig"]["service"]["port"], 443);
        assert!(hook.get("sideEffects").is_some_and(|v| v == "None"));
        assert_eq!(object["webhooks"][1], json!(null));

        // Values given are kept; a URL client gets no port.
        let mut object = configuration(vec![json!({
            "name": "a.b.c",
            "clientConfig": {"url": "https://x"},
            "failurePolicy": "Ignore",
            "matchPolicy": "Exact",
            "timeoutSeconds": 3,
            "namespaceSelector": {"matchLabels": {"a": "b"}},
            "rules": [{"scope": "Cluster"}],
        })]);
        let before = object.clone();
        default_webhook_configuration(&mut object);
        let mut expected = before;
        expected["webhooks"][0]["objectSelector"] = json!({});
        assert_eq!(object, expected);
        // Nothing to default.
        let mut bare = json!({"metadata": {"name": "x"}});
        default_webhook_configuration(&mut bare);
        assert_eq!(bare, json!({"metadata": {"name": "x"}}));
    }

    /// A configuration with one changed webhook: the causes as `field: message`.
    fn problems(hook: Value) -> Vec<String> {
        let mut object = configuration(vec![hook]);
        default_webhook_configuration(&mut object);
        validate_webhook_configuration(None, &object)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn valid_webhooks_pass() {
        let valid = [
            webhook(),
            changed("/sideEffects", json!("NoneOnDryRun")),
            changed("/admissionReviewVersions", json!(["v2", "v1beta1"])),
            changed(
                "/clientConfig",
                json!({"url": "https://hooks.example.com:8443/validate"}),
            ),
            changed(
                "/clientConfig",
                json!({"url": "HTTPS://hooks.example.com", "caBundle": "Zm9v"}),
            ),
            changed("/clientConfig/service/path", json!("/validate/services")),
            changed("/clientConfig/service/path", json!("/")),
            changed("/clientConfig/service/port", json!(8443)),
            changed("/timeoutSeconds", json!(30)),
            changed("/timeoutSeconds", json!(1)),
            changed("/failurePolicy", json!("Ignore")),
            changed("/matchPolicy", json!("Exact")),
            changed(
                "/rules",
                json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*/*"], "scope": "Namespaced"}]),
            ),
            changed(
                "/rules",
                json!([{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["DELETE", "CONNECT"], "resources": ["*", "pods/status"]}]),
            ),
            changed("/rules", json!([])),
            changed(
                "/namespaceSelector",
                json!({"matchExpressions": [{"key": "kube-lb.io/skip", "operator": "DoesNotExist"}]}),
            ),
            changed(
                "/objectSelector",
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}),
            ),
            changed(
                "/matchConditions",
                json!([{"name": "not-system", "expression": "true"}]),
            ),
        ];
        for hook in valid {
            assert_eq!(problems(hook.clone()), Vec::<String>::new(), "{hook}");
        }
    }

    #[test]
    fn invalid_webhooks_are_named_by_field() {
        let url = "webhooks[0].clientConfig.url";
        let cases: Vec<(Value, Vec<String>)> = vec![
            (changed("/name", json!(null)), vec!["webhooks[0].name: Required value".into()]),
            (
                changed("/name", json!("kube-lb.io")),
                vec![r#"webhooks[0].name: Invalid value: "kube-lb.io": should be a domain with at least three segments separated by dots"#.into()],
            ),
            (
                changed("/name", json!("Services.kube-lb.io")),
                vec![format!(r#"webhooks[0].name: Invalid value: "Services.kube-lb.io": {}"#, meta::dns1123_subdomain_problems("A")[0])],
            ),
            (
                changed("/sideEffects", json!(null)),
                vec!["webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun".into()],
            ),
            (
                changed("/sideEffects", json!("Some")),
                vec![r#"webhooks[0].sideEffects: Unsupported value: "Some": supported values: "None", "NoneOnDryRun""#.into()],
            ),
            (
                changed("/sideEffects", json!("Unknown")),
                vec![r#"webhooks[0].sideEffects: Unsupported value: "Unknown": supported values: "None", "NoneOnDryRun""#.into()],
            ),
            (
                changed("/admissionReviewVersions", json!(null)),
                vec!["webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1".into()],
            ),
            (
                changed("/admissionReviewVersions", json!(["v2"])),
                vec![r#"webhooks[0].admissionReviewVersions: Invalid value: []string{"v2"}: must include at least one of v1, v1beta1"#.into()],
            ),
            (
                changed("/admissionReviewVersions", json!(["v1", "v1"])),
                vec![r#"webhooks[0].admissionReviewVersions[1]: Invalid value: "v1": duplicate version"#.into()],
            ),
            (
                changed("/clientConfig", json!({})),
                vec!["webhooks[0].clientConfig: Required value: exactly one of url or service is required".into()],
            ),
            (
                changed("/clientConfig", json!({"url": "https://x", "service": {"namespace": "a", "name": "b"}})),
                vec!["webhooks[0].clientConfig: Required value: exactly one of url or service is required".into()],
            ),
            (
                changed("/clientConfig", json!({"url": "http://x/validate"})),
                vec![format!(r#"{url}: Invalid value: "http": 'https' is the only allowed URL scheme{URL_FORM}"#)],
            ),
            (
                changed("/clientConfig", json!({"url": "https:///validate"})),
                vec![format!(r#"{url}: Invalid value: "": host must be specified{URL_FORM}"#)],
            ),
            (
                changed("/clientConfig", json!({"url": "https://admin:secret@x/"})),
                vec![format!(r#"{url}: Invalid value: "admin:secret": user information is not permitted in the URL"#)],
            ),
            (
                changed("/clientConfig", json!({"url": "https://x/v?a=b#top"})),
                vec![
                    format!(r#"{url}: Invalid value: "top": fragments are not permitted in the URL"#),
                    format!(r#"{url}: Invalid value: "a=b": query parameters are not permitted in the URL"#),
                ],
            ),
            (
                changed("/clientConfig", json!({"url": "://x"})),
                vec![format!(r#"{url}: Required value: url must be a valid URL: parse "://x": missing protocol scheme{URL_FORM}"#)],
            ),
            (
                changed("/clientConfig/service", json!({"port": 0})),
                vec![
                    "webhooks[0].clientConfig.service.name: Required value: service name is required".into(),
                    "webhooks[0].clientConfig.service.namespace: Required value: service namespace is required".into(),
                    "webhooks[0].clientConfig.service.port: Invalid value: 0: port is not valid: must be between 1 and 65535, inclusive".into(),
                ],
            ),
            (
                changed("/clientConfig/service/path", json!("validate//x")),
                vec![
                    r#"webhooks[0].clientConfig.service.path: Invalid value: "validate//x": must start with a '/'"#.into(),
                    r#"webhooks[0].clientConfig.service.path: Invalid value: "validate//x": segment[1] may not be empty"#.into(),
                ],
            ),
            (
                changed("/timeoutSeconds", json!(31)),
                vec!["webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds".into()],
            ),
            (
                changed("/timeoutSeconds", json!(0)),
                vec!["webhooks[0].timeoutSeconds: Invalid value: 0: the timeout value must be between 1 and 30 seconds".into()],
            ),
            (
                changed("/failurePolicy", json!("Retry")),
                vec![r#"webhooks[0].failurePolicy: Unsupported value: "Retry": supported values: "Fail", "Ignore""#.into()],
            ),
            (
                changed("/matchPolicy", json!("Loose")),
                vec![r#"webhooks[0].matchPolicy: Unsupported value: "Loose": supported values: "Equivalent", "Exact""#.into()],
            ),
            (
                changed("/rules", json!([{"operations": ["PATCH", "*"], "apiGroups": ["*", "apps"], "apiVersions": [""], "resources": [], "scope": "Global"}])),
                vec![
                    r#"webhooks[0].rules[0].operations: Invalid value: []string{"PATCH", "*"}: if '*' is present, must not specify other operations"#.into(),
                    r#"webhooks[0].rules[0].operations[0]: Unsupported value: "PATCH": supported values: "*", "CONNECT", "CREATE", "DELETE", "UPDATE""#.into(),
                    r#"webhooks[0].rules[0].apiGroups: Invalid value: []string{"*", "apps"}: if '*' is present, must not specify other API groups"#.into(),
                    "webhooks[0].rules[0].apiVersions[0]: Required value".into(),
                    "webhooks[0].rules[0].resources: Required value".into(),
                    r#"webhooks[0].rules[0].scope: Unsupported value: "Global": supported values: "*", "Cluster", "Namespaced""#.into(),
                ],
            ),
            (
                changed("/rules", json!([{}])),
                vec![
                    "webhooks[0].rules[0].operations: Required value".into(),
                    "webhooks[0].rules[0].apiGroups: Required value".into(),
                    "webhooks[0].rules[0].apiVersions: Required value".into(),
                    "webhooks[0].rules[0].resources: Required value".into(),
                ],
            ),
            (
                changed("/rules/0/resources", json!(["pods/*", "pods/log", "*", "services", "*/*"])),
                vec![
                    r#"webhooks[0].rules[0].resources[1]: Invalid value: "pods/log": if 'pods/*' is present, must not specify pods/log"#.into(),
                    r#"webhooks[0].rules[0].resources: Invalid value: []string{"pods/*", "pods/log", "*", "services", "*/*"}: if '*/*' is present, must not specify other resources"#.into(),
                    r#"webhooks[0].rules[0].resources: Invalid value: []string{"pods/*", "pods/log", "*", "services", "*/*"}: if '*' is present, must not specify other resources without subresources"#.into(),
                ],
            ),
            (
                changed("/namespaceSelector", json!({"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Exists", "values": ["x"]}, {"key": "", "operator": "Near"}]})),
                vec![
                    "webhooks[0].namespaceSelector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'".into(),
                    "webhooks[0].namespaceSelector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".into(),
                    r#"webhooks[0].namespaceSelector.matchExpressions[2].operator: Invalid value: "Near": not a valid selector operator"#.into(),
                ]
                .into_iter()
                .chain(meta::qualified_name_problems("").into_iter().map(|p| {
                    format!(r#"webhooks[0].namespaceSelector.matchExpressions[2].key: Invalid value: "": {p}"#)
                }))
                .collect(),
            ),
            (
                changed("/objectSelector", json!({"matchLabels": {"app": "-web"}})),
                vec![format!(r#"webhooks[0].objectSelector.matchLabels: Invalid value: "-web": {}"#, meta::label_value_problems("-web")[0])],
            ),
            (
                changed("/matchConditions", json!([{"name": "a", "expression": " "}, {"name": "a", "expression": "true"}, {"expression": "true"}])),
                vec![
                    "webhooks[0].matchConditions[0].expression: Required value".into(),
                    r#"webhooks[0].matchConditions[1].name: Duplicate value: "a""#.into(),
                    "webhooks[0].matchConditions[2].name: Required value".into(),
                ],
            ),
        ];
        for (hook, want) in cases {
            assert_eq!(problems(hook.clone()), want, "{hook}");
        }
    }

    #[test]
    fn webhook_names_are_unique_and_every_webhook_is_checked() {
        let second = changed("/sideEffects", json!("Some"));
        let object = configuration(vec![webhook(), second, webhook()]);
        let causes: Vec<(String, &str)> = validate_webhook_configuration(None, &object)
            .into_iter()
            .map(|c| (c.field, c.reason))
            .collect();
        assert_eq!(
            causes,
            vec![
                (
                    "webhooks[1].sideEffects".to_string(),
                    "FieldValueNotSupported"
                ),
                ("webhooks[1].name".to_string(), "FieldValueDuplicate"),
                ("webhooks[2].name".to_string(), "FieldValueDuplicate"),
            ]
        );
        assert!(validate_webhook_configuration(None, &configuration(Vec::new())).is_empty());
        assert!(validate_webhook_configuration(None, &json!({"metadata": {}})).is_empty());
    }

    /// An update is held to the strict rules only where the stored object met them.
    #[test]
    fn updates_keep_what_the_stored_object_already_had() {
        // Three webhooks of one name, each breaking one more v1 rule.
        let grandfathered = configuration(vec![
            changed("/sideEffects", json!("Some")),
            changed("/admissionReviewVersions", json!(["v0"])),
            changed(
                "/objectSelector",
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["-x"]}]}),
            ),
        ]);
        // The same object, a timeout changed: accepted on update, refused on create.
        let mut edited = grandfathered.clone();
        edited["webhooks"][0]["timeoutSeconds"] = json!(20);
        let fields =
            |causes: Vec<Cause>| -> Vec<String> { causes.into_iter().map(|c| c.field).collect() };
        assert_eq!(
            fields(validate_webhook_configuration(None, &edited)),
            [
                "webhooks[0].sideEffects",
                "webhooks[1].admissionReviewVersions",
                "webhooks[1].name",
                "webhooks[2].objectSelector.matchExpressions[0].values[0]",
                "webhooks[2].name",
            ]
        );
        assert_eq!(
            fields(validate_webhook_configuration(
                Some(&grandfathered),
                &edited
            )),
            Vec::<String>::new()
        );
        // A stored object that met every rule keeps them all.
        let strict = configuration(vec![webhook()]);
        let mut worse = strict.clone();
        worse["webhooks"][0]["sideEffects"] = json!("Unknown");
        assert_eq!(
            fields(validate_webhook_configuration(Some(&strict), &worse)),
            ["webhooks[0].sideEffects"]
        );
        // Unchanged match conditions are not checked again; changed ones are.
        let bad_condition = json!([{"name": "-", "expression": "true"}]);
        let mut stored = configuration(vec![webhook()]);
        stored["webhooks"][0]["matchConditions"] = bad_condition.clone();
        assert!(validate_webhook_configuration(Some(&stored), &stored).is_empty());
        let mut more = stored.clone();
        more["webhooks"][0]["matchConditions"][0]["expression"] = json!("false");
        assert_eq!(
            fields(validate_webhook_configuration(Some(&stored), &more)),
            ["webhooks[0].matchConditions[0].name"]
        );
    }

    #[test]
    fn too_many_match_conditions() {
        let conditions: Vec<Value> = (0..65)
            .map(|i| json!({"name": format!("c{i}"), "expression": "true"}))
            .collect();
        let found = problems(changed("/matchConditions", json!(conditions)));
        assert_eq!(
            found,
            vec!["webhooks[0].matchConditions: Too many: 65: must have at most 64 items"]
        );
    }

    #[test]
    fn urls_split_like_go() {
        let parts = split_url("HTTPS://u@h.example:443/p?q=1#f").unwrap();
        assert_eq!(
            parts,
            UrlParts {
                scheme: "https".into(),
                userinfo: Some("u"),
                host: "h.example:443",
                query: "q=1",
                fragment: "f",
            }
        );
        assert_eq!(split_url("no-scheme").unwrap().scheme, "");
        assert_eq!(split_url("https:opaque").unwrap().host, "");
        assert!(split_url("https://a\nb").is_err());
        assert!(split_url("https://a b/").is_err());
        assert_eq!(
            split_url("https://[::1]:8443/x").unwrap().host,
            "[::1]:8443"
        );
        assert_eq!(split_url("https://h:/x").unwrap().host, "h:");
        assert_eq!(
            split_url("https://h:https/x").unwrap_err(),
            r#"invalid port ":https" after host"#
        );
        assert_eq!(
            split_url("https://[::1/x").unwrap_err(),
            "missing ']' in host"
        );
        assert_eq!(
            split_url("https://[::1]x/").unwrap_err(),
            r#"invalid port "x" after host"#
        );
    }
}
