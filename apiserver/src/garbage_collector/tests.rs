use super::*;

fn reference(uid: &str) -> OwnerRef {
    OwnerRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: format!("owner-{uid}"),
        uid: uid.into(),
        block_owner_deletion: false,
    }
}

/// Owners by uid and state, whether the dependent has dependents, its finalizers, the verdict.
type Case = (
    Vec<(&'static str, OwnerState)>,
    bool,
    Vec<&'static str>,
    Verdict,
);

#[test]
fn a_dependent_goes_only_when_no_owner_holds_it() {
    use OwnerState::{Dangling, Solid, Waiting};
    let cases: Vec<Case> = vec![
        (vec![], false, vec![], Verdict::Keep),
        (vec![("a", Solid)], false, vec![], Verdict::Keep),
        // One owner left: the reference to the gone one is dropped, the object stays.
        (
            vec![("a", Solid), ("b", Dangling)],
            false,
            vec![],
            Verdict::DropReferences(vec!["b".into()]),
        ),
        (
            vec![("a", Solid), ("b", Waiting)],
            false,
            vec![],
            Verdict::DropReferences(vec!["b".into()]),
        ),
        // No owner left: deleted in the background, or as its own finalizers ask.
        (
            vec![("a", Dangling)],
            false,
            vec![],
            Verdict::Delete(Propagation::Background),
        ),
        (
            vec![("a", Dangling)],
            false,
            vec!["orphan"],
            Verdict::Delete(Propagation::Orphan),
        ),
        // An owner waits in the foreground and this has dependents of its own: foreground too.
        (
            vec![("a", Waiting)],
            true,
            vec![],
            Verdict::Delete(Propagation::Foreground),
        ),
        (
            vec![("a", Waiting)],
            false,
            vec![],
            Verdict::Delete(Propagation::Background),
        ),
    ];
    for (owners, has_dependents, finalizers, expected) in cases {
        let owners: Vec<(OwnerRef, OwnerState)> = owners
            .into_iter()
            .map(|(uid, state)| (reference(uid), state))
            .collect();
        assert_eq!(
            verdict(&owners, has_dependents, &finalizers),
            expected,
            "{owners:?}"
        );
    }
}

#[test]
fn owner_references_without_the_required_fields_are_not_followed() {
    let object = serde_json::json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "a", "uid": "1", "blockOwnerDeletion": true},
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "b"},
    ]}});
    let refs = owner_refs(&object);
    assert_eq!(refs.len(), 1);
    assert!(refs[0].block_owner_deletion);
}
