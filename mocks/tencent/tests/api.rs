//! The mock as a client sees it: signature and timestamp checks, the task model, busy CLBs,
//! limits, body validation, pagination and faults.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kube_lb_mock_tencent::{
    Fault, MockTencent, Quotas, REGION, SECRET_ID, SECRET_KEY, SUBNET_ID, VPC_VERSION,
    authorization_header, expected_signature, utc_date,
};
use serde_json::{Value, json};

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or_default()
}

/// Sends one signed request; `tamper` edits the body after signing, `skew` moves the timestamp.
async fn call_with(
    cloud: &MockTencent,
    action: &str,
    body: &Value,
    secret_key: &str,
    skew: i64,
    tamper: bool,
) -> Value {
    let bytes = serde_json::to_vec(body).expect("json");
    let timestamp = now() + skew;
    let authorization = authorization_header(
        SECRET_ID,
        secret_key,
        "application/json",
        &cloud.host(),
        &bytes,
        timestamp,
    );
    let sent = if tamper {
        let mut changed = bytes.clone();
        changed.push(b' ');
        changed
    } else {
        bytes
    };
    let response = reqwest::Client::new()
        .post(cloud.url())
        .header("content-type", "application/json")
        .header("authorization", authorization)
        .header("x-tc-action", action)
        .header("x-tc-version", "2018-03-17")
        .header("x-tc-region", REGION)
        .header("x-tc-timestamp", timestamp.to_string())
        .body(sent)
        .send()
        .await
        .expect("send");
    assert_eq!(
        response.status(),
        200,
        "Tencent answers errors with HTTP 200"
    );
    let document: Value = response.json().await.expect("json answer");
    assert!(document["Response"]["RequestId"].is_string(), "{document}");
    document["Response"].clone()
}

async fn call(cloud: &MockTencent, action: &str, body: Value) -> Value {
    call_with(cloud, action, &body, SECRET_KEY, 0, false).await
}

fn code(response: &Value) -> &str {
    response["Error"]["Code"].as_str().unwrap_or("")
}

async fn create_public(cloud: &MockTencent) -> String {
    let created = call(
        cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "OPEN", "Tags": [{"TagKey": "tke-createdBy-flag", "TagValue": "yes"}]}),
    )
    .await;
    assert_eq!(code(&created), "", "{created}");
    created["LoadBalancerIds"][0]
        .as_str()
        .expect("id")
        .to_string()
}

#[tokio::test]
async fn refuses_bad_signatures_stale_timestamps_and_unknown_keys() {
    let cloud = MockTencent::builder().start().await.expect("mock");
    let body = json!({"Limit": 1});
    let cases = [
        ("right key", SECRET_KEY, 0, false, ""),
        (
            "wrong key",
            "not-the-key",
            0,
            false,
            "AuthFailure.SignatureFailure",
        ),
        (
            "body changed after signing",
            SECRET_KEY,
            0,
            true,
            "AuthFailure.SignatureFailure",
        ),
        (
            "ten minutes old",
            SECRET_KEY,
            -600,
            false,
            "AuthFailure.SignatureExpire",
        ),
        (
            "ten minutes ahead",
            SECRET_KEY,
            600,
            false,
            "AuthFailure.SignatureExpire",
        ),
    ];
    for (what, key, skew, tamper, want) in cases {
        let answer = call_with(&cloud, "DescribeLoadBalancers", &body, key, skew, tamper).await;
        assert_eq!(code(&answer), want, "{what}: {answer}");
    }
    let refused = cloud.journal().iter().filter(|e| e.error.is_some()).count();
    assert_eq!(refused, 4, "every refused request is journaled");
}

