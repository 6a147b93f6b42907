//! The request journal: every mock keeps a `Vec` of its own entry type (what it records differs
//! per API) and exposes the same views of it through [`crate::MockServer`].

/// A journaled request, as far as the shared views need to know it.
pub trait Recorded: Clone {
    /// True when the request may change cloud state (the calls a no-op resync must not make).
    fn is_mutation(&self) -> bool;
}

/// The entries from position `from` on (an empty list when `from` is past the end).
pub fn since<E: Clone>(entries: &[E], from: usize) -> Vec<E> {
    entries.get(from..).map(<[E]>::to_vec).unwrap_or_default()
}

/// The entries that may have changed state, in arrival order.
pub fn mutations<E: Recorded>(entries: &[E]) -> Vec<E> {
    entries
        .iter()
        .filter(|e| e.is_mutation())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Call(&'static str);

    impl Recorded for Call {
        fn is_mutation(&self) -> bool {
            self.0 != "GET"
        }
    }

    #[test]
    fn views_of_a_journal() {
        let journal = [Call("GET"), Call("PUT"), Call("GET"), Call("DELETE")];
        let cases: [(&str, Vec<Call>, Vec<Call>); 3] = [
            ("whole journal", since(&journal, 0), journal.to_vec()),
            ("past the end", since(&journal, 9), vec![]),
            (
                "mutations only",
                mutations(&journal),
                vec![Call("PUT"), Call("DELETE")],
            ),
        ];
        for (name, got, want) in cases {
            assert_eq!(got, want, "{name}");
        }
    }
}
