//! Following a cloud API's page tokens (AWS `NextToken`/`NextMarker`, GCE `nextPageToken`, ARM
//! `nextLink`, BCE `nextMarker`) without trusting them to end.

use std::collections::HashSet;

/// A listing was handed back a page token it had followed already: following it again would go
/// round the same pages for ever.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} handed back page token {token:?} a second time; the listing would never end")]
pub struct RepeatedPageToken {
    /// The listing operation, as the cloud names it.
    pub operation: String,
    /// The token (or link) that came back.
    pub token: String,
}

/// The page tokens one listing has followed. Each page is bounded by the request timeout, but a
/// token the API hands back a second time would hold the Service's worker for ever: that ends
/// the listing with an error instead.
#[derive(Debug, Default)]
pub struct PageTokens {
    followed: HashSet<String>,
}

impl PageTokens {
    /// The token of the next page to ask for: `None` when the listing is over (no token, or an
    /// empty one as ELB and GCE send on the last page), an error when `next` was followed
    /// already.
    pub fn next(
        &mut self,
        operation: &str,
        next: Option<&str>,
    ) -> Result<Option<String>, RepeatedPageToken> {
        let Some(token) = next.filter(|token| !token.is_empty()) else {
            return Ok(None);
        };
        if !self.followed.insert(token.to_owned()) {
            return Err(RepeatedPageToken {
                operation: operation.to_owned(),
                token: token.to_owned(),
            });
        }
        Ok(Some(token.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one step of a listing gives: the next token, or an error (`Err(())`).
    type Step = Result<Option<String>, ()>;
    /// One case: the tokens the API answers with, in order, and what each step gives.
    type Case = (
        &'static [Option<&'static str>],
        &'static [Result<Option<&'static str>, ()>],
    );

    #[test]
    fn a_listing_ends_on_no_token_and_stops_on_a_repeated_one() {
        let cases: [Case; 4] = [
            (&[None], &[Ok(None)]),
            (&[Some("")], &[Ok(None)]),
            (
                &[Some("a"), Some("b"), None],
                &[Ok(Some("a")), Ok(Some("b")), Ok(None)],
            ),
            (
                &[Some("a"), Some("b"), Some("a")],
                &[Ok(Some("a")), Ok(Some("b")), Err(())],
            ),
        ];
        for (answers, expected) in cases {
            let mut tokens = PageTokens::default();
            let got: Vec<Step> = answers
                .iter()
                .map(|answer| tokens.next("DescribeThings", *answer).map_err(|_| ()))
                .collect();
            let expected: Vec<Step> = expected
                .iter()
                .map(|step| step.map(|token| token.map(str::to_owned)))
                .collect();
            assert_eq!(got, expected, "{answers:?}");
        }
        let mut tokens = PageTokens::default();
        tokens.next("DescribeThings", Some("a")).unwrap();
        let error = tokens.next("DescribeThings", Some("a")).unwrap_err();
        assert!(
            error.to_string().contains("DescribeThings") && error.to_string().contains("\"a\""),
            "{error}"
        );
    }
}
