//! The mock enforces what the Compute API enforces, checked over real HTTP.

// Test helpers outside #[test] functions: a failed setup step should panic with its error.
#![allow(clippy::unwrap_used)]

use base64::Engine as _;
use kube_lb_mock_gce::{ApiError, CallClass, Fault, FaultResponse, MockGce};
use serde_json::{Value, json};

struct Api {
    gce: MockGce,
    http: reqwest::Client,
}

impl Api {
    async fn start(builder: kube_lb_mock_gce::MockGceBuilder) -> Api {
        Api {
            gce: builder.start().await.unwrap(),
            http: reqwest::Client::new(),
        }
    }

    async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, reqwest::header::HeaderMap) {
        let url = format!("{}/compute/v1/projects/mock-project/{path}", self.gce.url());
        let mut request = self.http.request(method.parse().unwrap(), url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body, headers)
    }

    async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, value, _) = self.call(method, path, body).await;
        assert_eq!(status, 200, "{method} {path}: {value}");
        value
    }

    async fn err(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String, String) {
        let (status, value, _) = self.call(method, path, body).await;
        assert_ne!(status, 200, "{method} {path} should fail");
        let reason = value["error"]["errors"][0]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let message = value["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        (status, reason, message)
    }
}

const R: &str = "regions/us-central1";

async fn external_lb(api: &Api) {
    api.ok(
        "POST",
        "global/httpHealthChecks",
        Some(json!({"name": "hc"})),
    )
    .await;
    api.ok(
        "POST",
        &format!("{R}/targetPools"),
        Some(
            json!({"name": "tp", "healthChecks": ["global/httpHealthChecks/hc"],
            "instances": ["zones/us-central1-a/instances/n1"]}),
        ),
    )
    .await;
    api.ok(
        "POST",
        &format!("{R}/forwardingRules"),
        Some(json!({"name": "fr", "IPProtocol": "TCP", "portRange": "80", "target": format!("{R}/targetPools/tp")})),
    )
    .await;
}

fn nodes() -> kube_lb_mock_gce::MockGceBuilder {
    MockGce::builder()
        .instance("us-central1-a", "n1", &["tag"])
        .instance("us-central1-a", "n2", &["tag"])
}

#[tokio::test]
async fn resources_in_use_cannot_be_deleted() {
    let api = Api::start(nodes()).await;
    external_lb(&api).await;
    let cases = [
        format!("{R}/targetPools/tp"),
        "global/httpHealthChecks/hc".to_string(),
    ];
    for path in cases {
        let (status, reason, message) = api.err("DELETE", &path, None).await;
        assert_eq!(
            (status, reason.as_str()),
            (400, "resourceInUseByAnotherResource"),
            "{path}"
        );
        assert!(message.contains("being used by"), "{message}");
    }
    api.ok("DELETE", &format!("{R}/forwardingRules/fr"), None)
        .await;
    api.ok("DELETE", &format!("{R}/targetPools/tp"), None).await;
    api.ok("DELETE", "global/httpHealthChecks/hc", None).await;
    let (status, reason, _) = api.err("DELETE", "global/httpHealthChecks/hc", None).await;
    assert_eq!((status, reason.as_str()), (404, "notFound"));
}

#[tokio::test]
async fn names_and_references_are_checked() {
    let api = Api::start(nodes()).await;
    let (status, reason, _) = api
        .err(
            "POST",
            &format!("{R}/targetPools"),
            Some(json!({"name": "tp", "instances": ["zones/us-central1-a/instances/ghost"]})),
        )
        .await;
    assert_eq!((status, reason.as_str()), (404, "notFound"));
    api.ok(
        "POST",
        &format!("{R}/targetPools"),
        Some(json!({"name": "tp"})),
    )
    .await;
    let (status, reason, _) = api
        .err(
            "POST",
            &format!("{R}/targetPools"),
            Some(json!({"name": "tp"})),
        )
        .await;
    assert_eq!((status, reason.as_str()), (409, "alreadyExists"));
    let bad = [
        json!({"name": "Upper", "portRange": "80", "target": format!("{R}/targetPools/tp")}),
        json!({"name": "fr", "portRange": "443-80", "target": format!("{R}/targetPools/tp")}),
        json!({"name": "fr", "IPProtocol": "tcp", "portRange": "80", "target": format!("{R}/targetPools/tp")}),
        json!({"name": "fr", "portRange": "80", "target": format!("{R}/targetPools/tp"), "surprise": true}),
        json!({"name": "fr", "portRange": "80"}),
    ];
    for body in bad {
        let (status, _, message) = api
            .err("POST", &format!("{R}/forwardingRules"), Some(body.clone()))
            .await;
        assert_eq!(status, 400, "{body}: {message}");
    }
    let (status, _, _) = api
        .err("POST", "global/firewalls", Some(json!({"name": "fw", "allowed": [{"IPProtocol": "tcp"}], "sourceRanges": ["10.0.0.0/40"]})))
        .await;
    assert_eq!(status, 400);
    assert!(api.gce.names("forwardingRules").is_empty());
}

