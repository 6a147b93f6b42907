//! Pure: what the speakers write into the status of kube-lb's BGP objects (MetalLB's are read
//! only and never written).
//!
//! - `status.conditions[type=Valid]` of every `BGPPeer`, `BGPAdvertisement` and
//!   `BFDProfile`: every node computes the same one from the same objects, so a node writes it
//!   only when the stored one says something else, and in practice one node writes it once.
//! - `status.sessions.<node>` of every `BGPPeer`: each node's own session as its bgpd reports
//!   it. A JSON merge patch of one key per node, so nodes never overwrite each other. A
//!   session that stays down says what is known about why (a password in use is the usual
//!   cause of a session that never leaves `Active`: TCP-MD5 drops mismatched segments
//!   silently, so neither side sees an error).

use serde_json::{Value, json};

use super::crd::{self, VALID_CONDITION};
use super::model::{Peer, Problem};

/// The merge patch that sets an object's `Valid` condition to what `problems` say, or `None`
/// when `object`'s status already says that (same status, reason and message).
pub fn valid_patch(object: &Value, problems: &[&Problem], now: &str) -> Option<Value> {
    let mut wanted = crd::valid_condition(problems);
    let current = object["status"]["conditions"]
        .as_array()
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c["type"].as_str() == Some(VALID_CONDITION))
        });
    let same = |key: &str| current.is_some_and(|c| c[key] == wanted[key]);
    if same("status") && same("reason") && same("message") {
        return None;
    }
    wanted["lastTransitionTime"] = now.into();
    if let Some(generation) = object["metadata"]["generation"].as_i64() {
        wanted["observedGeneration"] = generation.into();
    }
    Some(json!({"status": {"conditions": [wanted]}}))
}

/// One node's session with a peer, as written under `status.sessions.<node>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionStatus {
    /// bgpd's state name (`Established`, `Active`, `Connect`, …; `Unknown` before it is read).
    pub state: String,
    /// Whether the session is established.
    pub established: bool,
    /// Why it is down, in words, when it is.
    pub message: String,
}

/// The status of `peer`'s session as reported by bgpd (`state`, and the reason of its last
/// reset if bgpd gave one).
pub fn session_status(peer: &Peer, state: &str, last_reset: Option<&str>) -> SessionStatus {
    let established = state == "Established";
    let mut message = String::new();
    if !established {
        message = format!("not established ({state})");
        if let Some(reset) = last_reset.filter(|r| !r.is_empty()) {
            message.push_str(&format!("; last reset: {reset}"));
        }
        if let Some(secret) = &peer.password {
            message.push_str(&format!(
                "; the session uses a TCP-MD5 password, and a router with another one drops \
                 every segment without a word: check that it has the one in Secret {}/{} key \
                 {:?}",
                secret.namespace, secret.name, secret.key
            ));
        }
    }
    SessionStatus {
        state: state.to_owned(),
        established,
        message,
    }
}

/// The merge patch that sets `node`'s entry of `status.sessions`.
pub fn session_patch(node: &str, status: &SessionStatus, now: &str) -> Value {
    json!({"status": {"sessions": {node: {
        "state": status.state,
        "established": status.established,
        "message": status.message,
        "lastTransitionTime": now,
    }}}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bgp::desired::tests::peer;
    use crate::bgp::model::{Origin, SecretKeyRef};

    fn problem(field: &str, message: &str) -> Problem {
        Problem {
            kind: "BGPPeer",
            origin: Origin::KubeLb,
            name: "r1".into(),
            field: field.into(),
            message: message.into(),
        }
    }

    #[test]
    fn the_valid_condition_is_written_only_when_it_changes() {
        let bad = problem(
            "spec.peerASN",
            "peerASN 0 is not an AS number (1-4294967295)",
        );
        let fresh = json!({"metadata": {"name": "r1", "generation": 3}});
        let patch = valid_patch(&fresh, &[&bad], "2026-12-04T05:00:00Z").expect("a patch");
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(condition["type"], "Valid");
        assert_eq!(condition["status"], "False");
        assert_eq!(condition["observedGeneration"], 3);
        assert_eq!(
            condition["message"],
            "spec.peerASN: peerASN 0 is not an AS number (1-4294967295)"
        );
        let mut stored = fresh.clone();
        stored["status"] = patch["status"].clone();
        assert_eq!(
            valid_patch(&stored, &[&bad], "2026-12-04T05:01:00Z"),
            None,
            "the same condition is not written again"
        );
        let fixed = valid_patch(&stored, &[], "2026-12-04T05:02:00Z").expect("fixed");
        assert_eq!(fixed["status"]["conditions"][0]["status"], "True");
    }

    #[test]
    fn a_session_down_says_what_is_known() {
        let mut with_password = peer("r1", "10.0.0.254");
        with_password.password = Some(SecretKeyRef {
            namespace: "kube-lb-system".into(),
            name: "kube-lb-bgp-passwords".into(),
            key: "r1".into(),
        });
        let up = session_status(&with_password, "Established", None);
        assert!(up.established);
        assert_eq!(up.message, "");
        let down = session_status(&with_password, "Active", Some("Waiting for peer OPEN"));
        assert!(!down.established);
        assert!(
            down.message.starts_with(
                "not established (Active); last reset: Waiting for peer OPEN; the session uses \
                 a TCP-MD5 password"
            ),
            "{}",
            down.message
        );
        assert!(
            down.message
                .contains("kube-lb-system/kube-lb-bgp-passwords key \"r1\"")
        );
        let plain = session_status(&peer("r2", "10.0.0.253"), "Connect", None);
        assert_eq!(plain.message, "not established (Connect)");
        let patch = session_patch("n1", &down, "2026-12-04T05:00:00Z");
        assert_eq!(patch["status"]["sessions"]["n1"]["state"], "Active");
        assert_eq!(patch["status"]["sessions"]["n1"]["established"], false);
    }
}