#[tokio::test]
async fn async_tasks_run_then_finish_and_busy_clbs_refuse_writes() {
    let cloud = MockTencent::builder()
        .task_delay(Duration::from_millis(300))
        .start()
        .await
        .expect("mock");
    let created = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "OPEN"}),
    )
    .await;
    let lb = created["LoadBalancerIds"][0]
        .as_str()
        .expect("id")
        .to_string();
    let task = created["RequestId"]
        .as_str()
        .expect("request id")
        .to_string();
    let status = call(&cloud, "DescribeTaskStatus", json!({"TaskId": task})).await;
    assert_eq!(status["Status"], 2, "running: {status}");
    let described = call(
        &cloud,
        "DescribeLoadBalancers",
        json!({"LoadBalancerIds": [lb]}),
    )
    .await;
    assert_eq!(
        described["LoadBalancerSet"][0]["Status"], 0,
        "still creating"
    );
    let busy = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Ports": [80], "Protocol": "TCP"}),
    )
    .await;
    assert_eq!(code(&busy), "FailedOperation.ResourceInOperating", "{busy}");
    // Wait for the task with the API itself, as a client must.
    let mut finished = false;
    for _ in 0..50 {
        let status = call(&cloud, "DescribeTaskStatus", json!({"TaskId": task})).await;
        if status["Status"] == 0 {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(finished, "the task ends");
    let described = call(
        &cloud,
        "DescribeLoadBalancers",
        json!({"LoadBalancerIds": [lb]}),
    )
    .await;
    assert_eq!(described["LoadBalancerSet"][0]["Status"], 1);
    assert_eq!(
        described["LoadBalancerSet"][0]["LoadBalancerVips"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
}

#[tokio::test]
async fn enforces_target_limits_ports_quotas_and_known_parameters() {
    let cloud = MockTencent::builder()
        .quotas(Quotas {
            public_load_balancers: 1,
            ..Quotas::default()
        })
        .start()
        .await
        .expect("mock");
    let lb = create_public(&cloud).await;
    let over_quota = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "OPEN"}),
    )
    .await;
    assert_eq!(code(&over_quota), "LimitExceeded");
    let internal_without_subnet = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "INTERNAL"}),
    )
    .await;
    assert_eq!(code(&internal_without_subnet), "MissingParameter");
    let unknown = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "INTERNAL", "SubnetId": SUBNET_ID, "Colour": "blue"}),
    )
    .await;
    assert_eq!(code(&unknown), "UnknownParameter", "{unknown}");
    let bandwidth = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "INTERNAL", "SubnetId": SUBNET_ID,
               "InternetAccessible": {"InternetMaxBandwidthOut": 4096}}),
    )
    .await;
    assert_eq!(code(&bandwidth), "InvalidParameterValue", "{bandwidth}");
    let listener = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Ports": [80, 443], "Protocol": "TCP", "ListenerNames": ["a", "b"]}),
    )
    .await;
    let listener_id = listener["ListenerIds"][0]
        .as_str()
        .expect("listener")
        .to_string();
    let clash = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Ports": [80], "Protocol": "TCP"}),
    )
    .await;
    assert_eq!(code(&clash), "InvalidParameter.PortCheckFailed");
    let udp_same_port = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Ports": [80], "Protocol": "UDP"}),
    )
    .await;
    assert_eq!(code(&udp_same_port), "", "TCP and UDP may share a port");
    let targets = |n: usize| -> Vec<Value> {
        (0..n)
            .map(|i| json!({"EniIp": format!("10.0.0.{}", i % 250 + 1), "Port": 30000 + i}))
            .collect()
    };
    let too_many = call(
        &cloud,
        "RegisterTargets",
        json!({"LoadBalancerId": lb, "ListenerId": listener_id, "Targets": targets(21)}),
    )
    .await;
    assert_eq!(code(&too_many), "LimitExceeded");
    let twenty = call(
        &cloud,
        "RegisterTargets",
        json!({"LoadBalancerId": lb, "ListenerId": listener_id, "Targets": targets(20)}),
    )
    .await;
    assert_eq!(code(&twenty), "");
    let batch: Vec<Value> = (0..501)
        .map(|i| json!({"ListenerId": listener_id, "EniIp": "10.0.9.9", "Port": 1 + i}))
        .collect();
    let too_big = call(
        &cloud,
        "BatchRegisterTargets",
        json!({"LoadBalancerId": lb, "Targets": batch}),
    )
    .await;
    assert_eq!(code(&too_big), "LimitExceeded");
    let both_kinds = call(
        &cloud,
        "BatchRegisterTargets",
        json!({"LoadBalancerId": lb, "Targets": [{"ListenerId": listener_id, "EniIp": "10.0.0.1", "InstanceId": "ins-1", "Port": 1}]}),
    )
    .await;
    assert_eq!(code(&both_kinds), "InvalidParameterValue");
    let described = call(
        &cloud,
        "DescribeTargets",
        json!({"LoadBalancerId": lb, "ListenerIds": [listener_id]}),
    )
    .await;
    assert_eq!(
        described["Listeners"][0]["Targets"]
            .as_array()
            .map(Vec::len),
        Some(20)
    );
}

