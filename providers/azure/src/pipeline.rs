//! What kube-lb adds to the `azure_core` pipeline the SDK client (and kube-lb's own operation
//! polling) sends through:
//!
//! * [`Preconditions`]: `If-Match: <etag>` on writes of an existing resource, `If-None-Match: *`
//!   on creates. The generated request builders have no header setter and always send a default
//!   `Context`, so the wanted precondition travels in a [`tokio::task_local!`] scoped around the
//!   one call ([`in_call`]). That covers DELETE (which has no body) as well as PUT, and keeps the
//!   create-vs-update decision explicit instead of inferring it from the body as upstream's Go
//!   policy does (a body without an etag there means "no precondition", here it means "must not
//!   exist yet").
//! * [`WithholdToken`] + [`Transport`]: azure_core 0.21 logs whole requests at debug level from
//!   its retry and transport policies, and its `Headers` Debug prints the `Authorization` value
//!   while redacting everything else. The first policy therefore moves the bearer token out of
//!   the request into the pipeline context, and the transport (the last policy) puts it on a
//!   copy of the request just before reqwest sends it, so no log line can contain it. The
//!   transport also refuses URLs off the configured endpoint (`nextLink`, operation URLs), so
//!   the token never leaves for another host, and records the server's `Retry-After` on
//!   throttled or failed answers for [`crate::client`] to honour.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use azure_core::error::ErrorKind;
use azure_core::headers::{
    AUTHORIZATION, HeaderName, Headers, RETRY_AFTER, RETRY_AFTER_MS, X_MS_RETRY_AFTER_MS,
};
use azure_core::{Context, HttpClient, Method, Policy, PolicyResult, Request, Url};

/// Written into requests in place of the bearer token while they pass the SDK's policies.
const WITHHELD: &str = "Bearer [withheld]";

/// The precondition a write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Precondition {
    /// Only if the resource still has this etag.
    IfMatch(String),
    /// Only if the resource does not exist yet.
    IfNoneMatch,
}

impl Precondition {
    /// `If-Match` with the etag the object was read with, or `If-None-Match: *` for a create.
    pub(crate) fn for_write(etag: Option<&str>) -> Precondition {
        match etag {
            Some(etag) => Precondition::IfMatch(etag.to_string()),
            None => Precondition::IfNoneMatch,
        }
    }
}

/// Input to and output from one ARM call's pass through the pipeline.
#[derive(Debug, Default)]
pub(crate) struct CallScope {
    precondition: Option<Precondition>,
    retry_after: Mutex<Option<Duration>>,
}

tokio::task_local! {
    static CALL: Arc<CallScope>;
}

/// Runs `call` (one SDK request) with `precondition` applied to its write; returns its result
/// and the `Retry-After` the server sent with a throttled or failed answer.
pub(crate) async fn in_call<F: Future>(
    precondition: Option<Precondition>,
    call: F,
) -> (F::Output, Option<Duration>) {
    let scope = Arc::new(CallScope {
        precondition,
        retry_after: Mutex::new(None),
    });
    let output = CALL.scope(Arc::clone(&scope), call).await;
    let hint = scope.retry_after.lock().map(|hint| *hint).unwrap_or(None);
    (output, hint)
}

/// The server's back-off request: `retry-after-ms`, `x-ms-retry-after-ms`, or `Retry-After`
/// in seconds (HTTP dates are not used by ARM and are ignored).
pub(crate) fn retry_after(headers: &Headers) -> Option<Duration> {
    let number = |name: &HeaderName| {
        headers
            .get_optional_str(name)
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    number(&RETRY_AFTER_MS)
        .or_else(|| number(&X_MS_RETRY_AFTER_MS))
        .map(Duration::from_millis)
        .or_else(|| number(&RETRY_AFTER).map(Duration::from_secs))
}

/// Sets the precondition of the current call on its PUT or DELETE.
#[derive(Debug, Default)]
pub(crate) struct Preconditions;

#[async_trait]
impl Policy for Preconditions {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let write = matches!(request.method(), Method::Put | Method::Delete);
        if write && let Ok(Some(precondition)) = CALL.try_with(|c| c.precondition.clone()) {
            match precondition {
                Precondition::IfMatch(etag) => request.insert_header("if-match", etag),
                Precondition::IfNoneMatch => request.insert_header("if-none-match", "*"),
            }
        }
        next[0].send(ctx, request, &next[1..]).await
    }
}