#[tokio::test]
async fn backend_service_updates_need_the_current_url_safe_fingerprint() {
    let api = Api::start(nodes()).await;
    api.ok(
        "POST",
        "global/healthChecks",
        Some(json!({"name": "hc", "type": "HTTP", "httpHealthCheck": {"port": 10256}})),
    )
    .await;
    api.ok(
        "POST",
        "zones/us-central1-a/instanceGroups",
        Some(json!({"name": "ig"})),
    )
    .await;
    let body = json!({"name": "bs", "protocol": "TCP", "loadBalancingScheme": "INTERNAL",
        "healthChecks": ["global/healthChecks/hc"],
        "backends": [{"group": "zones/us-central1-a/instanceGroups/ig", "balancingMode": "CONNECTION"}]});
    api.ok("POST", &format!("{R}/backendServices"), Some(body.clone()))
        .await;
    let current = api
        .ok("GET", &format!("{R}/backendServices/bs"), None)
        .await;
    let fingerprint = current["fingerprint"].as_str().unwrap().to_string();
    assert!(
        !fingerprint.contains('+') && !fingerprint.contains('/'),
        "{fingerprint}"
    );
    base64::engine::general_purpose::URL_SAFE
        .decode(&fingerprint)
        .unwrap();

    let (status, reason, _) = api
        .err(
            "PUT",
            &format!("{R}/backendServices/bs"),
            Some(body.clone()),
        )
        .await;
    assert_eq!(
        (status, reason.as_str()),
        (412, "conditionNotMet"),
        "no fingerprint"
    );
    let mut stale = body.clone();
    stale["fingerprint"] = json!("AAAAAAAAAAA=");
    let (status, _, _) = api
        .err("PUT", &format!("{R}/backendServices/bs"), Some(stale))
        .await;
    assert_eq!(status, 412, "stale fingerprint");
    let mut fresh = body.clone();
    fresh["fingerprint"] = json!(fingerprint);
    fresh["sessionAffinity"] = json!("CLIENT_IP");
    api.ok("PUT", &format!("{R}/backendServices/bs"), Some(fresh))
        .await;
    let after = api
        .ok("GET", &format!("{R}/backendServices/bs"), None)
        .await;
    assert_eq!(after["sessionAffinity"], json!("CLIENT_IP"));
    assert_ne!(after["fingerprint"].as_str().unwrap(), fingerprint);
    let (status, _, _) = api
        .err("DELETE", "zones/us-central1-a/instanceGroups/ig", None)
        .await;
    assert_eq!(status, 400, "group used by the backend service");
}

#[tokio::test]
async fn an_instance_belongs_to_one_load_balanced_group() {
    let api = Api::start(nodes()).await;
    api.ok(
        "POST",
        "global/healthChecks",
        Some(json!({"name": "hc", "type": "TCP"})),
    )
    .await;
    for group in ["ig1", "ig2"] {
        api.ok(
            "POST",
            "zones/us-central1-a/instanceGroups",
            Some(json!({"name": group})),
        )
        .await;
        api.ok(
            "POST",
            &format!("zones/us-central1-a/instanceGroups/{group}/addInstances"),
            Some(json!({"instances": [{"instance": "zones/us-central1-a/instances/n1"}]})),
        )
        .await;
    }
    let bs = |name: &str, group: &str| {
        json!({"name": name, "protocol": "TCP", "loadBalancingScheme": "INTERNAL", "healthChecks": ["global/healthChecks/hc"],
            "backends": [{"group": format!("zones/us-central1-a/instanceGroups/{group}")}]})
    };
    api.ok(
        "POST",
        &format!("{R}/backendServices"),
        Some(bs("bs1", "ig1")),
    )
    .await;
    let (status, _, message) = api
        .err(
            "POST",
            &format!("{R}/backendServices"),
            Some(bs("bs2", "ig2")),
        )
        .await;
    assert_eq!(status, 400);
    assert!(
        message.contains("INSTANCE_IN_MULTIPLE_LOAD_BALANCED_IGS"),
        "{message}"
    );
    let listed = api
        .ok(
            "POST",
            "zones/us-central1-a/instanceGroups/ig1/listInstances",
            Some(json!({"instanceState": "ALL"})),
        )
        .await;
    assert_eq!(listed["items"].as_array().unwrap().len(), 1);
    let (status, reason, _) = api
        .err(
            "POST",
            "zones/us-central1-a/instanceGroups/ig1/addInstances",
            Some(json!({"instances": [{"instance": "zones/us-central1-a/instances/n1"}]})),
        )
        .await;
    assert_eq!((status, reason.as_str()), (400, "memberAlreadyExists"));
}

