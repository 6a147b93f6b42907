//! Enumerated annotation values: one macro gives every enum the same `FromStr`/`Display`
//! round-trip, a list of accepted spellings for error messages, and string serialization.

use std::fmt;

/// A string that is not one of the accepted spellings of an enumerated value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not one of {}", allowed.join(", "))]
pub struct UnknownVariant {
    /// The string given.
    pub value: String,
    /// Every accepted spelling (canonical ones first).
    pub allowed: &'static [&'static str],
}

impl UnknownVariant {
    /// The accepted spellings joined for a human message.
    pub fn allowed_text(&self) -> String {
        join_allowed(self.allowed)
    }
}

/// Joins accepted spellings as `a, b or c`.
pub(crate) fn join_allowed(allowed: &[&str]) -> String {
    match allowed {
        [] => String::new(),
        [one] => format!("{one:?}"),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(|s| format!("{s:?}")).collect();
            format!("{} or {last:?}", init.join(", "))
        }
    }
}

/// Writes a canonical spelling; shared by every generated `Display`.
pub(crate) fn write_str(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str(s)
}

/// Declares a `Copy` enum whose values are fixed strings.
///
/// `Variant => "canonical" | "alias"…` : `Display` writes the canonical spelling, `FromStr`
/// accepts the canonical spelling and the aliases (exactly; case rules belong to the parser that
/// knows what upstream does), and serde writes the canonical spelling.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $(
                $(#[$vmeta:meta])*
                $variant:ident => $text:literal $(| $alias:literal)*
            ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $(
                $(#[$vmeta])*
                $variant,
            )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
            /// Every accepted spelling, canonical ones first.
            pub const ACCEPTED: &'static [&'static str] = &[$($text),+ $($(, $alias)*)+];

            /// The canonical spelling.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                $crate::value::write_str(f, self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::value::UnknownVariant;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text $(| $alias)* => Ok($name::$variant),)+
                    _ => Err($crate::value::UnknownVariant {
                        value: s.to_owned(),
                        allowed: $name::ACCEPTED,
                    }),
                }
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

pub(crate) use string_enum;