/// The bearer token, carried in the pipeline context instead of the request.
#[derive(Clone)]
struct Bearer(String);

/// Moves the `Authorization` header into the context (see the module doc for why).
#[derive(Debug, Default)]
pub(crate) struct WithholdToken;

#[async_trait]
impl Policy for WithholdToken {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let token = request
            .headers()
            .get_optional_string(&AUTHORIZATION)
            .filter(|value| value != WITHHELD);
        match token {
            Some(token) => {
                request.insert_header(AUTHORIZATION, WITHHELD);
                let mut ctx = ctx.clone();
                ctx.insert(Bearer(token));
                next[0].send(&ctx, request, &next[1..]).await
            }
            None => next[0].send(ctx, request, &next[1..]).await,
        }
    }
}

/// A request addressed somewhere other than the configured endpoint.
#[derive(Debug, thiserror::Error)]
#[error("refusing to send a request to {url}: not on the resource manager endpoint")]
pub(crate) struct ForeignUrl {
    /// The URL (without its query).
    pub(crate) url: String,
}

/// The last policy: sends through reqwest with the withheld token restored.
#[derive(Debug)]
pub(crate) struct Transport {
    http: reqwest::Client,
    endpoint: Url,
}

impl Transport {
    /// Sends with `http`, only to `endpoint`'s scheme, host and port.
    pub(crate) fn new(http: reqwest::Client, endpoint: Url) -> Transport {
        Transport { http, endpoint }
    }

    fn on_endpoint(&self, url: &Url) -> bool {
        url.scheme() == self.endpoint.scheme()
            && url.host_str() == self.endpoint.host_str()
            && url.port_or_known_default() == self.endpoint.port_or_known_default()
    }
}

#[async_trait]
impl Policy for Transport {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        _next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        if !self.on_endpoint(request.url()) {
            let mut url = request.url().clone();
            url.set_query(None);
            return Err(azure_core::Error::new(
                ErrorKind::Other,
                ForeignUrl {
                    url: url.to_string(),
                },
            ));
        }
        let mut outgoing = request.clone();
        if let Some(Bearer(token)) = ctx.get::<Bearer>() {
            outgoing.insert_header(AUTHORIZATION, token.clone());
        }
        let response = self.http.execute_request(&outgoing).await?;
        let status = u16::from(response.status());
        if status == 429 || status >= 500 {
            let hint = retry_after(response.headers());
            // Outside a call scope (never the case for kube-lb's calls) there is nobody to tell.
            let _ = CALL.try_with(|c| {
                if let Ok(mut slot) = c.retry_after.lock() {
                    *slot = hint;
                }
            });
        }
        Ok(response)
    }
}

#[cfg(test)]
mod tests {
    use azure_core::{
        ClientOptions, Pipeline, Response, RetryOptions, StatusCode, TransportOptions,
    };

    use super::*;

    /// What one request looked like in the middle of the pipeline and at its end.
    #[derive(Debug, Default, Clone, PartialEq)]
    struct Seen {
        authorization_in_the_middle: Option<String>,
        token_at_the_transport: Option<String>,
        if_match: Option<String>,
        if_none_match: Option<String>,
    }

    #[derive(Debug, Default)]
    struct Record(Mutex<Vec<Seen>>);

    /// A per-retry policy (where azure_core's retry policy logs requests) and the transport.
    #[derive(Debug)]
    struct Spy(Arc<Record>, bool);

