//! AWS Classic ELB and NLB provider.
//!
//! Every `ensure` observes with scoped describes, plans a pure diff between observed and desired
//! state (`clb::plan`, `nlb::plan`, `nodes`), and applies only the difference through one
//! rate-limited, counted, retrying call path (`calls`). Names, tags and rule descriptions match
//! the upstream provider (`naming`), so load balancers it created are adopted. A resync whose
//! spec and node security groups are unchanged since the last full reconcile only reads what
//! node changes affect (the CLB description, or the NLB target health) until
//! `FullResyncSeconds` passes; then everything is re-read to heal drift. The first pass after a
//! start (and each such full-resync wave) reads load balancers, target groups, tags and the
//! cluster's security groups from shared listings (`inventory`) instead of one set of
//! describes per Service.
//!
//! Each flow is written once, as steps for the core driver (`kube_lb_provider_core::converge`):
//! `flow` (ensure) and `delete` observe and plan; `steps` turns the planners' actions into one
//! step per mutating call. `ensure` and `delete` execute those steps, `kube-lb plan`
//! (`plan_ensure`, `plan_delete`) renders the same steps from its own reads (never the shared
//! listings or the verified cache), so the plan lists exactly the calls the next pass makes.
//! `kube-lb audit` (`owned_resources`) classifies shared listings of everything tagged for the
//! cluster (`audit`).
//!
//! Where upstream is known to be wrong (reference aws.md §8.5) kube-lb converges instead:
//! TCP→TLS modifies the listener in place (no DuplicateListener), the NLB health-check timeout is
//! sent, thresholds are compared one by one, tags are reconciled (user tags removed from the
//! annotation are removed), a scheme or EIP change recreates the load balancer and NLB subnets
//! are updated with SetSubnets.
//!
//! Under faults: a create whose response was lost is recognised on the retry (found by its
//! deterministic name, adopted when its tags say it is this Service's, `owner`); a resource
//! with the name but another owner is a user error naming it (`ProviderError::OwnedElsewhere`). A
//! change of kind (Classic ELB ↔ NLB) is break-before-make: unless this Service's load balancer
//! of the wanted kind is found (which proves the other is gone), an ensure removes the other
//! kind first (`delete`), so a kill at any step leaves at most one load balancer. NLB
//! listeners are only ever modified in place (never deleted to be re-created).

mod audit;
pub mod calls;
pub mod clb;
pub mod clients;
pub mod config;
mod delete;
pub mod desired;
pub mod discovery;
pub mod error;
mod flow;
mod inventory;
pub mod naming;
pub mod nlb;
pub mod nodes;
pub mod owner;
mod provider;
pub mod sg;
mod steps;
pub mod tags;

pub use calls::{IAM_ACTIONS, OPERATIONS, Op, RateLimit, RateLimits, RetryPolicy};
pub use config::CloudConfig;
pub use error::AwsError;
pub use provider::AwsProvider;
