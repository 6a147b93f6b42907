//! Kubernetes Events with the upstream service controller's reasons, so existing tooling and
//! runbooks keep working.
//!
//! Two things stand between a reconcile and the API server:
//! - **The note limit.** The API server refuses an Event whose note is longer than 1,024
//!   bytes, so a Service with many annotation errors would show none. Notes are cut to the
//!   limit on a character boundary, with an ellipsis saying how much was cut; the full text
//!   goes to the log.
//! - **Repeats.** A Service that keeps failing the same way would publish the same Warning on
//!   every retry. kube 5's `Recorder` folds events into a series by (type, reason, action,
//!   reporter, object) and keeps the *first* note: a Warning whose text changed within its
//!   6-minute window would only bump the count of the old one and the new cause would never
//!   show. So this layer decides what is news, keyed on the note as well: the same (reason,
//!   note) for the same Service is not published again for [`REPEAT_AFTER`], and a changed
//!   Warning goes out as a new Event object rather than as a series of the old one. Normal
//!   events keep the `Recorder`'s series behaviour (their notes are fixed texts).
//! - **The condition mirror.** `kubectl describe svc` prints Events but not Service
//!   conditions, so the `kube-lb.io/LoadBalancerReady` condition is mirrored into
//!   `LoadBalancerReady` (True) and `LoadBalancerNotReady` (False or Unknown) events whose note
//!   is the condition (type, status, reason, message). Both reasons share one repeat key: the
//!   condition is news whenever its text differs from the last one mirrored (a message-only
//!   change too), and the same text is mirrored again after [`REPEAT_AFTER`] when a reconcile
//!   passes by, so the current condition outlives the API server's event TTL.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// The upstream event source name.
pub const REPORTER: &str = "service-controller";

/// The API server's limit on `note`, in bytes (`events.k8s.io/v1` validation).
pub const NOTE_LIMIT: usize = 1024;

/// How long an unchanged Warning stays quiet. Shorter than the API server's default event TTL
/// (1 h), so a cause that persists is always visible in `kubectl describe`.
pub const REPEAT_AFTER: Duration = Duration::from_secs(30 * 60);

/// Event reasons used by the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// About to create or update a load balancer.
    EnsuringLoadBalancer,
    /// The load balancer matches the Service.
    EnsuredLoadBalancer,
    /// Only the backend set changed and the load balancer was updated.
    UpdatedLoadBalancer,
    /// The provider failed (text in the note).
    SyncLoadBalancerFailed,
    /// About to delete a load balancer.
    DeletingLoadBalancer,
    /// The load balancer is gone.
    DeletedLoadBalancer,
    /// An annotation or field is accepted but probably does not do what was meant.
    AnnotationWarning,
    /// The Service as stored does not decode (a field of the wrong type): it is skipped until
    /// it changes; the note names the field path.
    DecodeFailed,
    /// The `kube-lb.io/LoadBalancerReady` condition became True (note: the condition), so
    /// `kubectl describe svc`, which does not print Service conditions, shows it.
    LoadBalancerReady,
    /// The `kube-lb.io/LoadBalancerReady` condition is False or Unknown (note: the condition,
    /// with what to change).
    LoadBalancerNotReady,
}

impl Reason {
    /// The `reason` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::EnsuringLoadBalancer => "EnsuringLoadBalancer",
            Reason::EnsuredLoadBalancer => "EnsuredLoadBalancer",
            Reason::UpdatedLoadBalancer => "UpdatedLoadBalancer",
            Reason::SyncLoadBalancerFailed => "SyncLoadBalancerFailed",
            Reason::DeletingLoadBalancer => "DeletingLoadBalancer",
            Reason::DeletedLoadBalancer => "DeletedLoadBalancer",
            Reason::AnnotationWarning => "AnnotationWarning",
            Reason::DecodeFailed => "DecodeFailed",
            Reason::LoadBalancerReady => "LoadBalancerReady",
            Reason::LoadBalancerNotReady => "LoadBalancerNotReady",
        }
    }

    fn event_type(self) -> EventType {
        match self {
            Reason::SyncLoadBalancerFailed
            | Reason::AnnotationWarning
            | Reason::DecodeFailed
            | Reason::LoadBalancerNotReady => EventType::Warning,
            _ => EventType::Normal,
        }
    }

    fn is_warning(self) -> bool {
        self.event_type() == EventType::Warning
    }

    /// True for the two reasons that mirror the condition.
    fn mirrors_condition(self) -> bool {
        matches!(
            self,
            Reason::LoadBalancerReady | Reason::LoadBalancerNotReady
        )
    }

    /// The reason repeats are judged under: the condition mirrors share one, so the condition
    /// going True → False → True with the old text is news each time.
    fn repeat_key(self) -> Reason {
        if self.mirrors_condition() {
            Reason::LoadBalancerNotReady
        } else {
            self
        }
    }

    /// True for events that say the load balancer reached its goal: earlier Warnings are
    /// history, and the same failure happening again is news.
    fn settles(self) -> bool {
        matches!(
            self,
            Reason::EnsuredLoadBalancer | Reason::UpdatedLoadBalancer | Reason::DeletedLoadBalancer
        )
    }

    fn action(self) -> &'static str {
        match self {
            Reason::DeletingLoadBalancer | Reason::DeletedLoadBalancer => "Delete",
            Reason::DecodeFailed => "Decode",
            _ => "Ensure",
        }
    }
}

