//! Deterministic fault injection: chosen requests are delayed or answered with an error before
//! they reach the store.
//!
//! Rules can only be added with the test-only `faults` feature. Without it [`Faults`] is an
//! empty value whose hook in the request path (`Faults::inject`) always lets the request
//! through, so a product build carries no way to make the server misbehave on purpose.

#[cfg(feature = "faults")]
use std::sync::Mutex;
#[cfg(feature = "faults")]
use std::time::Duration;

#[cfg(feature = "faults")]
use rand::rngs::StdRng;
#[cfg(feature = "faults")]
use rand::{Rng, SeedableRng};

use crate::status::ApiError;

/// What happens to a request a rule selects.
#[cfg(feature = "faults")]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultAction {
    /// Wait this long, then serve normally.
    Delay(Duration),
    /// 500 InternalError.
    InternalError,
    /// 409 Conflict (as if the object had changed underneath).
    Conflict,
    /// 429 TooManyRequests with `Retry-After: 1`.
    TooManyRequests,
}

/// A request verb in Kubernetes terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    /// GET of one object.
    Get,
    /// GET of a collection.
    List,
    /// GET with `watch=true`.
    Watch,
    /// POST.
    Create,
    /// PUT.
    Update,
    /// PATCH.
    Patch,
    /// DELETE of one object.
    Delete,
    /// DELETE of a collection.
    DeleteCollection,
}

/// One injection rule: requests matching `verb` and `resource` (when set) are hit with
/// probability `fraction`.
#[cfg(feature = "faults")]
#[derive(Debug, Clone)]
pub struct FaultRule {
    /// Only this verb, if set.
    pub verb: Option<Verb>,
    /// Only this plural resource name (`services`), if set.
    pub resource: Option<String>,
    /// Probability in `[0, 1]` that a matching request is hit.
    pub fraction: f64,
    /// What to do.
    pub action: FaultAction,
}

#[cfg(feature = "faults")]
impl FaultRule {
    /// A rule hitting every request with `action`, narrowed with the builder methods.
    pub fn new(action: FaultAction) -> Self {
        Self {
            verb: None,
            resource: None,
            fraction: 1.0,
            action,
        }
    }

    /// Only requests with this verb.
    pub fn verb(mut self, verb: Verb) -> Self {
        self.verb = Some(verb);
        self
    }

    /// Only requests for this plural resource.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.resource = Some(resource.into());
        self
    }

    /// Only this fraction of matching requests (clamped to `[0, 1]`).
    pub fn fraction(mut self, fraction: f64) -> Self {
        self.fraction = fraction.clamp(0.0, 1.0);
        self
    }

    fn matches(&self, verb: Verb, resource: &str) -> bool {
        self.verb.is_none_or(|v| v == verb)
            && self.resource.as_deref().is_none_or(|r| r == resource)
    }
}

#[cfg(feature = "faults")]
struct Inner {
    rules: Vec<FaultRule>,
    rng: StdRng,
    injected: u64,
}

/// The fault injector of a running server; cheap to share.
#[cfg(feature = "faults")]
pub struct Faults {
    inner: Mutex<Inner>,
}

/// The fault injector of a running server, built without the `faults` feature: no rules can be
/// added, every request is served.
#[cfg(not(feature = "faults"))]
#[derive(Debug, Default)]
pub struct Faults {}

#[cfg(not(feature = "faults"))]
impl Faults {
    /// The seed only matters with the `faults` feature.
    pub fn new(_seed: u64) -> Self {
        Self {}
    }

    /// Never delays nor fails a request.
    pub(crate) async fn inject(&self, _verb: Verb, _resource: &str) -> Option<ApiError> {
        None
    }
}

