//! The mock enforces what ARM enforces, checked over real HTTP without the provider.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use kube_lb_mock_azure::{
    ArmError, CLIENT_ID, CLIENT_SECRET, Fault, MockArm, Quotas, SUBSCRIPTION, TENANT,
};
use reqwest::StatusCode;
use serde_json::{Value, json};

const RG: &str = "rg";

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

async fn setup(builder: kube_lb_mock_azure::MockArmBuilder) -> (MockArm, Client) {
    let arm = builder
        .subnet(RG, "vnet", "10.0.0.0/16", "nodes", "10.0.1.0/24")
        .security_group(RG, "nsg")
        .start()
        .await
        .unwrap();
    let http = reqwest::Client::new();
    let token: Value = http
        .post(format!("{}/{TENANT}/oauth2/v2.0/token", arm.url()))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", CLIENT_ID),
            ("client_secret", CLIENT_SECRET),
            ("scope", "https://management.azure.com/.default"),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let client = Client {
        http,
        base: arm.url(),
        token: token["access_token"].as_str().unwrap().to_string(),
    };
    (arm, client)
}

fn path(collection: &str, name: &str) -> String {
    format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/{collection}/{name}"
    )
}

struct Answer {
    status: StatusCode,
    headers: reqwest::header::HeaderMap,
    body: Value,
}

impl Answer {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

impl Client {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}?api-version=2024-03-01", self.base)
        };
        let mut request = self.http.request(method, url).bearer_auth(&self.token);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        Answer {
            status,
            headers,
            body: serde_json::from_str(&text).unwrap_or(Value::Null),
        }
    }

    async fn put(&self, path: &str, body: Value) -> Answer {
        self.call(reqwest::Method::PUT, path, Some(body), &[]).await
    }

    async fn get(&self, path: &str) -> Answer {
        self.call(reqwest::Method::GET, path, None, &[]).await
    }

    async fn delete(&self, path: &str) -> Answer {
        self.call(reqwest::Method::DELETE, path, None, &[]).await
    }

    /// Polls an `Azure-AsyncOperation` URL until it leaves `InProgress`.
    async fn finish(&self, answer: &Answer) -> String {
        let url = answer.headers["azure-asyncoperation"]
            .to_str()
            .unwrap()
            .to_string();
        for _ in 0..10 {
            let status = self.get(&url).await.body["status"]
                .as_str()
                .unwrap()
                .to_string();
            if status != "InProgress" {
                return status;
            }
        }
        panic!("operation never finished");
    }
}

fn pip_body() -> Value {
    json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {"publicIPAllocationMethod": "Static"}})
}

fn lb_body(pip_id: &str) -> Value {
    let lb = path("loadBalancers", "kubernetes");
    json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {
        "frontendIPConfigurations": [{"name": "fe", "properties": {"publicIPAddress": {"id": pip_id}}}],
        "backendAddressPools": [{"name": "kubernetes"}],
        "probes": [{"name": "fe-TCP-80", "properties": {"protocol": "Tcp", "port": 30080, "intervalInSeconds": 5}}],
        "loadBalancingRules": [{"name": "fe-TCP-80", "properties": {
            "protocol": "Tcp", "frontendPort": 80, "backendPort": 80,
            "frontendIPConfiguration": {"id": format!("{lb}/frontendIPConfigurations/fe")},
            "backendAddressPool": {"id": format!("{lb}/backendAddressPools/kubernetes")},
            "probe": {"id": format!("{lb}/probes/fe-TCP-80")}}}]}})
}

