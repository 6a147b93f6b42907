//! Keystone v3: version discovery, token issue (password and application credential) and
//! token validation for the other services.

use std::time::SystemTime;

use axum::http::StatusCode;
use serde_json::{Value, json};

use crate::state::{ApiError, State, Token};

/// `GET /`: the identity versions document (the unversioned `auth_url` form).
pub(crate) fn versions(state: &State) -> Value {
    json!({"versions": {"values": [version_entry(state)]}})
}

/// `GET /v3`: the identity version document.
pub(crate) fn version(state: &State) -> Value {
    json!({"version": version_entry(state)})
}

fn version_entry(state: &State) -> Value {
    json!({
        "id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
        "links": [{"rel": "self", "href": format!("{}/v3/", state.config.base_url)}],
        "media-types": [{"base": "application/json", "type": "application/vnd.openstack.identity-v3+json"}],
    })
}

/// `POST /v3/auth/tokens`: checks the credentials and answers the token document; the token
/// itself goes in the returned string (the `X-Subject-Token` header).
pub(crate) fn issue(state: &mut State, body: &Value) -> Result<(String, Value), ApiError> {
    let identity = &body["auth"]["identity"];
    let methods: Vec<&str> = identity["methods"]
        .as_array()
        .map(|m| m.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let unauthorized = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "The request you have made requires authentication.",
        )
    };
    let (method, user_name) = match methods.first().copied() {
        Some("password") => {
            let user = &identity["password"]["user"];
            let name = user["name"]
                .as_str()
                .or_else(|| user["id"].as_str())
                .ok_or_else(|| ApiError::bad_request("Expecting to find user name or id"))?;
            if user["id"].is_null() {
                let domain = &user["domain"];
                let domain_ok = domain["name"].as_str() == Some(state.config.domain_name.as_str())
                    || domain["id"].as_str() == Some("default");
                if !domain_ok {
                    return Err(unauthorized());
                }
            }
            let password = user["password"].as_str().unwrap_or_default();
            if state.config.credentials.users.get(name).map(String::as_str) != Some(password) {
                return Err(unauthorized());
            }
            let project = &body["auth"]["scope"]["project"];
            let scoped = project["id"].as_str() == Some(state.config.project_id.as_str())
                || (project["name"].as_str() == Some(state.config.project_name.as_str())
                    && (project["domain"]["name"].as_str()
                        == Some(state.config.domain_name.as_str())
                        || project["domain"]["id"].as_str() == Some("default")));
            if !scoped {
                return Err(unauthorized());
            }
            ("password", name.to_string())
        }
        Some("application_credential") => {
            let credential = &identity["application_credential"];
            let id = credential["id"].as_str().ok_or_else(|| {
                ApiError::bad_request("Expecting to find application credential id")
            })?;
            let secret = credential["secret"].as_str().unwrap_or_default();
            if state
                .config
                .credentials
                .application_credentials
                .get(id)
                .map(String::as_str)
                != Some(secret)
            {
                return Err(unauthorized());
            }
            if !body["auth"]["scope"].is_null() {
                return Err(ApiError::new(
                    StatusCode::UNAUTHORIZED,
                    "Application credentials cannot request a scope.",
                ));
            }
            ("application_credential", format!("appcred-{id}"))
        }
        _ => return Err(ApiError::bad_request("Expecting to find identity methods")),
    };
    let issued = SystemTime::now();
    let expires = issued + state.config.token_ttl;
    let token = format!("gAAAA{}", state.new_id(0x7e).replace('-', ""));
    state.tokens.insert(token.clone(), Token { expires });
    let base = state.config.base_url.clone();
    let region = state.config.region.clone();
    let endpoint = |kind: &str, name: &str, url: String| {
        json!({"type": kind, "name": name, "id": format!("{name}-service"), "endpoints": [
            {"id": format!("{name}-public"), "interface": "public", "region": region, "region_id": region, "url": url},
            {"id": format!("{name}-internal"), "interface": "internal", "region": region, "region_id": region, "url": url},
        ]})
    };
    let document = json!({"token": {
        "methods": [method],
        "user": {"id": format!("user-{user_name}"), "name": user_name,
                 "domain": {"id": "default", "name": state.config.domain_name}, "password_expires_at": null},
        "project": {"id": state.config.project_id, "name": state.config.project_name,
                    "domain": {"id": "default", "name": state.config.domain_name}},
        "roles": [{"id": "role-member", "name": "member"}, {"id": "role-lb-member", "name": "load-balancer_member"}],
        "issued_at": humantime::format_rfc3339_micros(issued).to_string(),
        "expires_at": humantime::format_rfc3339_micros(expires).to_string(),
        "audit_ids": [token.get(5..27).unwrap_or_default()],
        "catalog": [
            endpoint("identity", "keystone", format!("{base}/v3")),
            endpoint("load-balancer", "octavia", format!("{base}/load-balancer")),
            endpoint("network", "neutron", format!("{base}/networking")),
        ],
    }});
    Ok((token, document))
}

/// Checks the `X-Auth-Token` of a request to Octavia or Neutron.
pub(crate) fn validate(state: &State, token: Option<&str>) -> Result<(), ApiError> {
    let unauthorized = || {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "The request you have made requires authentication.",
        )
    };
    let token = token.ok_or_else(unauthorized)?;
    match state.tokens.get(token) {
        Some(stored) if stored.expires > SystemTime::now() => Ok(()),
        _ => Err(unauthorized()),
    }
}