#[cfg(feature = "faults")]
impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("injected", &self.injected())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "faults")]
impl Faults {
    /// No rules; decisions drawn from a generator seeded with `seed`, so the same sequence of
    /// requests meets the same faults on every run.
    pub fn new(seed: u64) -> Self {
        Self {
            inner: Mutex::new(Inner {
                rules: Vec::new(),
                rng: StdRng::seed_from_u64(seed),
                injected: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a rule; rules are consulted in order and the first hit wins.
    pub fn add(&self, rule: FaultRule) {
        self.lock().rules.push(rule);
    }

    /// Removes every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// Restarts the random sequence.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = StdRng::seed_from_u64(seed);
    }

    /// How many requests were hit so far.
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Decides the fate of one request.
    pub fn decide(&self, verb: Verb, resource: &str) -> Option<FaultAction> {
        let mut inner = self.lock();
        let Inner {
            rules,
            rng,
            injected,
        } = &mut *inner;
        for rule in rules.iter().filter(|r| r.matches(verb, resource)) {
            // One draw per matching rule keeps decisions a pure function of the seed and the
            // request sequence.
            let roll: f64 = rng.random();
            if roll < rule.fraction {
                *injected += 1;
                return Some(rule.action.clone());
            }
        }
        None
    }

    /// Applies the fate of one request: sleeps for a delay, or returns the error to answer with.
    pub(crate) async fn inject(&self, verb: Verb, resource: &str) -> Option<ApiError> {
        let action = self.decide(verb, resource)?;
        if let FaultAction::Delay(delay) = action {
            tokio::time::sleep(delay).await;
            return None;
        }
        action.error(resource)
    }
}

#[cfg(feature = "faults")]
impl FaultAction {
    /// The error to answer with, or `None` for a delay.
    pub fn error(&self, resource: &str) -> Option<ApiError> {
        match self {
            Self::Delay(_) => None,
            Self::InternalError => Some(ApiError::internal("injected fault")),
            Self::TooManyRequests => Some(ApiError::too_many_requests()),
            Self::Conflict => {
                let mut err = ApiError::internal(format!(
                    "Operation cannot be fulfilled on {resource}: injected conflict"
                ));
                err.code = 409;
                err.reason = "Conflict";
                Some(err)
            }
        }
    }
}

#[cfg(all(test, feature = "faults"))]
mod tests {
    use super::*;

    fn pattern(seed: u64) -> Vec<bool> {
        let faults = Faults::new(seed);
        faults.add(
            FaultRule::new(FaultAction::InternalError)
                .verb(Verb::Create)
                .resource("services")
                .fraction(0.5),
        );
        (0..64)
            .map(|_| faults.decide(Verb::Create, "services").is_some())
            .collect()
    }

    #[test]
    fn same_seed_same_faults() {
        assert_eq!(pattern(7), pattern(7));
        assert_ne!(pattern(7), pattern(8));
        let hits = pattern(7).iter().filter(|h| **h).count();
        assert!((16..=48).contains(&hits), "{hits} of 64 at fraction 0.5");
    }

    #[test]
    fn filters_by_verb_and_resource() {
        let faults = Faults::new(1);
        faults.add(
            FaultRule::new(FaultAction::TooManyRequests)
                .verb(Verb::List)
                .resource("nodes"),
        );
        assert_eq!(
            faults.decide(Verb::List, "nodes"),
            Some(FaultAction::TooManyRequests)
        );
        assert_eq!(faults.decide(Verb::List, "services"), None);
        assert_eq!(faults.decide(Verb::Get, "nodes"), None);
        assert_eq!(faults.injected(), 1);
        faults.clear();
        assert_eq!(faults.decide(Verb::List, "nodes"), None);
    }

    #[test]
    fn errors_carry_codes() {
        assert_eq!(FaultAction::Conflict.error("services").unwrap().code, 409);
        assert_eq!(FaultAction::TooManyRequests.error("x").unwrap().code, 429);
        assert_eq!(FaultAction::InternalError.error("x").unwrap().code, 500);
        assert!(
            FaultAction::Delay(Duration::from_millis(1))
                .error("x")
                .is_none()
        );
    }
}