#[tokio::test]
async fn api_version_and_a_valid_token_are_required() {
    let (arm, c) = setup(MockArm::builder()).await;
    let no_version = c
        .http
        .get(format!("{}{}", c.base, path("publicIPAddresses", "x")))
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap();
    assert_eq!(no_version.status(), StatusCode::BAD_REQUEST);
    let body: Value = no_version.json().await.unwrap();
    assert_eq!(body["error"]["code"], "MissingApiVersionParameter");
    let anonymous = c
        .http
        .get(format!(
            "{}{}?api-version=2024-03-01",
            c.base,
            path("publicIPAddresses", "x")
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let wrong_secret = c
        .http
        .post(format!("{}/{TENANT}/oauth2/v2.0/token", c.base))
        .form(&[
            ("grant_type", "client_credentials"),
            ("client_id", CLIENT_ID),
            ("client_secret", "nope"),
            ("scope", "x/.default"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_secret.status(), StatusCode::UNAUTHORIZED);
    assert!(
        arm.journal()
            .iter()
            .all(|e| e.body.is_none() || !e.path.contains("oauth2")),
        "secrets are not journaled"
    );
    assert_eq!(
        c.get(&path("publicIPAddresses", "x")).await.status,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn writes_are_async_operations_with_provisioning_states() {
    let (arm, c) = setup(MockArm::builder().lro_polls(2)).await;
    let created = c.put(&path("publicIPAddresses", "pip"), pip_body()).await;
    assert_eq!(created.status, StatusCode::CREATED);
    assert_eq!(created.body["properties"]["provisioningState"], "Updating");
    assert_eq!(created.headers["retry-after"], "0");
    assert_eq!(c.finish(&created).await, "Succeeded");
    let pip = c.get(&path("publicIPAddresses", "pip")).await.body;
    assert_eq!(pip["properties"]["provisioningState"], "Succeeded");
    assert!(pip["properties"]["ipAddress"].as_str().is_some());
    assert!(pip["etag"].as_str().unwrap().starts_with("W/\""));

    let deleting = c.delete(&path("publicIPAddresses", "pip")).await;
    assert_eq!(deleting.status, StatusCode::ACCEPTED);
    assert!(deleting.headers.contains_key("location"));
    assert_eq!(
        c.get(&path("publicIPAddresses", "pip")).await.body["properties"]["provisioningState"],
        "Deleting"
    );
    assert_eq!(c.finish(&deleting).await, "Succeeded");
    assert!(arm.public_ip(RG, "pip").is_none());
    assert_eq!(
        c.delete(&path("publicIPAddresses", "pip")).await.status,
        StatusCode::NO_CONTENT
    );
}

#[tokio::test]
async fn etags_guard_every_write() {
    let (_arm, c) = setup(MockArm::builder().lro_polls(0)).await;
    let p = path("publicIPAddresses", "pip");
    c.put(&p, pip_body()).await;
    let etag = c.get(&p).await.body["etag"].as_str().unwrap().to_string();
    let stale = "W/\"00000000-0000-0000-0000-000000000000\"";
    let refused = c
        .call(
            reqwest::Method::PUT,
            &p,
            Some(pip_body()),
            &[("if-match", stale)],
        )
        .await;
    assert_eq!(refused.status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(refused.code(), "PreconditionFailed");
    assert_eq!(
        refused.body["error"]["details"][0]["code"],
        "PreconditionFailedEtagMismatch"
    );
    let accepted = c
        .call(
            reqwest::Method::PUT,
            &p,
            Some(pip_body()),
            &[("if-match", &etag)],
        )
        .await;
    assert_eq!(accepted.status, StatusCode::OK);
    assert_ne!(
        c.get(&p).await.body["etag"].as_str().unwrap(),
        etag,
        "a write changes the etag"
    );
    let exists = c
        .call(
            reqwest::Method::PUT,
            &p,
            Some(pip_body()),
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(exists.status, StatusCode::PRECONDITION_FAILED);
}

#[tokio::test]
async fn referential_integrity_between_load_balancers_and_public_ips() {
    let (arm, c) = setup(MockArm::builder().lro_polls(0)).await;
    let pip_id = path("publicIPAddresses", "pip");
    let missing = c
        .put(&path("loadBalancers", "kubernetes"), lb_body(&pip_id))
        .await;
    assert_eq!(missing.status, StatusCode::BAD_REQUEST);
    assert_eq!(missing.code(), "InvalidResourceReference");

    c.put(&pip_id, pip_body()).await;
    let lb = c
        .put(&path("loadBalancers", "kubernetes"), lb_body(&pip_id))
        .await;
    assert_eq!(lb.status, StatusCode::CREATED, "{}", lb.body);
    let pip = arm.public_ip(RG, "pip").unwrap();
    assert!(
        pip["properties"]["ipConfiguration"]["id"]
            .as_str()
            .unwrap()
            .ends_with("/frontendIPConfigurations/fe")
    );
    let stored = arm.load_balancer(RG, "kubernetes").unwrap();
    assert_eq!(
        stored["properties"]["probes"][0]["properties"]["loadBalancingRules"][0]["id"],
        stored["properties"]["loadBalancingRules"][0]["id"]
    );

    let in_use = c.delete(&pip_id).await;
    assert_eq!(in_use.status, StatusCode::BAD_REQUEST);
    assert_eq!(in_use.code(), "PublicIPAddressCannotBeDeleted");

    let second = c
        .put(
            &path("loadBalancers", "other"),
            lb_body(&pip_id)
                .to_string()
                .replace("loadBalancers/kubernetes", "loadBalancers/other")
                .parse()
                .unwrap(),
        )
        .await;
    assert_eq!(second.code(), "PublicIPAddressInUse");

    let mut dangling = lb_body(&pip_id);
    dangling["properties"]["loadBalancingRules"][0]["properties"]["probe"]["id"] = json!(format!(
        "{}/probes/nope",
        path("loadBalancers", "kubernetes")
    ));
    assert_eq!(
        c.put(&path("loadBalancers", "kubernetes"), dangling)
            .await
            .code(),
        "InvalidResourceReference"
    );

    c.delete(&path("loadBalancers", "kubernetes")).await;
    assert!(
        arm.public_ip(RG, "pip").unwrap()["properties"]
            .get("ipConfiguration")
            .is_none()
    );
    assert_eq!(c.delete(&pip_id).await.status, StatusCode::ACCEPTED);
}

#[tokio::test]
async fn bodies_are_validated_like_the_real_api() {
    let (_arm, c) = setup(MockArm::builder().lro_polls(0)).await;
    let pip_id = path("publicIPAddresses", "pip");
    c.put(&pip_id, pip_body()).await;
    let lb = path("loadBalancers", "kubernetes");
    type Mutation = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "protocol enum",
            Box::new(|b| {
                b["properties"]["loadBalancingRules"][0]["properties"]["protocol"] = json!("TCP")
            }),
            "InvalidRequestFormat",
        ),
        (
            "port range",
            Box::new(|b| {
                b["properties"]["loadBalancingRules"][0]["properties"]["frontendPort"] =
                    json!(70000)
            }),
            "InvalidRequestFormat",
        ),
        (
            "probe interval",
            Box::new(|b| {
                b["properties"]["probes"][0]["properties"]["intervalInSeconds"] = json!(2)
            }),
            "InvalidRequestFormat",
        ),
        (
            "sku enum",
            Box::new(|b| b["sku"]["name"] = json!("Premium")),
            "InvalidRequestFormat",
        ),
        (
            "missing location",
            Box::new(|b| {
                b.as_object_mut().unwrap().remove("location");
            }),
            "LocationRequired",
        ),
        (
            "http probe without path",
            Box::new(|b| b["properties"]["probes"][0]["properties"]["protocol"] = json!("Http")),
            "ProbeRequestPathRequired",
        ),
        (
            "idle timeout",
            Box::new(|b| {
                b["properties"]["loadBalancingRules"][0]["properties"]["idleTimeoutInMinutes"] =
                    json!(120)
            }),
            "InvalidRequestFormat",
        ),
        (
            "child name",
            Box::new(|b| b["properties"]["probes"][0]["name"] = json!("-bad")),
            "InvalidResourceName",
        ),
    ];
    for (what, mutate, code) in cases {
        let mut body = lb_body(&pip_id);
        mutate(&mut body);
        let answer = c.put(&lb, body).await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::BAD_REQUEST, code),
            "{what}: {}",
            answer.body
        );
    }
    let bad_name = c
        .put(&path("loadBalancers", "bad name!"), lb_body(&pip_id))
        .await;
    assert_eq!(bad_name.code(), "InvalidResourceName");
    let dynamic_standard = c
        .put(&path("publicIPAddresses", "dyn"), json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {"publicIPAllocationMethod": "Dynamic"}}))
        .await;
    assert_eq!(dynamic_standard.status, StatusCode::BAD_REQUEST);
    let nsg = path("networkSecurityGroups", "nsg");
    let rule = |prio: u32| {
        json!({"name": format!("r{prio}"), "properties": {"protocol": "Tcp", "access": "Allow", "direction": "Inbound",
        "priority": 500, "sourcePortRange": "*", "destinationPortRange": "80", "sourceAddressPrefix": "Internet", "destinationAddressPrefix": "20.0.0.1"}})
    };
    let clash = c
        .put(
            &nsg,
            json!({"location": "eastus", "properties": {"securityRules": [rule(1), rule(2)]}}),
        )
        .await;
    assert_eq!(clash.code(), "SecurityRuleConflict");
}

#[tokio::test]
async fn internal_frontends_get_addresses_from_their_subnet() {
    let (arm, c) = setup(MockArm::builder().lro_polls(0)).await;
    let subnet = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
    );
    let fe = |name: &str, ip: Option<&str>| {
        let mut props = json!({"subnet": {"id": subnet}, "privateIPAllocationMethod": if ip.is_some() { "Static" } else { "Dynamic" }});
        if let Some(ip) = ip {
            props["privateIPAddress"] = json!(ip);
        }
        json!({"name": name, "properties": props})
    };
    let body = |fes: Vec<Value>| json!({"location": "eastus", "sku": {"name": "Standard"}, "properties": {"frontendIPConfigurations": fes}});
    let ok = c
        .put(
            &path("loadBalancers", "k-internal"),
            body(vec![fe("a", None), fe("b", Some("10.0.1.50"))]),
        )
        .await;
    assert_eq!(ok.status, StatusCode::CREATED, "{}", ok.body);
    let lb = arm.load_balancer(RG, "k-internal").unwrap();
    assert_eq!(
        lb["properties"]["frontendIPConfigurations"][0]["properties"]["privateIPAddress"],
        "10.0.1.4"
    );
    let outside = c
        .put(
            &path("loadBalancers", "k-internal"),
            body(vec![fe("a", None), fe("b", Some("10.9.0.5"))]),
        )
        .await;
    assert_eq!(outside.code(), "PrivateIPAddressNotInSubnet");
    let taken = c
        .put(
            &path("loadBalancers", "k-internal"),
            body(vec![
                fe("a", None),
                fe("b", Some("10.0.1.50")),
                fe("c", Some("10.0.1.50")),
            ]),
        )
        .await;
    assert_eq!(taken.status, StatusCode::BAD_REQUEST);
    let missing_subnet = c
        .put(&path("loadBalancers", "x"), json!({"location": "eastus", "properties": {"frontendIPConfigurations": [{"name": "a", "properties": {"subnet": {"id": format!("{subnet}x")}}}]}}))
        .await;
    assert_eq!(missing_subnet.code(), "InvalidResourceReference");
}

/// Azure hands a dynamic frontend the lowest address of its subnet that nothing holds: not
/// the five it reserves, not a NIC's (the nodes behind the load balancer have theirs there),
/// not another frontend's. A static request for a held address fails as ARM fails it.
#[tokio::test]
async fn dynamic_frontends_skip_nic_and_frontend_addresses_and_static_ones_are_refused() {
    let builder = MockArm::builder()
        .lro_polls(0)
        .network_interface(RG, "node-0-nic", "vnet", "nodes", "10.0.1.4")
        .network_interface(RG, "node-1-nic", "vnet", "nodes", "10.0.1.5");
    let (arm, c) = setup(builder).await;
    let subnet = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/vnet/subnets/nodes"
    );
    let nic = c.get(&path("networkInterfaces", "node-0-nic")).await;
    assert_eq!(nic.status, StatusCode::OK, "{}", nic.body);
    let config = &nic.body["properties"]["ipConfigurations"][0];
    assert_eq!(config["properties"]["privateIPAddress"], "10.0.1.4");
    let fixture = c
        .put(&path("networkInterfaces", "mine"), nic.body.clone())
        .await;
    assert_eq!(fixture.status, StatusCode::METHOD_NOT_ALLOWED);

    let lb = |ip: Option<&str>| {
        let mut props = json!({"subnet": {"id": subnet}, "privateIPAllocationMethod": if ip.is_some() { "Static" } else { "Dynamic" }});
        if let Some(ip) = ip {
            props["privateIPAddress"] = json!(ip);
        }
        json!({"location": "eastus", "sku": {"name": "Standard"},
            "properties": {"frontendIPConfigurations": [{"name": "fe", "properties": props}]}})
    };
    let address = |name: &str| {
        arm.load_balancer(RG, name).unwrap()["properties"]["frontendIPConfigurations"][0]
            ["properties"]["privateIPAddress"]
            .clone()
    };
    let first = c.put(&path("loadBalancers", "first"), lb(None)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_eq!(
        address("first"),
        "10.0.1.6",
        "past the reserved .0-.3 and both NICs"
    );
    let second = c.put(&path("loadBalancers", "second"), lb(None)).await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert_eq!(
        address("second"),
        "10.0.1.7",
        "past the first load balancer's frontend"
    );

    let nic_address = c
        .put(&path("loadBalancers", "static"), lb(Some("10.0.1.4")))
        .await;
    assert_eq!(
        (nic_address.status, nic_address.code()),
        (StatusCode::BAD_REQUEST, "PrivateIPAddressIsAllocated"),
        "{}",
        nic_address.body
    );
    let holder = config["id"].as_str().unwrap();
    assert!(
        nic_address.body["error"]["message"]
            .as_str()
            .unwrap()
            .ends_with(&format!("already allocated to resource {holder}.")),
        "{}",
        nic_address.body
    );
    let frontend_address = c
        .put(&path("loadBalancers", "static"), lb(Some("10.0.1.7")))
        .await;
    assert_eq!(frontend_address.code(), "PrivateIPAddressIsAllocated");
    for reserved in ["10.0.1.0", "10.0.1.1", "10.0.1.3", "10.0.1.255"] {
        let answer = c
            .put(&path("loadBalancers", "static"), lb(Some(reserved)))
            .await;
        assert_eq!(
            (answer.status, answer.code()),
            (StatusCode::BAD_REQUEST, "PrivateIPAddressInReservedRange"),
            "{reserved}: {}",
            answer.body
        );
    }
    let free = c
        .put(&path("loadBalancers", "static"), lb(Some("10.0.1.254")))
        .await;
    assert_eq!(free.status, StatusCode::CREATED, "{}", free.body);
}

#[tokio::test]
async fn quotas_throttling_and_failed_operations() {
    let (arm, c) = setup(MockArm::builder().lro_polls(0).quotas(Quotas {
        public_ips: 1,
        ..Quotas::default()
    }))
    .await;
    assert_eq!(
        c.put(&path("publicIPAddresses", "one"), pip_body())
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(
        c.put(&path("publicIPAddresses", "two"), pip_body())
            .await
            .code(),
        "PublicIPCountLimitReached"
    );

    arm.inject(Fault::throttle("GET", "/publicIPAddresses/one", 7, 1));
    let throttled = c.get(&path("publicIPAddresses", "one")).await;
    assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(throttled.headers["retry-after"], "7");
    assert_eq!(
        c.get(&path("publicIPAddresses", "one")).await.status,
        StatusCode::OK,
        "fault fired once"
    );

    arm.inject(Fault {
        method: Some("LRO-PUT".into()),
        path_contains: "/publicIPAddresses/one".into(),
        skip: 0,
        times: 1,
        action: kube_lb_mock_azure::FaultAction::FailOperation(ArmError::bad_request(
            "InternalError",
            "it broke",
        )),
    });
    arm.set_lro_polls(1);
    let put = c.put(&path("publicIPAddresses", "one"), pip_body()).await;
    assert_eq!(c.finish(&put).await, "Failed");
    assert_eq!(
        arm.public_ip(RG, "one").unwrap()["properties"]["provisioningState"],
        "Failed"
    );
    assert_eq!(arm.pending_faults(), 0);
}

#[tokio::test]
async fn child_writes_change_the_parent_etag() {
    let (arm, c) = setup(MockArm::builder().lro_polls(0)).await;
    let pip_id = path("publicIPAddresses", "pip");
    c.put(&pip_id, pip_body()).await;
    c.put(&path("loadBalancers", "kubernetes"), lb_body(&pip_id))
        .await;
    let before = arm.load_balancer(RG, "kubernetes").unwrap()["etag"].clone();
    let vnet = format!(
        "/subscriptions/{SUBSCRIPTION}/resourceGroups/{RG}/providers/Microsoft.Network/virtualNetworks/vnet"
    );
    let pool = format!(
        "{}/backendAddressPools/kubernetes",
        path("loadBalancers", "kubernetes")
    );
    let members = json!({"properties": {"loadBalancerBackendAddresses": [
        {"name": "node-1", "properties": {"ipAddress": "10.0.1.10", "virtualNetwork": {"id": vnet}}}]}});
    let put = c.put(&pool, members.clone()).await;
    assert_eq!(put.status, StatusCode::OK, "{}", put.body);
    let lb = arm.load_balancer(RG, "kubernetes").unwrap();
    assert_ne!(lb["etag"], before);
    assert_eq!(
        lb["properties"]["backendAddressPools"][0]["properties"]["loadBalancerBackendAddresses"][0]
            ["name"],
        "node-1"
    );
    let mut bad = members;
    bad["properties"]["loadBalancerBackendAddresses"][0]["properties"]["virtualNetwork"]["id"] =
        json!(format!("{vnet}-missing"));
    assert_eq!(c.put(&pool, bad).await.code(), "InvalidResourceReference");
    assert_eq!(
        c.get(&format!(
            "{}/probes/fe-TCP-80",
            path("loadBalancers", "kubernetes")
        ))
        .await
        .status,
        StatusCode::OK
    );

    let rule = format!(
        "{}/securityRules/allow-web",
        path("networkSecurityGroups", "nsg")
    );
    let body = json!({"properties": {"protocol": "Tcp", "access": "Allow", "direction": "Inbound", "priority": 500,
        "sourcePortRange": "*", "destinationPortRange": "80", "sourceAddressPrefix": "Internet", "destinationAddressPrefix": "*"}});
    assert_eq!(c.put(&rule, body).await.status, StatusCode::CREATED);
    let nsg = arm.security_group(RG, "nsg").unwrap();
    assert_eq!(nsg["properties"]["securityRules"][0]["name"], "allow-web");
    assert_eq!(
        nsg["properties"]["defaultSecurityRules"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
    assert_eq!(c.delete(&rule).await.status, StatusCode::ACCEPTED);
    assert!(
        arm.security_group(RG, "nsg").unwrap()["properties"]["securityRules"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_lost_response_still_applies_the_write() {
    // lro_polls 3: the operation would still run if the mock waited for a poll nobody sends.
    let (arm, c) = setup(MockArm::builder().lro_polls(3)).await;
    let pip = path("publicIPAddresses", "lost");
    arm.inject(Fault::lose_response(
        "PUT",
        "/publicIPAddresses/lost",
        Some(ArmError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalServerError",
            "lost",
        )),
        1,
    ));
    let put = c.put(&pip, pip_body()).await;
    assert_eq!(put.status, StatusCode::INTERNAL_SERVER_ERROR);
    let stored = arm.public_ip(RG, "lost").expect("the PUT took effect");
    assert_eq!(
        stored["properties"]["provisioningState"], "Succeeded",
        "its operation finished without being polled"
    );
    // A retry of the same create-only PUT now meets the resource it made.
    let retry = c
        .call(
            reqwest::Method::PUT,
            &pip,
            Some(pip_body()),
            &[("if-none-match", "*")],
        )
        .await;
    assert_eq!(retry.status, StatusCode::PRECONDITION_FAILED);

    // A dropped connection: the client gets no answer at all, the write still lands.
    arm.inject(Fault::lose_response(
        "PUT",
        "/publicIPAddresses/dropped",
        None,
        1,
    ));
    let dropped = c
        .http
        .put(format!(
            "{}{}?api-version=2024-03-01",
            c.base,
            path("publicIPAddresses", "dropped")
        ))
        .bearer_auth(&c.token)
        .json(&pip_body())
        .send()
        .await;
    let failed = match dropped {
        Err(_) => true,
        Ok(response) => response.bytes().await.is_err(),
    };
    assert!(failed, "the client must not see an answer");
    assert!(arm.public_ip(RG, "dropped").is_some());
    assert_eq!(arm.pending_faults(), 0);
}

#[tokio::test]
async fn operations_nobody_polls_finish_on_their_own() {
    let (arm, c) = setup(MockArm::builder().lro_polls(100)).await;
    arm.set_operation_deadline(std::time::Duration::ZERO);
    let put = c
        .put(&path("publicIPAddresses", "unpolled"), pip_body())
        .await;
    assert_eq!(put.status, StatusCode::CREATED);
    // The next request to the mock (whatever it is) finds the operation over.
    let got = c.get(&path("publicIPAddresses", "unpolled")).await;
    assert_eq!(got.body["properties"]["provisioningState"], "Succeeded");
}