/// `note` cut to at most `limit` bytes, never inside a character, ending with an ellipsis
/// that says how many bytes were cut. Unchanged when it fits.
pub fn cut_note(note: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if note.len() <= limit {
        return note.into();
    }
    let suffix = |cut: usize| format!("… [{cut} more bytes]");
    // The suffix's length depends on the number cut; sizing it for the most that could be cut
    // keeps it within the limit, and the real number is never longer.
    let room = limit.saturating_sub(suffix(note.len()).len());
    let mut end = room.min(note.len());
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    let cut = format!("{}{}", &note[..end], suffix(note.len() - end));
    if cut.len() <= limit {
        cut.into()
    } else {
        // A limit too small for any suffix: keep only whole characters.
        let mut end = limit.min(note.len());
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note[..end].to_string().into()
    }
}

/// What was last published per (Service, reason).
#[derive(Debug, Clone, Copy)]
struct Published {
    note: u64,
    at: Instant,
}

type RepeatKey = (String, Reason);

/// Publishes events about Services. Failing to publish never fails a reconcile: events are
/// informative, the status and finalizer carry the state.
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    reporter: Reporter,
    recorder: Recorder,
    published: std::sync::Arc<Mutex<HashMap<RepeatKey, Published>>>,
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events").finish_non_exhaustive()
    }
}

fn note_hash(note: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    note.hash(&mut hasher);
    hasher.finish()
}

impl Events {
    /// Events reported as `service-controller` from `instance`.
    pub fn new(client: kube::Client, instance: String) -> Self {
        let reporter = Reporter {
            controller: REPORTER.to_string(),
            instance: Some(instance),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
            published: Default::default(),
        }
    }

    /// Decides whether `note` is news for (`uid`, `reason`) at `now`, and remembers it.
    fn is_news(&self, uid: &str, reason: Reason, note: &str, now: Instant) -> bool {
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Forget what is old enough to be published again, so the map holds only Services
        // with a recent Warning or condition mirror.
        published.retain(|_, p| now.duration_since(p.at) < REPEAT_AFTER);
        if reason.settles() {
            // The condition mirror is kept while the load balancer exists: it was published
            // by the same pass, just before, and says what the Service shows now.
            let gone = reason == Reason::DeletedLoadBalancer;
            published.retain(|(u, r), _| u != uid || (!gone && r.mirrors_condition()));
        }
        if !reason.is_warning() && !reason.mirrors_condition() {
            return true;
        }
        let hash = note_hash(note);
        let key = (uid.to_string(), reason.repeat_key());
        if published.get(&key).is_some_and(|p| p.note == hash) {
            return false;
        }
        published.insert(
            key,
            Published {
                note: hash,
                at: now,
            },
        );
        true
    }