#[tokio::test]
async fn addresses_promote_and_demote_forwarding_rule_ips() {
    let api = Api::start(nodes()).await;
    external_lb(&api).await;
    let ip = api
        .ok("GET", &format!("{R}/forwardingRules/fr"), None)
        .await["IPAddress"]
        .clone();
    api.ok(
        "POST",
        &format!("{R}/addresses"),
        Some(json!({"name": "fr", "address": ip})),
    )
    .await;
    let address = api.ok("GET", &format!("{R}/addresses/fr"), None).await;
    assert_eq!(address["status"], json!("IN_USE"));
    assert_eq!(address["users"].as_array().unwrap().len(), 1);
    let (status, _, _) = api
        .err(
            "POST",
            &format!("{R}/addresses"),
            Some(json!({"name": "other", "address": ip})),
        )
        .await;
    assert_eq!(status, 400, "an external IP reserved twice");
    api.ok("DELETE", &format!("{R}/addresses/fr"), None).await;
    assert_eq!(
        api.ok("GET", &format!("{R}/forwardingRules/fr"), None)
            .await["IPAddress"],
        ip,
        "demoted, kept"
    );
    let (status, _, message) = api
        .err(
            "POST",
            &format!("{R}/forwardingRules"),
            Some(
                json!({"name": "fr2", "portRange": "81", "IPAddress": "203.0.113.77",
            "target": format!("{R}/targetPools/tp")}),
            ),
        )
        .await;
    assert_eq!(status, 400, "{message}");
}

#[tokio::test]
async fn operations_run_then_finish_and_wait_returns_done() {
    let api = Api::start(nodes().running_polls(2)).await;
    let op = api
        .ok(
            "POST",
            "global/httpHealthChecks",
            Some(json!({"name": "hc"})),
        )
        .await;
    assert_eq!(op["status"], json!("RUNNING"));
    assert_eq!(op["kind"], json!("compute#operation"));
    assert!(
        op["selfLink"]
            .as_str()
            .unwrap()
            .contains("/projects/mock-project/global/operations/")
    );
    let name = op["name"].as_str().unwrap();
    assert_eq!(
        api.ok("GET", &format!("global/operations/{name}"), None)
            .await["status"],
        json!("RUNNING")
    );
    assert_eq!(
        api.ok("POST", &format!("global/operations/{name}/wait"), None)
            .await["status"],
        json!("DONE")
    );
    assert_eq!(
        api.ok("GET", &format!("global/operations/{name}"), None)
            .await["status"],
        json!("DONE")
    );
}

