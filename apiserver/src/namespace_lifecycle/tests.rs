use serde_json::json;

use super::*;

fn remaining(resources: &[(&str, usize)], finalizers: &[(&str, usize)]) -> Remaining {
    Remaining {
        by_resource: resources.iter().map(|(k, n)| (k.to_string(), *n)).collect(),
        by_finalizer: finalizers
            .iter()
            .map(|(k, n)| (k.to_string(), *n))
            .collect(),
    }
}

/// `(status, reason, message)` of a condition.
type Expected = (&'static str, &'static str, &'static str);

#[test]
fn conditions_say_what_is_left_in_upstreams_words() {
    let cases: Vec<(Remaining, [Expected; 2])> = vec![
        (
            Remaining::default(),
            [
                (
                    "False",
                    "ContentRemoved",
                    "All content successfully removed",
                ),
                (
                    "False",
                    "ContentHasNoFinalizers",
                    "All content-preserving finalizers finished",
                ),
            ],
        ),
        (
            remaining(
                &[("services.", 2), ("widgets.example.com", 1)],
                &[
                    ("service.kubernetes.io/load-balancer-cleanup", 2),
                    ("example.com/keep", 1),
                ],
            ),
            [
                (
                    "True",
                    "SomeResourcesRemain",
                    "Some resources are remaining: services. has 2 resource instances, \
                     widgets.example.com has 1 resource instances",
                ),
                (
                    "True",
                    "SomeFinalizersRemain",
                    "Some content in the namespace has finalizers remaining: example.com/keep \
                     in 1 resource instances, service.kubernetes.io/load-balancer-cleanup in 2 \
                     resource instances",
                ),
            ],
        ),
    ];
    for (left, [content, finalizers]) in cases {
        let got = conditions(&left);
        let types: Vec<&str> = got.iter().map(|c| c.0).collect();
        assert_eq!(
            types,
            [
                "NamespaceDeletionDiscoveryFailure",
                "NamespaceDeletionGroupVersionParsingFailure",
                "NamespaceDeletionContentFailure",
                "NamespaceContentRemaining",
                "NamespaceFinalizersRemaining",
            ]
        );
        // What cannot fail here reports success.
        assert!(got[..3].iter().all(|c| c.1 == "False"), "{got:?}");
        for (condition, (status, reason, message)) in got[3..].iter().zip([content, finalizers]) {
            assert_eq!(
                (condition.1, condition.2, condition.3.as_str()),
                (status, reason, message)
            );
        }
    }
}

#[test]
fn merging_conditions_keeps_transition_times_and_reports_no_change() {
    let waiting = conditions(&remaining(&[("services.", 1)], &[("a/b", 1)]));
    let first = merge_conditions(&[], &waiting, "2026-01-01T00:00:00Z").unwrap();
    assert_eq!(first.len(), 5);
    // The same again: nothing to write.
    assert_eq!(
        merge_conditions(&first, &waiting, "2026-01-01T00:00:05Z"),
        None
    );
    // The content goes: the two conditions about it flip, and only they get the new time.
    let done = conditions(&Remaining::default());
    let second = merge_conditions(&first, &done, "2026-01-01T00:00:09Z").unwrap();
    for condition in &second {
        let flipped = matches!(
            condition["type"].as_str(),
            Some("NamespaceContentRemaining" | "NamespaceFinalizersRemaining")
        );
        let expected = if flipped {
            "2026-01-01T00:00:09Z"
        } else {
            "2026-01-01T00:00:00Z"
        };
        assert_eq!(condition["lastTransitionTime"], expected, "{condition}");
    }
    // A condition someone else wrote is left alone.
    let foreign = vec![json!({"type": "Other", "status": "True"})];
    let merged = merge_conditions(&foreign, &done, "2026-01-01T00:00:00Z").unwrap();
    assert_eq!(merged[0], foreign[0]);
    assert_eq!(merged.len(), 6);
}
