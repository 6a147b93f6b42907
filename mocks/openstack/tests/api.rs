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

const LBAAS: &str = "/load-balancer/v2/lbaas";
const NEUTRON: &str = "/networking/v2.0";

/// A settled load balancer with one TCP listener on 80 and its pool; (lb id, pool id).
async fn load_balancer(cloud: &MockOpenStack, token: &str) -> (String, String) {
    let (status, created) = call(
        cloud,
        Some(token),
        reqwest::Method::POST,
        &format!("{LBAAS}/loadbalancers"),
        Some(json!({"loadbalancer": {"name": "lb", "vip_subnet_id": PRIVATE_SUBNET_ID,
            "listeners": [{"name": "l80", "protocol": "TCP", "protocol_port": 80,
                "default_pool": {"name": "p80", "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN"}}]}})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let id = created["loadbalancer"]["id"].as_str().unwrap().to_string();
    assert_eq!(settle(cloud, token, &id).await, "ACTIVE");
    let pool = cloud.pools()[0]["id"].as_str().unwrap().to_string();
    (id, pool)
}

#[tokio::test]
async fn octavia_refuses_bodies_it_would_refuse_with_its_faultstring() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let token = token(&cloud).await;
    let (lb, pool) = load_balancer(&cloud, &token).await;
    let cases = [
        (
            "unknown attribute in a graph",
            reqwest::Method::POST,
            format!("{LBAAS}/loadbalancers"),
            json!({"loadbalancer": {"vip_subnet_id": PRIVATE_SUBNET_ID,
                "listeners": [{"protocol": "TCP", "protocol_port": 81, "colour": "red"}]}}),
            "Unknown attribute for argument load_balancer.loadbalancer.listeners: colour",
        ),
        (
            "a listener's protocol cannot be updated",
            reqwest::Method::PUT,
            format!(
                "{LBAAS}/listeners/{}",
                cloud.listeners()[0]["id"].as_str().unwrap()
            ),
            json!({"listener": {"protocol": "UDP"}}),
            "Unknown attribute for argument listener_.listener: protocol",
        ),
        (
            "bad listener protocol",
            reqwest::Method::POST,
            format!("{LBAAS}/listeners"),
            json!({"listener": {"loadbalancer_id": lb, "protocol": "tcp", "protocol_port": 82}}),
            "Invalid input for field/attribute protocol. Value: 'tcp'. Value should be one of:",
        ),
        (
            "bad lb_algorithm",
            reqwest::Method::PUT,
            format!("{LBAAS}/pools/{pool}"),
            json!({"pool": {"lb_algorithm": "RANDOM"}}),
            "Invalid input for field/attribute lb_algorithm. Value: 'RANDOM'. Value should be one of:",
        ),
        (
            "a UDP pool under a TCP listener",
            reqwest::Method::POST,
            format!("{LBAAS}/loadbalancers"),
            json!({"loadbalancer": {"vip_subnet_id": PRIVATE_SUBNET_ID,
                "listeners": [{"protocol": "TCP", "protocol_port": 81,
                    "default_pool": {"protocol": "UDP", "lb_algorithm": "ROUND_ROBIN"}}]}}),
            "Validation failure: The pool protocol 'UDP' is invalid while the listener protocol is 'TCP'.",
        ),
        (
            "a batch member with a pool_id",
            reqwest::Method::PUT,
            format!("{LBAAS}/pools/{pool}/members"),
            json!({"members": [{"address": "10.0.0.5", "protocol_port": 30080, "pool_id": pool}]}),
            "Unknown attribute for argument members_.members: pool_id",
        ),
    ];
    let before = (cloud.load_balancers().len(), cloud.members(&pool).len());
    for (what, method, path, body, want) in cases {
        let (status, answer) = call(&cloud, Some(&token), method, &path, Some(body)).await;
        assert_eq!(status, 400, "{what}: {answer}");
        assert_eq!(answer["faultcode"], "Client", "{what}");
        assert!(answer["debuginfo"].is_null(), "{what}");
        let fault = answer["faultstring"].as_str().unwrap();
        assert!(fault.starts_with(want), "{what}: {fault}");
    }
    assert_eq!(
        (cloud.load_balancers().len(), cloud.members(&pool).len()),
        before,
        "a refused body changed nothing"
    );
}

#[tokio::test]
async fn batch_member_update_converges_the_pool_and_honours_additive_only() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let token = token(&cloud).await;
    let (lb, pool) = load_balancer(&cloud, &token).await;
    let batch = |members: Value, additive: bool| {
        let cloud = &cloud;
        let token = &token;
        let pool = &pool;
        async move {
            let query = if additive { "?additive_only=true" } else { "" };
            call(
                cloud,
                Some(token),
                reqwest::Method::PUT,
                &format!("{LBAAS}/pools/{pool}/members{query}"),
                Some(json!({"members": members})),
            )
            .await
        }
    };
    let addresses = |cloud: &MockOpenStack| {
        let mut set: Vec<(String, u64, String)> = cloud
            .members(&pool)
            .iter()
            .map(|m| {
                (
                    m["address"].as_str().unwrap().to_string(),
                    m["protocol_port"].as_u64().unwrap(),
                    m["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        set.sort();
        set
    };
    let (status, _) = batch(
        json!([{"name": "a", "address": "10.0.0.5", "protocol_port": 30080},
               {"name": "b", "address": "10.0.0.6", "protocol_port": 30080}]),
        false,
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(settle(&cloud, &token, &lb).await, "ACTIVE");
    // Replace b by c and rename a: one call does all three.
    let (status, _) = batch(
        json!([{"name": "a2", "address": "10.0.0.5", "protocol_port": 30080},
               {"name": "c", "address": "10.0.0.7", "protocol_port": 30080}]),
        false,
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(settle(&cloud, &token, &lb).await, "ACTIVE");
    assert_eq!(
        addresses(&cloud),
        vec![
            ("10.0.0.5".into(), 30080, "a2".into()),
            ("10.0.0.7".into(), 30080, "c".into())
        ]
    );
    let (status, _) = batch(
        json!([{"name": "d", "address": "10.0.0.8", "protocol_port": 30080}]),
        true,
    )
    .await;
    assert_eq!(status, 202);
    assert_eq!(settle(&cloud, &token, &lb).await, "ACTIVE");
    assert_eq!(addresses(&cloud).len(), 3, "additive_only deletes nothing");
}

#[tokio::test]
async fn quotas_are_shown_and_enforced_as_octavia_and_neutron_answer() {
    let cloud = MockOpenStack::builder()
        .quota("listener", 1)
        .quota("member", 1)
        .quota("security_group", 1)
        .start()
        .await
        .unwrap();
    let token = token(&cloud).await;
    let (status, quota) = call(
        &cloud,
        Some(&token),
        reqwest::Method::GET,
        &format!("{LBAAS}/quotas/{}", kube_lb_mock_openstack::PROJECT_ID),
        None,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(quota["quota"]["listener"], 1);
    assert_eq!(quota["quota"]["load_balancer"], -1);
    let (lb, pool) = load_balancer(&cloud, &token).await;
    let (status, answer) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        &format!("{LBAAS}/listeners"),
        Some(json!({"listener": {"loadbalancer_id": lb, "protocol": "TCP", "protocol_port": 81}})),
    )
    .await;
    assert_eq!(status, 403, "Octavia's quota answer is 403: {answer}");
    assert_eq!(
        answer["faultstring"],
        "Quota has been met for resources: Listener"
    );
    let (status, answer) = call(
        &cloud,
        Some(&token),
        reqwest::Method::PUT,
        &format!("{LBAAS}/pools/{pool}/members"),
        Some(
            json!({"members": [{"address": "10.0.0.5", "protocol_port": 1},
                                {"address": "10.0.0.6", "protocol_port": 1}]}),
        ),
    )
    .await;
    assert_eq!(status, 403, "{answer}");
    assert!(cloud.members(&pool).is_empty(), "a refused batch adds none");

    let group = json!({"security_group": {"name": "g"}});
    let (status, _) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        &format!("{NEUTRON}/security-groups"),
        Some(group.clone()),
    )
    .await;
    assert_eq!(status, 201);
    let (status, answer) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        &format!("{NEUTRON}/security-groups"),
        Some(group),
    )
    .await;
    assert_eq!(status, 409, "Neutron's quota answer is 409: {answer}");
    assert_eq!(answer["NeutronError"]["type"], "OverQuota");
    let (_, quota) = call(
        &cloud,
        Some(&token),
        reqwest::Method::GET,
        &format!("{NEUTRON}/quotas/{}", kube_lb_mock_openstack::PROJECT_ID),
        None,
    )
    .await;
    assert_eq!(quota["quota"]["security_group"], 1);
    assert_eq!(quota["quota"]["floatingip"], -1);
}

#[tokio::test]
async fn neutron_security_groups_rules_ports_and_floating_ips_behave_as_neutron() {
    let cloud = MockOpenStack::builder()
        .server_port(
            kube_lb_mock_openstack::PRIVATE_NETWORK_ID,
            "server-1",
            "10.0.0.21",
        )
        .start()
        .await
        .unwrap();
    let token = token(&cloud).await;
    let post = |path: &'static str, body: Value| {
        let cloud = &cloud;
        let token = &token;
        async move {
            call(
                cloud,
                Some(token),
                reqwest::Method::POST,
                &format!("{NEUTRON}/{path}"),
                Some(body),
            )
            .await
        }
    };
    // The node port the builder seeded, found as OCCM finds it.
    let (_, ports) = call(
        &cloud,
        Some(&token),
        reqwest::Method::GET,
        &format!("{NEUTRON}/ports?device_id=server-1"),
        None,
    )
    .await;
    let node_port = ports["ports"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(ports["ports"][0]["fixed_ips"][0]["ip_address"], "10.0.0.21");
    let (_, networks) = call(
        &cloud,
        Some(&token),
        reqwest::Method::GET,
        &format!("{NEUTRON}/networks?router:external=true"),
        None,
    )
    .await;
    assert_eq!(
        networks["networks"][0]["id"],
        kube_lb_mock_openstack::PUBLIC_NETWORK_ID
    );

    let (status, group) = post(
        "security-groups",
        json!({"security_group": {"name": "lb-sg"}}),
    )
    .await;
    assert_eq!(status, 201);
    let group_id = group["security_group"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        group["security_group"]["security_group_rules"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "a new group allows egress"
    );
    let rule = json!({"security_group_rule": {"security_group_id": group_id, "direction": "ingress",
        "protocol": "tcp", "port_range_min": 30080, "port_range_max": 30080, "remote_ip_prefix": "10.0.0.0/24"}});
    assert_eq!(post("security-group-rules", rule.clone()).await.0, 201);
    let (status, duplicate) = post("security-group-rules", rule).await;
    assert_eq!(status, 409);
    assert_eq!(duplicate["NeutronError"]["type"], "SecurityGroupRuleExists");
    let refused = [
        (
            json!({"security_group_rule": {"security_group_id": group_id, "direction": "in"}}),
            "Invalid input for direction. Reason: 'in' is not in ['ingress', 'egress'].",
        ),
        (
            json!({"security_group_rule": {"security_group_id": group_id, "direction": "ingress",
                "port_range_min": 80, "port_range_max": 80}}),
            "Must also specify protocol if port range is given.",
        ),
        (
            json!({"security_group_rule": {"security_group_id": group_id, "direction": "ingress",
                "protocol": "tcp", "port_range_min": 90, "port_range_max": 80}}),
            "For TCP/UDP protocols, port_range_min must be <= port_range_max",
        ),
        (
            json!({"security_group_rule": {"security_group_id": group_id, "direction": "ingress",
                "ethertype": "IPv4", "remote_ip_prefix": "::/0"}}),
            "Conflicting value ethertype IPv4 for CIDR ::/0",
        ),
        (
            json!({"security_group_rule": {"security_group_id": group_id, "direction": "ingress",
                "portrange": 1}}),
            "Unrecognized attribute(s) 'portrange'",
        ),
    ];
    for (body, want) in refused {
        let (status, answer) = post("security-group-rules", body).await;
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["NeutronError"]["message"], want);
    }

    // A group in use by a port cannot go; detached, it can, with its rules.
    let (status, _) = call(
        &cloud,
        Some(&token),
        reqwest::Method::PUT,
        &format!("{NEUTRON}/ports/{node_port}"),
        Some(json!({"port": {"security_groups": [group_id]}})),
    )
    .await;
    assert_eq!(status, 200);
    // Ports filter by a group they carry (a list attribute matches when it holds the value).
    let carrying = |group: String| {
        let path = format!("{NEUTRON}/ports?security_groups={group}");
        let (cloud, token) = (&cloud, &token);
        async move {
            let (status, answer) =
                call(cloud, Some(token), reqwest::Method::GET, &path, None).await;
            assert_eq!(status, 200, "{answer}");
            answer["ports"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        carrying(group_id.to_string()).await,
        vec![node_port.to_string()]
    );
    assert!(carrying("no-such-group".into()).await.is_empty());
    let group_path = format!("{NEUTRON}/security-groups/{group_id}");
    let delete_group = || {
        call(
            &cloud,
            Some(&token),
            reqwest::Method::DELETE,
            &group_path,
            None,
        )
    };
    let (status, answer) = delete_group().await;
    assert_eq!(status, 409);
    assert_eq!(answer["NeutronError"]["type"], "SecurityGroupInUse");
    call(
        &cloud,
        Some(&token),
        reqwest::Method::PUT,
        &format!("{NEUTRON}/ports/{node_port}"),
        Some(json!({"port": {"security_groups": []}})),
    )
    .await;
    assert_eq!(delete_group().await.0, 204);
    assert!(cloud.security_groups().is_empty() && cloud.security_group_rules().is_empty());

    // A floating IP follows its port: associated to a new port, dissociated when it goes.
    let (status, port) = post(
        "ports",
        json!({"port": {"network_id": kube_lb_mock_openstack::PRIVATE_NETWORK_ID, "name": "vip"}}),
    )
    .await;
    assert_eq!(status, 201, "{port}");
    let port_id = port["port"]["id"].as_str().unwrap().to_string();
    let (status, fip) = post(
        "floatingips",
        json!({"floatingip": {"floating_network_id": kube_lb_mock_openstack::PUBLIC_NETWORK_ID,
            "port_id": port_id}}),
    )
    .await;
    assert_eq!(status, 201, "{fip}");
    assert_eq!(
        fip["floatingip"]["fixed_ip_address"],
        port["port"]["fixed_ips"][0]["ip_address"]
    );
    let (status, taken) = post(
        "floatingips",
        json!({"floatingip": {"floating_network_id": kube_lb_mock_openstack::PUBLIC_NETWORK_ID,
            "port_id": port_id}}),
    )
    .await;
    assert_eq!(status, 409, "{taken}");
    call(
        &cloud,
        Some(&token),
        reqwest::Method::DELETE,
        &format!("{NEUTRON}/ports/{port_id}"),
        None,
    )
    .await;
    let fips = cloud.floating_ips();
    assert_eq!(fips.len(), 1);
    assert!(fips[0]["port_id"].is_null(), "{fips:?}");
}

#[tokio::test]
async fn the_catalog_names_the_advertised_url() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    cloud.advertise_url("http://gateway.example:5000/");
    let body = json!({"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": USERNAME, "domain": {"name": "Default"}, "password": PASSWORD}}},
        "scope": {"project": {"name": PROJECT_NAME, "domain": {"name": "Default"}}}}});
    let document: Value = reqwest::Client::new()
        .post(format!("{}/auth/tokens", cloud.auth_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let urls: Vec<(String, String)> = document["token"]["catalog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|service| {
            (
                service["type"].as_str().unwrap().to_string(),
                service["endpoints"][0]["url"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        urls,
        vec![
            ("identity".into(), "http://gateway.example:5000/v3".into()),
            (
                "load-balancer".into(),
                "http://gateway.example:5000/load-balancer".into()
            ),
            (
                "network".into(),
                "http://gateway.example:5000/networking".into()
            ),
        ]
    );
}

#[tokio::test]
async fn a_lost_response_is_an_error_answer_to_a_call_that_took_effect() {
    let cloud = MockOpenStack::builder().start().await.unwrap();
    let token = token(&cloud).await;
    cloud.inject(kube_lb_mock_openstack::Fault::lose_response(
        "POST",
        "/floatingips",
        503,
        1,
    ));
    let path = "/networking/v2.0/floatingips";
    let body =
        json!({"floatingip": {"floating_network_id": kube_lb_mock_openstack::PUBLIC_NETWORK_ID}});
    let (status, answer) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        path,
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, 503);
    assert!(answer["NeutronError"]["message"].is_string(), "{answer}");
    assert_eq!(cloud.floating_ips().len(), 1, "the allocation happened");
    // Only once: the next call is answered as usual.
    let (status, answer) = call(
        &cloud,
        Some(&token),
        reqwest::Method::POST,
        path,
        Some(body),
    )
    .await;
    assert_eq!(status, 201, "{answer}");
    assert_eq!(cloud.floating_ips().len(), 2);
}

#[tokio::test]
async fn the_fixed_ips_port_filter_widens_when_repeated_and_narrows_by_subnet() {
    const OTHER_NETWORK: &str = "0e100000-0000-4000-8000-0000000000b1";
    const OTHER_SUBNET: &str = "0e100000-0000-4000-8000-0000000000b2";
    let private = kube_lb_mock_openstack::PRIVATE_NETWORK_ID;
    let cloud = MockOpenStack::builder()
        .network(OTHER_NETWORK, "other", false, OTHER_SUBNET, "10.1.0.0/24")
        .server_port(private, "server-1", "10.0.0.21")
        .server_port(private, "server-2", "10.0.0.22")
        .server_port(OTHER_NETWORK, "server-3", "10.1.0.23")
        .start()
        .await
        .unwrap();
    let token = token(&cloud).await;
    // (query, the devices of the ports listed)
    let cases = [
        ("fixed_ips=ip_address%3D10.0.0.21", vec!["server-1"]),
        (
            "fixed_ips=ip_address%3D10.0.0.21&fixed_ips=ip_address%3D10.1.0.23",
            vec!["server-1", "server-3"],
        ),
        (
            &*format!(
                "fixed_ips=ip_address%3D10.0.0.21&fixed_ips=ip_address%3D10.1.0.23&fixed_ips=subnet_id%3D{OTHER_SUBNET}"
            ),
            vec!["server-3"],
        ),
        (
            &*format!("fixed_ips=subnet_id%3D{PRIVATE_SUBNET_ID}"),
            vec!["server-1", "server-2"],
        ),
        ("fixed_ips=ip_address%3D10.9.9.9", vec![]),
        ("fixed_ips=mac_address%3Dfa:16:3e:00:00:02", vec![]),
        (
            "fixed_ips=ip_address%3D10.0.0.22&device_id=server-1",
            vec![],
        ),
    ];
    for (query, devices) in cases {
        let (status, listed) = call(
            &cloud,
            Some(&token),
            reqwest::Method::GET,
            &format!("{NEUTRON}/ports?{query}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{query}: {listed}");
        let mut listed: Vec<&str> = listed["ports"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["device_id"].as_str().unwrap())
            .collect();
        listed.sort();
        assert_eq!(listed, devices, "{query}");
    }
}