    /// Publishes one event about `service`, unless the same Warning was published for it
    /// recently; a note over the API's limit is cut, with the full text in the log.
    pub async fn publish(&self, service: &Service, reason: Reason, note: impl Into<String>) {
        let full: String = note.into();
        let reference = service.object_ref(&());
        let name = format!(
            "{}/{}",
            reference.namespace.as_deref().unwrap_or_default(),
            reference.name.as_deref().unwrap_or_default()
        );
        let uid = reference.uid.clone().unwrap_or_else(|| name.clone());
        if !self.is_news(&uid, reason, &full, Instant::now()) {
            tracing::debug!(service = %name, reason = reason.as_str(), note = %full, "event unchanged; not published again");
            return;
        }
        let note = cut_note(&full, NOTE_LIMIT);
        if note.len() < full.len() {
            tracing::warn!(
                service = %name,
                reason = reason.as_str(),
                bytes = full.len(),
                note = %full,
                "event note over the API limit; published cut, full text here"
            );
        }
        let event = Event {
            type_: reason.event_type(),
            reason: reason.as_str().to_string(),
            note: Some(note.into_owned()),
            action: reason.action().to_string(),
            secondary: None,
        };
        let result = if reason.is_warning() || reason == Reason::LoadBalancerReady {
            // A changed Warning must be a new Event: the shared recorder would fold it into
            // the previous one's series and keep the old text. The same holds for the
            // condition mirrored into LoadBalancerReady, whose note carries the address.
            Recorder::new(self.client.clone(), self.reporter.clone())
                .publish(&event, &reference)
                .await
        } else {
            self.recorder.publish(&event, &reference).await
        };
        match result {
            Ok(()) => {}
            // The Service's namespace is being deleted: no Event can be made there any more,
            // and the release of its load balancer goes on. client-go's recorder says this at
            // debug level too.
            Err(error) if namespace_terminating(&error) => tracing::debug!(
                service = %name,
                reason = reason.as_str(),
                "namespace being deleted; event not recorded"
            ),
            Err(error) => tracing::warn!(
                service = %name,
                reason = reason.as_str(),
                %error,
                "could not publish event"
            ),
        }
    }
}

