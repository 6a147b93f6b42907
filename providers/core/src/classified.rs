//! One conversion from a provider's classified cloud error to the [`ProviderError`] variant
//! its [`Classification`] names, so every provider's `From<CloudError> for ProviderError`
//! is the wording of its messages and nothing else (the Baidu and Tencent providers use it).

use crate::error::{BoxError, Classification, ProviderError};

impl Classification {
    /// The [`ProviderError`] this classification names for a cloud error answered to
    /// `operation`: a transient error is [`ProviderError::Throttled`] when `throttled` (the
    /// cloud refused the request rate), else [`ProviderError::Retryable`]; a stale or unknown
    /// one is [`ProviderError::Internal`]. `message` is the variant's text as given (a user
    /// error's is shown to the Service's author as it is); `source`, the cloud error, is kept
    /// where the variant has room for it.
    pub fn into_error(
        self,
        operation: &'static str,
        message: String,
        throttled: bool,
        source: BoxError,
    ) -> ProviderError {
        let source = Some(source);
        match self {
            Classification::Transient if throttled => ProviderError::Throttled {
                operation,
                message,
                source,
            },
            Classification::Transient => ProviderError::Retryable {
                operation,
                message,
                source,
            },
            Classification::Pending => ProviderError::Pending {
                operation,
                message,
                source,
            },
            Classification::Environment(cause) => {
                ProviderError::environment(operation, cause, message)
            }
            Classification::User => ProviderError::user(message),
            Classification::Stale | Classification::Unknown => {
                ProviderError::Internal { message, source }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::EnvironmentCause;

    #[test]
    fn each_classification_becomes_the_variant_it_names_with_the_same_retry() {
        let source = || -> BoxError { "cloud said no".into() };
        // (classification, throttled, the variant wanted)
        let cases = [
            (Classification::Transient, false, "Retryable"),
            (Classification::Transient, true, "Throttled"),
            (Classification::Pending, false, "Pending"),
            (
                Classification::Environment(EnvironmentCause::Quota),
                false,
                "Environment",
            ),
            (Classification::User, false, "User"),
            (Classification::Stale, false, "Internal"),
            (Classification::Unknown, true, "Internal"),
        ];
        for (class, throttled, want) in cases {
            let error = class.into_error("Op", "m".into(), throttled, source());
            let variant = match &error {
                ProviderError::Retryable { .. } => "Retryable",
                ProviderError::Throttled { .. } => "Throttled",
                ProviderError::Pending { .. } => "Pending",
                ProviderError::Environment { .. } => "Environment",
                ProviderError::User { .. } => "User",
                ProviderError::Internal { .. } => "Internal",
                other => panic!("{other:?}"),
            };
            assert_eq!(variant, want, "{class:?} throttled={throttled}");
            assert_eq!(error.retry(), class.retry(), "{class:?}");
            assert!(error.to_string().ends_with('m'), "{error}");
        }
    }
}
