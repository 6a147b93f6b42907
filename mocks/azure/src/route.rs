//! Parsing ARM request paths (case-insensitive fixed segments, as ARM accepts).

/// What a request addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /{tenant}/oauth2/v2.0/token`.
    Token,
    /// `…/providers/Microsoft.Network/locations/{loc}/operations/{id}`.
    Operation(String),
    /// `…/providers/Microsoft.Network/locations/{loc}/operationResults/{id}`.
    OperationResult(String),
    /// `…/resourceGroups/{rg}/providers/Microsoft.Network/{collection}`.
    Collection {
        /// Resource group.
        rg: String,
        /// Collection segment as sent.
        collection: String,
    },
    /// `…/{collection}/{name}`.
    Resource {
        /// Resource group.
        rg: String,
        /// Collection segment as sent.
        collection: String,
        /// Resource name.
        name: String,
    },
    /// `…/{collection}/{name}/{child collection}/{child}`.
    Child {
        /// Resource group.
        rg: String,
        /// Parent collection segment.
        collection: String,
        /// Parent name.
        name: String,
        /// Child collection segment.
        child_collection: String,
        /// Child name.
        child: String,
    },
}

/// Result of parsing: the subscription in the path (if any) and the route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed {
    /// `/subscriptions/{s}`.
    pub subscription: Option<String>,
    /// The route.
    pub route: Route,
}

fn eq(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Parses a path; `None` when it addresses nothing the mock serves.
pub fn parse(path: &str) -> Option<Parsed> {
    let seg: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match seg.as_slice() {
        [_tenant, o, v, t] if eq(o, "oauth2") && eq(v, "v2.0") && eq(t, "token") => Some(Parsed {
            subscription: None,
            route: Route::Token,
        }),
        [s, sub, p, ns, l, _loc, kind, id]
            if eq(s, "subscriptions")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Network")
                && eq(l, "locations") =>
        {
            let route = if eq(kind, "operations") {
                Route::Operation(id.to_string())
            } else if eq(kind, "operationResults") {
                Route::OperationResult(id.to_string())
            } else {
                return None;
            };
            Some(Parsed {
                subscription: Some(sub.to_string()),
                route,
            })
        }
        [s, sub, r, rg, p, ns, rest @ ..]
            if eq(s, "subscriptions")
                && eq(r, "resourceGroups")
                && eq(p, "providers")
                && eq(ns, "Microsoft.Network") =>
        {
            let rg = rg.to_string();
            let route = match rest {
                [c] => Route::Collection {
                    rg,
                    collection: c.to_string(),
                },
                [c, n] => Route::Resource {
                    rg,
                    collection: c.to_string(),
                    name: n.to_string(),
                },
                [c, n, cc, child] => Route::Child {
                    rg,
                    collection: c.to_string(),
                    name: n.to_string(),
                    child_collection: cc.to_string(),
                    child: child.to_string(),
                },
                _ => return None,
            };
            Some(Parsed {
                subscription: Some(sub.to_string()),
                route,
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_arm_paths() {
        let base = "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network";
        let cases = [
            (
                format!("{base}/loadBalancers"),
                Some(Route::Collection {
                    rg: "rg".into(),
                    collection: "loadBalancers".into(),
                }),
            ),
            (
                "/subscriptions/s/resourcegroups/rg/providers/microsoft.network/loadBalancers/kubernetes".to_string(),
                Some(Route::Resource {
                    rg: "rg".into(),
                    collection: "loadBalancers".into(),
                    name: "kubernetes".into(),
                }),
            ),
            (
                format!("{base}/virtualNetworks/v/subnets/s1"),
                Some(Route::Child {
                    rg: "rg".into(),
                    collection: "virtualNetworks".into(),
                    name: "v".into(),
                    child_collection: "subnets".into(),
                    child: "s1".into(),
                }),
            ),
            (
                "/subscriptions/s/providers/Microsoft.Network/locations/eastus/operations/7".into(),
                Some(Route::Operation("7".into())),
            ),
            ("/tenant/oauth2/v2.0/token".into(), Some(Route::Token)),
            (
                "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachines/x"
                    .into(),
                None,
            ),
        ];
        for (path, want) in cases {
            assert_eq!(parse(&path).map(|p| p.route), want, "{path}");
        }
    }
}