#[tokio::test]
async fn pages_load_balancers_at_most_a_hundred_at_a_time() {
    let cloud = MockTencent::builder().start().await.expect("mock");
    for _ in 0..3 {
        create_public(&cloud).await;
    }
    let too_big = call(&cloud, "DescribeLoadBalancers", json!({"Limit": 101})).await;
    assert_eq!(code(&too_big), "InvalidParameterValue");
    let first = call(&cloud, "DescribeLoadBalancers", json!({"Limit": 2})).await;
    assert_eq!(first["TotalCount"], 3);
    assert_eq!(first["LoadBalancerSet"].as_array().map(Vec::len), Some(2));
    let second = call(
        &cloud,
        "DescribeLoadBalancers",
        json!({"Limit": 2, "Offset": 2}),
    )
    .await;
    assert_eq!(second["LoadBalancerSet"].as_array().map(Vec::len), Some(1));
    let tagged = call(
        &cloud,
        "DescribeLoadBalancers",
        json!({"Filters": [{"Name": "tag:tke-createdBy-flag", "Values": ["yes"]}]}),
    )
    .await;
    assert_eq!(tagged["TotalCount"], 3);
}

#[tokio::test]
async fn faults_answer_errors_and_fail_tasks_undoing_the_change() {
    let cloud = MockTencent::builder().start().await.expect("mock");
    let lb = create_public(&cloud).await;
    cloud.inject(Fault::error(
        "DescribeListeners",
        "RequestLimitExceeded",
        "slow down",
        1,
    ));
    let throttled = call(&cloud, "DescribeListeners", json!({"LoadBalancerId": lb})).await;
    assert_eq!(code(&throttled), "RequestLimitExceeded");
    let fine = call(&cloud, "DescribeListeners", json!({"LoadBalancerId": lb})).await;
    assert_eq!(code(&fine), "");
    cloud.inject(Fault::fail_task(
        "CreateListener",
        "backend cluster unavailable",
    ));
    let started = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Ports": [80], "Protocol": "TCP"}),
    )
    .await;
    let status = call(
        &cloud,
        "DescribeTaskStatus",
        json!({"TaskId": started["RequestId"]}),
    )
    .await;
    assert_eq!(status["Status"], 1, "{status}");
    assert_eq!(status["Message"], "backend cluster unavailable");
    let listeners = call(&cloud, "DescribeListeners", json!({"LoadBalancerId": lb})).await;
    assert_eq!(
        listeners["TotalCount"], 0,
        "a failed task leaves nothing behind"
    );
    assert_eq!(cloud.pending_faults(), 0);
}