/// Whether `error` is the API server refusing new content in a namespace being deleted (the
/// NamespaceLifecycle plugin's `NamespaceTerminating` cause).
fn namespace_terminating(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.details.as_ref().is_some_and(|details| {
            details
                .causes
                .iter()
                .any(|cause| cause.reason == "NamespaceTerminating")
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_to_the_limit_on_character_boundaries() {
        let ascii = "a".repeat(2000);
        let exactly = "b".repeat(NOTE_LIMIT);
        // 'é' is 2 bytes, '€' 3, '🦀' 4: whatever the suffix leaves, the cut falls between
        // characters of every width.
        let two = "é".repeat(700);
        let three = "€".repeat(500);
        let four = "🦀".repeat(400);
        let cases: [(&str, &str); 7] = [
            ("empty", ""),
            ("short", "Error syncing load balancer: quota"),
            ("exactly the limit", &exactly),
            ("ascii", &ascii),
            ("2-byte", &two),
            ("3-byte", &three),
            ("4-byte", &four),
        ];
        for (label, note) in cases {
            let cut = cut_note(note, NOTE_LIMIT);
            assert!(cut.len() <= NOTE_LIMIT, "{label}: {} bytes", cut.len());
            if note.len() <= NOTE_LIMIT {
                assert_eq!(cut, note, "{label}: fits, unchanged");
                continue;
            }
            let (kept, tail) = cut.split_once("… [").expect("ellipsis");
            assert!(note.starts_with(kept), "{label}: a prefix is kept");
            let removed = note.len() - kept.len();
            assert_eq!(tail, format!("{removed} more bytes]"), "{label}");
            // At most a partial character and one digit of slack are given up.
            assert!(
                cut.len() + 4 >= NOTE_LIMIT,
                "{label}: as much as fits is kept ({} bytes)",
                cut.len()
            );
        }
    }

    #[test]
    fn one_over_the_limit_is_cut() {
        let note = "x".repeat(NOTE_LIMIT + 1);
        let cut = cut_note(&note, NOTE_LIMIT);
        assert!(cut.len() <= NOTE_LIMIT);
        assert!(cut.ends_with("more bytes]"), "{cut}");
    }

    #[test]
    fn tiny_limits_keep_whole_characters() {
        assert_eq!(cut_note("ééé", 3), "é");
        assert_eq!(cut_note("abc", 0), "");
    }

    fn events() -> Events {
        // Not connected: `is_news` never touches the client.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        Events::new(kube::Client::try_from(config).unwrap(), "test".into())
    }

    /// The condition mirror: news when its text changes (a message-only change too, and
    /// True → False → True with the old text), quiet while unchanged, mirrored again once
    /// [`REPEAT_AFTER`] has passed so `kubectl describe` keeps showing it past the event TTL.
    #[tokio::test]
    async fn the_condition_mirror_is_news_when_its_text_changes_and_is_refreshed() {
        let events = events();
        let t0 = Instant::now();
        let ready = Reason::LoadBalancerReady;
        let not_ready = Reason::LoadBalancerNotReady;
        let at_a = "kube-lb.io/LoadBalancerReady=True Provisioned: Load balancer ready at a.";
        let at_b = "kube-lb.io/LoadBalancerReady=True Provisioned: Load balancer ready at b.";
        let broken = "kube-lb.io/LoadBalancerReady=False AnnotationInvalid: Change: x";
        let repeat = REPEAT_AFTER.as_secs();
        let steps = [
            // (uid, reason, note, seconds after t0, published)
            ("a", ready, at_a, 0, true),
            ("a", ready, at_a, 600, false),
            ("b", ready, at_a, 600, true),
            // Only the message changed.
            ("a", ready, at_b, 700, true),
            ("a", ready, at_b, 800, false),
            // The pass that published it settles: the mirror is not forgotten.
            (
                "a",
                Reason::EnsuredLoadBalancer,
                "Ensured load balancer",
                801,
                true,
            ),
            ("a", ready, at_b, 802, false),
            ("a", not_ready, broken, 900, true),
            ("a", not_ready, broken, 1000, false),
            // Back to the text mirrored before: news, the condition changed.
            ("a", ready, at_b, 1100, true),
            // Unchanged past REPEAT_AFTER: mirrored again, before the event TTL drops it.
            ("a", ready, at_b, 1100 + repeat - 1, false),
            ("a", ready, at_b, 1100 + repeat, true),
            // Gone and back: the same text is news again.
            (
                "a",
                Reason::DeletedLoadBalancer,
                "Deleted load balancer",
                1100 + repeat + 1,
                true,
            ),
            ("a", ready, at_b, 1100 + repeat + 2, true),
        ];
        for (uid, reason, note, at, want) in steps {
            let now = t0 + Duration::from_secs(at);
            assert_eq!(
                events.is_news(uid, reason, note, now),
                want,
                "{uid} {reason:?} {note:?} at {at}s"
            );
        }
    }

    #[test]
    fn a_refusal_in_a_terminating_namespace_is_told_apart() {
        let refusal = |causes: serde_json::Value| {
            let status: kube::core::Status = serde_json::from_value(serde_json::json!({
                "code": 403, "reason": "Forbidden", "message": "forbidden",
                "details": {"causes": causes},
            }))
            .expect("a Status");
            kube::Error::Api(Box::new(status))
        };
        assert!(namespace_terminating(&refusal(serde_json::json!([{
            "reason": "NamespaceTerminating",
            "message": "namespace team is being terminated",
            "field": "metadata.namespace",
        }]))));
        assert!(!namespace_terminating(&refusal(serde_json::json!([]))));
        assert!(!namespace_terminating(
            &kube::Error::LinesCodecMaxLineLengthExceeded
        ));
    }

    #[tokio::test]
    async fn warnings_are_published_once_while_unchanged() {
        let events = events();
        let t0 = Instant::now();
        let warn = Reason::SyncLoadBalancerFailed;
        let steps = [
            // (uid, reason, note, seconds after t0, published)
            ("a", warn, "quota", 0, true),
            ("a", warn, "quota", 10, false),
            ("b", warn, "quota", 10, true),
            ("a", Reason::AnnotationWarning, "quota", 11, true),
            ("a", warn, "subnet missing", 20, true),
            ("a", warn, "quota", 30, true),
            ("a", warn, "quota", 40, false),
            // Normal events are not deduplicated here (the recorder folds them).
            (
                "a",
                Reason::EnsuringLoadBalancer,
                "Ensuring load balancer",
                50,
                true,
            ),
            (
                "a",
                Reason::EnsuringLoadBalancer,
                "Ensuring load balancer",
                51,
                true,
            ),
            ("a", warn, "quota", 60, false),
            // Success: the same failure again is news.
            (
                "a",
                Reason::EnsuredLoadBalancer,
                "Ensured load balancer",
                70,
                true,
            ),
            ("a", warn, "quota", 80, true),
            // Still failing the same way after REPEAT_AFTER: published again.
            ("a", warn, "quota", 80 + REPEAT_AFTER.as_secs(), true),
        ];
        for (uid, reason, note, at, want) in steps {
            let now = t0 + Duration::from_secs(at);
            assert_eq!(
                events.is_news(uid, reason, note, now),
                want,
                "{uid} {reason:?} {note:?} at {at}s"
            );
        }
    }
}
