//! The mock's wire behaviour as a plain HTTP client sees it.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use std::time::Duration;

use kube_lb_mock_openstack::{MockOpenStack, PASSWORD, PRIVATE_SUBNET_ID, PROJECT_NAME, USERNAME};
use serde_json::{Value, json};

async fn token(cloud: &MockOpenStack) -> String {
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": USERNAME, "domain": {"name": "Default"}, "password": PASSWORD}}},
        "scope": {"project": {"name": PROJECT_NAME, "domain": {"name": "Default"}}}}});
    let response = reqwest::Client::new()
        .post(format!("{}/auth/tokens", cloud.auth_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let token = response.headers()["x-subject-token"]
        .to_str()
        .unwrap()
        .to_string();
    let document: Value = response.json().await.unwrap();
    assert!(
        document["token"]["expires_at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    let catalog = document["token"]["catalog"].as_array().unwrap();
    let lb = catalog
        .iter()
        .find(|s| s["type"] == "load-balancer")
        .unwrap();
    assert_eq!(
        lb["endpoints"][0]["url"],
        format!("{}/load-balancer", cloud.url())
    );
    token
}

async fn call(
    cloud: &MockOpenStack,
    token: Option<&str>,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = reqwest::Client::new().request(method, format!("{}{path}", cloud.url()));
    if let Some(token) = token {
        request = request.header("x-auth-token", token);
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn tokens_are_required_and_checked() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let path = "/load-balancer/v2/lbaas/loadbalancers";
    assert_eq!(
        call(&cloud, None, reqwest::Method::GET, path, None).await.0,
        401
    );
    assert_eq!(
        call(&cloud, Some("forged"), reqwest::Method::GET, path, None)
            .await
            .0,
        401
    );
    let token = token(&cloud).await;
    assert_eq!(
        call(&cloud, Some(&token), reqwest::Method::GET, path, None)
            .await
            .0,
        200
    );
    cloud.expire_tokens();
    assert_eq!(
        call(&cloud, Some(&token), reqwest::Method::GET, path, None)
            .await
            .0,
        401
    );
    // Version discovery needs no token.
    let (status, versions) =
        call(&cloud, None, reqwest::Method::GET, "/load-balancer/", None).await;
    assert_eq!(status, 200);
    assert_eq!(
        versions["versions"].as_array().unwrap().last().unwrap()["status"],
        "CURRENT"
    );
}

/// Polls a load balancer until it leaves `PENDING_*`: its status, or `gone` after a delete.
async fn settle(cloud: &MockOpenStack, token: &str, id: &str) -> String {
    let path = format!("/load-balancer/v2/lbaas/loadbalancers/{id}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (status, shown) = call(cloud, Some(token), reqwest::Method::GET, &path, None).await;
        if status == 404 {
            return "gone".into();
        }
        let state = shown["loadbalancer"]["provisioning_status"]
            .as_str()
            .unwrap()
            .to_string();
        if !state.starts_with("PENDING_") || tokio::time::Instant::now() > deadline {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn changes_under_a_pending_load_balancer_get_409_and_delete_needs_cascade() {
    let cloud = MockOpenStack::builder()
        .provisioning_delay(Duration::from_millis(200))
        .start()
        .await
        .unwrap();
    let token = token(&cloud).await;
    let (status, created) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        "/load-balancer/v2/lbaas/loadbalancers",
        Some(
            json!({"loadbalancer": {"name": "lb", "vip_subnet_id": PRIVATE_SUBNET_ID,
            "listeners": [{"protocol": "TCP", "protocol_port": 80,
                "default_pool": {"protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                    "members": [{"address": "10.0.0.5", "protocol_port": 30080}]}}]}}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(
        created["loadbalancer"]["provisioning_status"],
        "PENDING_CREATE"
    );
    let id = created["loadbalancer"]["id"].as_str().unwrap();
    let listener =
        json!({"listener": {"loadbalancer_id": id, "protocol": "TCP", "protocol_port": 81}});
    let (status, refused) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        "/load-balancer/v2/lbaas/listeners",
        Some(listener.clone()),
    )
    .await;
    assert_eq!(status, 409);
    assert!(
        refused["faultstring"]
            .as_str()
            .unwrap()
            .contains("immutable")
    );
    assert_eq!(settle(&cloud, &token, id).await, "ACTIVE");
    let (status, _) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        "/load-balancer/v2/lbaas/listeners",
        Some(listener),
    )
    .await;
    assert_eq!(status, 201);
    assert_eq!(settle(&cloud, &token, id).await, "ACTIVE");
    let (status, _) = call(
        &cloud,
        Some(&token),
        reqwest::Method::DELETE,
        &format!("/load-balancer/v2/lbaas/loadbalancers/{id}"),
        None,
    )
    .await;
    assert_eq!(status, 400, "children without cascade");
    let (status, _) = call(
        &cloud,
        Some(&token),
        reqwest::Method::DELETE,
        &format!("/load-balancer/v2/lbaas/loadbalancers/{id}?cascade=true"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    assert_eq!(settle(&cloud, &token, id).await, "gone");
    assert!(
        cloud.load_balancers().is_empty()
            && cloud.listeners().is_empty()
            && cloud.ports().is_empty()
    );
}