#[tokio::test]
async fn a_create_repeated_with_its_client_token_gets_the_first_answer_and_creates_nothing() {
    let cloud = MockTencent::builder().start().await.unwrap();
    let body = json!({"LoadBalancerType": "OPEN", "ClientToken": "retry-of-one-create"});
    let first = call(&cloud, "CreateLoadBalancer", body.clone()).await;
    let again = call(&cloud, "CreateLoadBalancer", body).await;
    assert_eq!(code(&first), "", "{first}");
    assert_eq!(first["LoadBalancerIds"], again["LoadBalancerIds"]);
    assert_eq!(first["DealName"], again["DealName"]);
    assert_ne!(first["RequestId"], again["RequestId"], "a new request");
    // The order of the first call can still be followed by its DealName.
    let task = call(
        &cloud,
        "DescribeTaskStatus",
        json!({"DealName": again["DealName"]}),
    )
    .await;
    assert_eq!(task["Status"], 0, "{task}");
    let other = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "OPEN", "ClientToken": "another-create"}),
    )
    .await;
    assert_ne!(other["LoadBalancerIds"], first["LoadBalancerIds"]);
    assert_eq!(cloud.load_balancers().len(), 2);
    let too_long = call(
        &cloud,
        "CreateLoadBalancer",
        json!({"LoadBalancerType": "OPEN", "ClientToken": "x".repeat(65)}),
    )
    .await;
    assert_eq!(code(&too_long), "InvalidParameterValue", "{too_long}");
}

/// One VPC API request (`2017-03-12`), signed for service `vpc` as the SDKs sign it.
async fn vpc_call(cloud: &MockTencent, action: &str, version: &str, body: Value) -> Value {
    let bytes = serde_json::to_vec(&body).expect("json");
    let timestamp = now();
    let signature = expected_signature(
        SECRET_KEY,
        "vpc",
        "application/json",
        &cloud.host(),
        &bytes,
        timestamp,
    );
    let authorization = format!(
        "TC3-HMAC-SHA256 Credential={SECRET_ID}/{}/vpc/tc3_request, SignedHeaders=content-type;host, Signature={signature}",
        utc_date(timestamp)
    );
    let response = reqwest::Client::new()
        .post(cloud.url())
        .header("content-type", "application/json")
        .header("authorization", authorization)
        .header("x-tc-action", action)
        .header("x-tc-version", version)
        .header("x-tc-region", REGION)
        .header("x-tc-timestamp", timestamp.to_string())
        .body(bytes)
        .send()
        .await
        .expect("send");
    let document: Value = response.json().await.expect("json answer");
    document["Response"].clone()
}

