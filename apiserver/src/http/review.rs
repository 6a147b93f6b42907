//! `authorization.k8s.io/v1` self reviews: what `kubectl auth can-i` asks.
//!
//! This server authorises every request (it has no authentication or authorisation), so it
//! answers as kube-apiserver with `--authorization-mode=AlwaysAllow` does: every access review is
//! allowed, and the rules review lists everything. The reviews are created, answered and never
//! stored. Before, `kubectl auth can-i` got 404 and said "the server could not find the
//! requested resource", which scripts that check their permissions first take for a "no".

use serde_json::{Value, json};

use crate::resources::ResourceDef;
use crate::status::{ApiError, Cause};

/// The API group and version of the reviews.
pub const GROUP: &str = "authorization.k8s.io";
/// Its only version served.
pub const VERSION: &str = "v1";

/// Which review a request creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Review {
    /// `SelfSubjectAccessReview`: may I do this one thing?
    Access,
    /// `SelfSubjectRulesReview`: what may I do in this namespace?
    Rules,
}

impl Review {
    const ALL: [Review; 2] = [Review::Access, Review::Rules];

    fn plural(self) -> &'static str {
        match self {
            Review::Access => "selfsubjectaccessreviews",
            Review::Rules => "selfsubjectrulesreviews",
        }
    }

    fn kind(self) -> &'static str {
        match self {
            Review::Access => "SelfSubjectAccessReview",
            Review::Rules => "SelfSubjectRulesReview",
        }
    }

    fn singular(self) -> &'static str {
        match self {
            Review::Access => "selfsubjectaccessreview",
            Review::Rules => "selfsubjectrulesreview",
        }
    }

    /// The review as a resource (never stored, so never in the registry): what the shared type
    /// check and validation errors name.
    fn def(self) -> ResourceDef {
        ResourceDef {
            group: GROUP,
            version: VERSION,
            plural: self.plural(),
            singular: self.singular(),
            kind: self.kind(),
            namespaced: false,
            has_status: false,
            sets_generation: false,
            short_names: &[],
            categories: &[],
        }
    }

    /// The review a path under `/apis/authorization.k8s.io/v1/` names.
    pub fn from_path(rest: &[&str]) -> Option<Review> {
        match rest {
            [plural] => Review::ALL.into_iter().find(|r| r.plural() == *plural),
            _ => None,
        }
    }
}

/// `/apis/authorization.k8s.io`'s group document, `kind` and `apiVersion` aside.
pub fn group_doc() -> Value {
    let version = json!({"groupVersion": format!("{GROUP}/{VERSION}"), "version": VERSION});
    json!({"name": GROUP, "versions": [version.clone()], "preferredVersion": version})
}

/// The resources of `authorization.k8s.io/v1`: create only, cluster-scoped.
pub fn resources() -> Vec<Value> {
    Review::ALL
        .into_iter()
        .map(|review| {
            let def = review.def();
            json!({
                "name": def.plural,
                "singularName": def.singular,
                "namespaced": def.namespaced,
                "kind": def.kind,
                "verbs": ["create"],
            })
        })
        .collect()
}

/// The answer to a posted review (201 with the review and its status), or why it is refused.
pub fn answer(review: Review, mut object: Value) -> Result<Value, ApiError> {
    let def = review.def();
    super::check_type(&def, &object)?;
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    let status = match review {
        Review::Access => {
            let has = |field: &str| spec.get(field).is_some_and(|v| !v.is_null());
            let causes = match (has("resourceAttributes"), has("nonResourceAttributes")) {
                (true, true) => vec![Cause::invalid_literal(
                    "spec.nonResourceAttributes",
                    &spec["nonResourceAttributes"].to_string(),
                    "cannot be specified in combination with resourceAttributes",
                )],
                (false, false) => vec![Cause::invalid_literal(
                    "spec.resourceAttributes",
                    "null",
                    "exactly one of nonResourceAttributes or resourceAttributes must be specified",
                )],
                _ => Vec::new(),
            };
            if !causes.is_empty() {
                return Err(ApiError::invalid(&def, "", causes));
            }
            json!({
                "allowed": true,
                "reason": "the embedded API server authorises every request",
            })
        }
        Review::Rules => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
    };
    object["apiVersion"] = json!(def.api_version());
    object["kind"] = json!(def.kind);
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]["creationTimestamp"] = Value::Null;
    object["status"] = status;
    Ok(object)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_reviews_are_allowed_once_well_formed() {
        let asked = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"verb": "create", "resource": "services"}},
        });
        let answered = answer(Review::Access, asked.clone()).unwrap();
        assert_eq!(answered["status"]["allowed"], true);
        assert_eq!(answered["spec"], asked["spec"]);

        let neither = answer(Review::Access, json!({"spec": {}})).unwrap_err();
        assert_eq!(neither.code, 422);
        assert!(
            neither
                .message
                .contains("spec.resourceAttributes: Invalid value: null: exactly one of"),
            "{}",
            neither.message
        );
        let both = json!({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        let both = answer(Review::Access, both).unwrap_err();
        assert!(
            both.message.contains("cannot be specified in combination"),
            "{}",
            both.message
        );

        let wrong =
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview"});
        assert_eq!(answer(Review::Access, wrong).unwrap_err().code, 400);
    }

    #[test]
    fn rules_reviews_list_everything_and_are_complete() {
        let answered = answer(Review::Rules, json!({"spec": {"namespace": "default"}})).unwrap();
        assert_eq!(answered["status"]["incomplete"], false);
        assert_eq!(
            answered["status"]["resourceRules"][0]["verbs"],
            json!(["*"])
        );
        assert_eq!(answered["kind"], "SelfSubjectRulesReview");
    }

    #[test]
    fn paths_name_the_two_reviews_only() {
        assert_eq!(
            Review::from_path(&["selfsubjectaccessreviews"]),
            Some(Review::Access)
        );
        assert_eq!(
            Review::from_path(&["selfsubjectrulesreviews"]),
            Some(Review::Rules)
        );
        assert_eq!(Review::from_path(&["subjectaccessreviews"]), None);
        assert_eq!(Review::from_path(&["selfsubjectaccessreviews", "x"]), None);
    }
}