#[tokio::test]
async fn faults_throttling_and_the_journal() {
    let api = Api::start(nodes().quota("FIREWALLS", 1)).await;
    api.gce.inject(
        Fault::on(
            "GET",
            "/firewalls/",
            FaultResponse::Http(ApiError::new(503, "backendError", "boom")),
        )
        .nth(2),
    );
    let fw = json!({"name": "fw", "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}]});
    api.ok("POST", "global/firewalls", Some(fw)).await;
    api.ok("GET", "global/firewalls/fw", None).await;
    let (status, _, _) = api.err("GET", "global/firewalls/fw", None).await;
    assert_eq!(status, 503, "second GET fails");
    api.ok("GET", "global/firewalls/fw", None).await;
    let (status, reason, message) = api
        .err(
            "POST",
            "global/firewalls",
            Some(json!({"name": "fw2", "allowed": [{"IPProtocol": "udp"}]})),
        )
        .await;
    assert_eq!((status, reason.as_str()), (403, "quotaExceeded"));
    assert!(message.contains("FIREWALLS"));

    api.gce.throttle(1, 7);
    let (status, _, headers) = api.call("GET", "global/firewalls", None).await;
    assert_eq!(status, 429);
    assert_eq!(headers.get("retry-after").unwrap(), "7");
    api.ok("GET", "global/firewalls", None).await;

    let journal = api.gce.journal();
    let classes: Vec<(String, CallClass, u16)> = journal
        .iter()
        .map(|e| (e.method.clone(), e.class, e.status))
        .collect();
    assert_eq!(
        classes,
        [
            ("POST".to_string(), CallClass::Mutate, 200),
            ("GET".to_string(), CallClass::Read, 200),
            ("GET".to_string(), CallClass::Read, 503),
            ("GET".to_string(), CallClass::Read, 200),
            ("POST".to_string(), CallClass::Mutate, 403),
            ("GET".to_string(), CallClass::Read, 429),
            ("GET".to_string(), CallClass::Read, 200),
        ]
    );
    let (_, failed, _) = api.call("POST", "global/firewalls", None).await;
    assert!(failed["error"]["code"].is_number());
}

#[tokio::test]
async fn lists_filter_and_page() {
    let api = Api::start(nodes()).await;
    for i in 0..5 {
        api.ok(
            "POST",
            "global/httpHealthChecks",
            Some(json!({"name": format!("hc-{i}"), "port": 8000 + i})),
        )
        .await;
    }
    let page = api
        .ok("GET", "global/httpHealthChecks?maxResults=2", None)
        .await;
    assert_eq!(page["items"].as_array().unwrap().len(), 2);
    let token = page["nextPageToken"].as_str().unwrap().to_string();
    let rest = api
        .ok(
            "GET",
            &format!("global/httpHealthChecks?maxResults=10&pageToken={token}"),
            None,
        )
        .await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 3);
    assert!(rest.get("nextPageToken").is_none());
    let filtered = api
        .ok(
            "GET",
            "global/httpHealthChecks?filter=name%20eq%20hc-%5B13%5D",
            None,
        )
        .await;
    let names: Vec<&str> = filtered["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["hc-1", "hc-3"]);
    let zones = api
        .ok(
            "GET",
            "zones?filter=region%20eq%20.*%2Fregions%2Fus-central1",
            None,
        )
        .await;
    assert_eq!(zones["items"].as_array().unwrap().len(), 2);
    let instances = api
        .ok(
            "GET",
            "zones/us-central1-a/instances?filter=name%20eq%20n2",
            None,
        )
        .await;
    assert_eq!(instances["items"][0]["tags"]["items"], json!(["tag"]));
}

#[tokio::test]
async fn a_lost_response_still_performs_the_call() {
    let api = Api::start(nodes()).await;
    api.gce.inject(Fault::on(
        "POST",
        "/global/firewalls$",
        FaultResponse::LoseResponse(Some(ApiError::new(503, "backendError", "lost"))),
    ));
    let fw = json!({"name": "fw", "allowed": [{"IPProtocol": "tcp", "ports": ["80"]}]});
    let (status, _, _) = api.call("POST", "global/firewalls", Some(fw.clone())).await;
    assert_eq!(status, 503, "the client sees a failure");
    api.ok("GET", "global/firewalls/fw", None).await;
    let (status, reason, _) = api.err("POST", "global/firewalls", Some(fw)).await;
    assert_eq!(
        (status, reason.as_str()),
        (409, "alreadyExists"),
        "the retry meets the resource it made"
    );

    // A dropped connection: no answer at all, and the insert still happened.
    api.gce.inject(Fault::on(
        "POST",
        "/targetPools$",
        FaultResponse::LoseResponse(None),
    ));
    let url = format!(
        "{}/compute/v1/projects/mock-project/{R}/targetPools",
        api.gce.url()
    );
    let answer = api
        .http
        .post(url)
        .json(&json!({"name": "pool"}))
        .send()
        .await;
    let failed = match answer {
        Err(_) => true,
        Ok(response) => response.bytes().await.is_err(),
    };
    assert!(failed, "the client must not get an answer");
    api.ok("GET", &format!("{R}/targetPools/pool"), None).await;
}