#[tokio::test]
async fn security_groups_bound_to_a_clb_decide_who_reaches_its_listeners() {
    let cloud = MockTencent::builder().start().await.expect("mock");
    let lb = create_public(&cloud).await;
    let listener = call(
        &cloud,
        "CreateListener",
        json!({"LoadBalancerId": lb, "Protocol": "TCP", "Ports": [80]}),
    )
    .await;
    assert_eq!(code(&listener), "", "{listener}");
    let inside: std::net::IpAddr = "143.231.1.2".parse().unwrap();
    let outside: std::net::IpAddr = "198.51.100.1".parse().unwrap();
    // No group bound: everyone passes.
    assert!(cloud.would_reach(&lb, outside, "TCP", 80));

    // The VPC version under a CLB scope, and the CLB version under the VPC scope, are refused.
    let wrong = vpc_call(&cloud, "DescribeSecurityGroups", "2018-03-17", json!({})).await;
    assert_eq!(code(&wrong), "NoSuchVersion");
    let created = vpc_call(
        &cloud,
        "CreateSecurityGroup",
        VPC_VERSION,
        json!({"GroupName": "sg-a", "GroupDescription": "test",
               "Tags": [{"Key": "owner", "Value": "me"}]}),
    )
    .await;
    let group = created["SecurityGroup"]["SecurityGroupId"]
        .as_str()
        .expect("id")
        .to_string();
    let bad = vpc_call(
        &cloud,
        "ModifySecurityGroupPolicies",
        VPC_VERSION,
        json!({"SecurityGroupId": group, "SecurityGroupPolicySet": {"Ingress": [
            {"Protocol": "SCTP", "Port": "80", "CidrBlock": "10.0.0.0/8", "Action": "ACCEPT"}]}}),
    )
    .await;
    assert_eq!(code(&bad), "InvalidParameterValue");
    let set = vpc_call(
        &cloud,
        "ModifySecurityGroupPolicies",
        VPC_VERSION,
        json!({"SecurityGroupId": group, "SecurityGroupPolicySet": {"Egress": [], "Ingress": [
            {"Protocol": "TCP", "Port": "80,443", "CidrBlock": "143.231.0.0/16", "Action": "ACCEPT"}]}}),
    )
    .await;
    assert_eq!(code(&set), "", "{set}");
    // Bound: only the range passes, a port the policy does not name is closed.
    let bound = call(
        &cloud,
        "SetLoadBalancerSecurityGroups",
        json!({"LoadBalancerId": lb, "SecurityGroups": [group]}),
    )
    .await;
    assert_eq!(code(&bound), "", "{bound}");
    assert!(cloud.would_reach(&lb, inside, "TCP", 80));
    assert!(!cloud.would_reach(&lb, outside, "TCP", 80));
    let described = call(
        &cloud,
        "DescribeLoadBalancers",
        json!({"LoadBalancerIds": [lb]}),
    )
    .await;
    assert_eq!(
        described["LoadBalancerSet"][0]["SecureGroups"],
        json!([group])
    );
    // A DROP ahead of the ACCEPT wins: the first matching policy decides.
    let drop = vpc_call(
        &cloud,
        "ModifySecurityGroupPolicies",
        VPC_VERSION,
        json!({"SecurityGroupId": group, "SecurityGroupPolicySet": {"Ingress": [
            {"Protocol": "ALL", "Port": "ALL", "CidrBlock": "143.231.1.0/24", "Action": "DROP"},
            {"Protocol": "TCP", "Port": "80", "CidrBlock": "143.231.0.0/16", "Action": "ACCEPT"}]}}),
    )
    .await;
    assert_eq!(code(&drop), "", "{drop}");
    assert!(!cloud.would_reach(&lb, inside, "TCP", 80));
    assert!(cloud.would_reach(&lb, "143.231.2.2".parse().unwrap(), "TCP", 80));
    let policies = vpc_call(
        &cloud,
        "DescribeSecurityGroupPolicies",
        VPC_VERSION,
        json!({"SecurityGroupId": group}),
    )
    .await;
    let ingress = &policies["SecurityGroupPolicySet"]["Ingress"];
    assert_eq!(ingress[0]["PolicyIndex"], 0);
    assert_eq!(ingress[0]["Action"], "DROP");
    assert_eq!(ingress[1]["CidrBlock"], "143.231.0.0/16");
    // A bound group cannot be deleted; unbound it can.
    let busy = vpc_call(
        &cloud,
        "DeleteSecurityGroup",
        VPC_VERSION,
        json!({"SecurityGroupId": group}),
    )
    .await;
    assert_eq!(code(&busy), "ResourceInUse");
    call(
        &cloud,
        "SetLoadBalancerSecurityGroups",
        json!({"LoadBalancerId": lb}),
    )
    .await;
    assert!(cloud.would_reach(&lb, outside, "TCP", 80));
    let deleted = vpc_call(
        &cloud,
        "DeleteSecurityGroup",
        VPC_VERSION,
        json!({"SecurityGroupId": group}),
    )
    .await;
    assert_eq!(code(&deleted), "", "{deleted}");
    let gone = vpc_call(
        &cloud,
        "DescribeSecurityGroupPolicies",
        VPC_VERSION,
        json!({"SecurityGroupId": group}),
    )
    .await;
    assert_eq!(code(&gone), "InvalidSecurityGroupID.NotFound");
}
