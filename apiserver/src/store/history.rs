//! The bounded, ordered log of recent changes that watches resume from.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use crate::resources::ResourceId;

/// The type of a watch event as it appears on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// An object was created.
    Added,
    /// An object was changed.
    Modified,
    /// An object was removed.
    Deleted,
}

impl EventType {
    /// The wire name (`ADDED`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Added => "ADDED",
            Self::Modified => "MODIFIED",
            Self::Deleted => "DELETED",
        }
    }
}

/// Identity of an object inside one resource: namespace (empty for cluster-scoped) and name.
pub type ObjectKey = (String, String);

/// One committed change.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion this change created (unique, increasing across all resources).
    pub resource_version: u64,
    /// Which resource changed.
    pub resource: ResourceId,
    /// The kind of change.
    pub event_type: EventType,
    /// The object after the change (for deletes: the last state, with the delete's version).
    pub object: Arc<Value>,
    /// The object before the change; `None` for creates. Lets lists be served at an older
    /// version and lets selector watches turn "stopped matching" into DELETED.
    pub previous: Option<Arc<Value>>,
    /// The object's key.
    pub key: ObjectKey,
}

/// The most recent events, oldest first, at most `limit` of them.
#[derive(Debug)]
pub struct History {
    events: VecDeque<Arc<Event>>,
    limit: usize,
    /// Every event with a version above this is still in `events`.
    compacted: u64,
}

impl History {
    /// An empty history that considers every version up to `compacted` gone.
    pub fn new(limit: usize, compacted: u64) -> Self {
        Self {
            events: VecDeque::with_capacity(limit.min(65536)),
            limit,
            compacted,
        }
    }

    /// The newest version no longer fully covered by the retained events.
    pub fn compacted(&self) -> u64 {
        self.compacted
    }

    /// How many events are retained.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Appends an event, dropping the oldest when full.
    pub fn push(&mut self, event: Arc<Event>) {
        if self.limit == 0 {
            self.compacted = event.resource_version;
            return;
        }
        while self.events.len() >= self.limit {
            if let Some(old) = self.events.pop_front() {
                self.compacted = old.resource_version;
            }
        }
        self.events.push_back(event);
    }

    /// Events of `resource` newer than `since`, oldest first. The caller checks `since` against
    /// [`History::compacted`] first.
    pub fn since(&self, resource: ResourceId, since: u64) -> Vec<Arc<Event>> {
        let start = self.events.partition_point(|e| e.resource_version <= since);
        self.events
            .range(start..)
            .filter(|e| e.resource == resource)
            .cloned()
            .collect()
    }

    /// Rewinds the current objects of `resource` to how they were at version `at` by undoing
    /// newer events. The caller checks `at >= compacted`.
    pub fn rewind(
        &self,
        resource: ResourceId,
        mut objects: BTreeMap<ObjectKey, Arc<Value>>,
        at: u64,
    ) -> BTreeMap<ObjectKey, Arc<Value>> {
        for event in self.events.iter().rev() {
            if event.resource_version <= at {
                break;
            }
            if event.resource != resource {
                continue;
            }
            match (&event.event_type, &event.previous) {
                (EventType::Added, _) | (_, None) => {
                    objects.remove(&event.key);
                }
                (_, Some(previous)) => {
                    objects.insert(event.key.clone(), previous.clone());
                }
            }
        }
        objects
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(rv: u64, ty: EventType, name: &str, value: i64, prev: Option<i64>) -> Arc<Event> {
        Arc::new(Event {
            resource_version: rv,
            resource: 1,
            event_type: ty,
            object: Arc::new(json!({"v": value})),
            previous: prev.map(|p| Arc::new(json!({"v": p}))),
            key: ("ns".into(), name.into()),
        })
    }

    #[test]
    fn bounded_and_compacts() {
        let mut h = History::new(2, 0);
        h.push(event(1, EventType::Added, "a", 1, None));
        h.push(event(2, EventType::Modified, "a", 2, Some(1)));
        assert_eq!(h.compacted(), 0);
        h.push(event(3, EventType::Modified, "a", 3, Some(2)));
        assert_eq!(h.compacted(), 1);
        let since: Vec<u64> = h.since(1, 1).iter().map(|e| e.resource_version).collect();
        assert_eq!(since, vec![2, 3]);
        assert!(h.since(2, 0).is_empty());
    }

    #[test]
    fn rewind_undoes_newer_events() {
        let mut h = History::new(10, 0);
        h.push(event(1, EventType::Added, "a", 1, None));
        h.push(event(2, EventType::Added, "b", 1, None));
        h.push(event(3, EventType::Modified, "a", 2, Some(1)));
        h.push(event(4, EventType::Deleted, "b", 1, Some(1)));
        let mut now = BTreeMap::new();
        now.insert(
            ("ns".to_string(), "a".to_string()),
            Arc::new(json!({"v": 2})),
        );
        let at2 = h.rewind(1, now.clone(), 2);
        assert_eq!(at2.len(), 2);
        assert_eq!(*at2[&("ns".to_string(), "a".to_string())], json!({"v": 1}));
        let at0 = h.rewind(1, now, 0);
        assert!(at0.is_empty());
    }
}