    #[async_trait]
    impl Policy for Spy {
        async fn send(
            &self,
            ctx: &Context,
            request: &mut Request,
            next: &[Arc<dyn Policy>],
        ) -> PolicyResult {
            let headers = request.headers();
            if !self.1 {
                self.0.0.lock().unwrap().push(Seen {
                    authorization_in_the_middle: headers.get_optional_string(&AUTHORIZATION),
                    ..Seen::default()
                });
                return next[0].send(ctx, request, &next[1..]).await;
            }
            let mut seen = self.0.0.lock().unwrap();
            let last = seen.last_mut().unwrap();
            last.token_at_the_transport = ctx.get::<Bearer>().map(|b| b.0.clone());
            last.if_match = headers.get_optional_string(&HeaderName::from_static("if-match"));
            last.if_none_match =
                headers.get_optional_string(&HeaderName::from_static("if-none-match"));
            Ok(Response::new(
                StatusCode::Ok,
                Headers::new(),
                Box::pin(futures::stream::empty()),
            ))
        }
    }

    #[tokio::test]
    async fn writes_get_their_precondition_and_no_policy_sees_the_token() {
        let record = Arc::new(Record::default());
        let mut options = ClientOptions::new(TransportOptions::new_custom_policy(Arc::new(Spy(
            Arc::clone(&record),
            true,
        ))))
        .retry(RetryOptions::none());
        options
            .per_call_policies_mut()
            .extend([Arc::new(WithholdToken) as _, Arc::new(Preconditions) as _]);
        options
            .per_retry_policies_mut()
            .push(Arc::new(Spy(Arc::clone(&record), false)));
        let pipeline = Pipeline::new(None, None, options, Vec::new(), Vec::new());
        let send = |method: Method, precondition: Option<Precondition>| {
            let pipeline = pipeline.clone();
            async move {
                let mut request = Request::new(Url::parse("http://127.0.0.1/x").unwrap(), method);
                request.insert_header(AUTHORIZATION, "Bearer secret-token");
                let (result, _) =
                    in_call(precondition, pipeline.send(&Context::new(), &mut request)).await;
                result.unwrap();
            }
        };
        let etag = || Some(Precondition::IfMatch("W/\"4\"".into()));
        send(Method::Put, etag()).await;
        send(Method::Put, Some(Precondition::IfNoneMatch)).await;
        send(Method::Delete, etag()).await;
        send(Method::Get, etag()).await;
        send(Method::Put, None).await;

        let seen = record.0.lock().unwrap().clone();
        let wanted = |if_match: Option<&str>, if_none_match: Option<&str>| Seen {
            authorization_in_the_middle: Some(WITHHELD.into()),
            token_at_the_transport: Some("Bearer secret-token".into()),
            if_match: if_match.map(str::to_string),
            if_none_match: if_none_match.map(str::to_string),
        };
        assert_eq!(
            seen,
            vec![
                wanted(Some("W/\"4\""), None),
                wanted(None, Some("*")),
                wanted(Some("W/\"4\""), None),
                wanted(None, None),
                wanted(None, None),
            ]
        );
    }

    #[test]
    fn retry_after_prefers_milliseconds() {
        let mut headers = Headers::new();
        headers.insert("retry-after", "7");
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(7)));
        headers.insert("retry-after-ms", "250");
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        assert_eq!(retry_after(&Headers::new()), None);
    }

    #[test]
    fn preconditions_follow_the_etag() {
        assert_eq!(
            Precondition::for_write(Some("W/\"3\"")),
            Precondition::IfMatch("W/\"3\"".into())
        );
        assert_eq!(Precondition::for_write(None), Precondition::IfNoneMatch);
    }

    #[test]
    fn only_the_configured_endpoint_is_reachable() {
        let transport = Transport::new(
            reqwest::Client::new(),
            Url::parse("http://127.0.0.1:8080").unwrap(),
        );
        let cases = [
            ("http://127.0.0.1:8080/subscriptions/s?api-version=1", true),
            ("http://127.0.0.1:8081/subscriptions/s", false),
            ("https://127.0.0.1:8080/subscriptions/s", false),
            ("http://evil.example:8080/subscriptions/s", false),
        ];
        for (url, ok) in cases {
            assert_eq!(
                transport.on_endpoint(&Url::parse(url).unwrap()),
                ok,
                "{url}"
            );
        }
    }
}
