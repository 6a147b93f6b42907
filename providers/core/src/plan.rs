//! What `kube-lb plan` and `kube-lb audit` read from a provider: the calls an `ensure` or a
//! `delete` would make (computed from observed state without changing anything), and the cloud
//! resources a provider considers its own.
//!
//! Providers already split observe → plan → apply; these types are the provider-neutral
//! description of the middle step, so one CLI can print (and script against) the plan of every
//! cloud.

use std::fmt;

use serde::Serialize;

use crate::ServiceKey;

/// What a planned call does to its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    /// The resource does not exist and would be created.
    Create,
    /// The resource exists and would be changed in place (or a sub-part of it added/removed).
    Modify,
    /// The resource exists and would be removed.
    Delete,
}

impl fmt::Display for ChangeAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChangeAction::Create => "create",
            ChangeAction::Modify => "modify",
            ChangeAction::Delete => "delete",
        })
    }
}

/// One field a planned call changes, `old → new` (`None` where the field is absent on that side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldChange {
    /// The field, in the cloud's vocabulary (`HealthCheck.Interval`, `sourceRanges`, …).
    pub field: String,
    /// Its observed value, rendered for people.
    pub old: Option<String>,
    /// The value the call would set.
    pub new: Option<String>,
}

impl FieldChange {
    /// A field going from `old` to `new`.
    pub fn new(field: impl Into<String>, old: Option<String>, new: Option<String>) -> Self {
        FieldChange {
            field: field.into(),
            old,
            new,
        }
    }
}

/// One mutating call a provider would make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedChange {
    /// Create, modify or delete.
    pub action: ChangeAction,
    /// The kind of cloud resource, in the cloud's vocabulary (`LoadBalancer`, `TargetGroup`,
    /// `SecurityGroupRule`, `ForwardingRule`, `PublicIPAddress`, …).
    pub kind: String,
    /// The resource's name (or id where it has no name).
    pub name: String,
    /// The API operation that would be called (`CreateLoadBalancer`, `forwardingRules.insert`).
    pub call: String,
    /// The fields that change; empty for a plain create or delete.
    pub fields: Vec<FieldChange>,
    /// The phase the call belongs to: 1 is exactly what the next `ensure`/`delete` runs first;
    /// a later phase is planned from the expected result of the ones before it and planned
    /// again once they have run (see [`crate::converge`]). Omitted from JSON when 1.
    #[serde(skip_serializing_if = "is_first_phase")]
    pub phase: u32,
    /// For a call of a later phase, what it waits for (`the BLB's id and status available`).
    #[serde(rename = "dependsOn", skip_serializing_if = "Option::is_none")]
    pub depends_on: Option<String>,
}

fn is_first_phase(phase: &u32) -> bool {
    *phase <= 1
}

impl PlannedChange {
    /// A change without field details.
    pub fn new(
        action: ChangeAction,
        kind: impl Into<String>,
        name: impl Into<String>,
        call: impl Into<String>,
    ) -> Self {
        PlannedChange {
            action,
            kind: kind.into(),
            name: name.into(),
            call: call.into(),
            fields: Vec::new(),
            phase: 1,
            depends_on: None,
        }
    }

    /// Marks the change as belonging to a later `phase` that waits for `waits_for`.
    pub fn in_phase(mut self, phase: u32, waits_for: &str) -> Self {
        self.phase = phase;
        self.depends_on = Some(waits_for.to_string());
        self
    }

    /// Adds a field change.
    pub fn field(
        mut self,
        field: impl Into<String>,
        old: Option<String>,
        new: Option<String>,
    ) -> Self {
        self.fields.push(FieldChange::new(field, old, new));
        self
    }
}

/// A cloud resource that carries this cluster's ownership (tags, labels or name) and the
/// Service it was made for, as recorded on the resource itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OwnedResource {
    /// The kind of cloud resource, as in [`PlannedChange::kind`].
    pub kind: String,
    /// Its name (or id where it has no name).
    pub name: String,
    /// The Service it belongs to, as far as the resource records it. Contract: the same
    /// provider's `delete(&service)` removes this resource (so `kube-lb audit --delete` can
    /// use the provider's resumable delete); where a name carries only part of the UID (AWS's
    /// 32-character names), `uid` is whatever the provider's naming maps back to that name.
    /// `namespace`/`name` are empty when the cloud records only the UID.
    pub service: ServiceKey,
    /// Creation time as the cloud reports it (RFC 3339), when it does.
    pub created: Option<String>,
    /// True when the resource is shared by several Services of the cluster (a node security
    /// group rule, a shared health check): it is leaked only when no live Service uses it.
    pub shared: bool,
}
