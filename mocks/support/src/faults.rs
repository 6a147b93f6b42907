//! Armed fault rules. Each mock has its own rule type (what a fault does depends on the API:
//! an error answer, a delay, a failed async task, a lost response); they share the countdown
//! (let `skip` matching requests through, then fire `times` times and disarm) and, for most,
//! the match on a method and a path substring.

/// A fault rule with the shared countdown.
pub trait Armed {
    /// What firing hands back to the mock (an error to answer, a delay, …).
    type Outcome;

    /// The rule's `(skip, times)` counters.
    fn countdown(&mut self) -> (&mut u32, &mut u32);

    /// What the rule does when it fires.
    fn outcome(&self) -> Self::Outcome;
}

/// Fires the first rule `matches` accepts: while it still has requests to let through, this
/// request is one of them (`None`); otherwise its outcome is returned and, on its last firing,
/// the rule is removed. Rules after the first match are not looked at.
pub fn fire_first<F: Armed>(
    rules: &mut Vec<F>,
    matches: impl FnMut(&F) -> bool,
) -> Option<F::Outcome> {
    let index = rules.iter().position(matches)?;
    let rule = &mut rules[index];
    let (skip, times) = rule.countdown();
    if *skip > 0 {
        *skip -= 1;
        return None;
    }
    *times = times.saturating_sub(1);
    let spent = *times == 0;
    let outcome = rule.outcome();
    if spent {
        rules.remove(index);
    }
    Some(outcome)
}

/// True when a request's `method` and `path` match a rule's method (any when `None`; compared
/// without case) and path substring (compared with case).
pub fn method_and_path_match(
    rule_method: Option<&str>,
    rule_path_contains: &str,
    method: &str,
    path: &str,
) -> bool {
    rule_method.is_none_or(|m| m.eq_ignore_ascii_case(method)) && path.contains(rule_path_contains)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Rule {
        name: &'static str,
        skip: u32,
        times: u32,
    }

    impl Armed for Rule {
        type Outcome = &'static str;
        fn countdown(&mut self) -> (&mut u32, &mut u32) {
            (&mut self.skip, &mut self.times)
        }
        fn outcome(&self) -> &'static str {
            self.name
        }
    }

    fn fire_all(mut rules: Vec<Rule>, requests: usize) -> (Vec<Option<&'static str>>, usize) {
        let fired = (0..requests)
            .map(|_| fire_first(&mut rules, |_| true))
            .collect();
        (fired, rules.len())
    }

    #[test]
    fn countdown_lets_skip_through_then_fires_times_and_disarms() {
        let rule = |name, skip, times| Rule { name, skip, times };
        let cases = [
            (
                "fires once",
                vec![rule("a", 0, 1)],
                2,
                vec![Some("a"), None],
                0,
            ),
            (
                "skip then twice",
                vec![rule("a", 1, 2)],
                4,
                vec![None, Some("a"), Some("a"), None],
                0,
            ),
            // `times: 0` behaves as once, as every mock's rules always have.
            (
                "zero times is once",
                vec![rule("a", 0, 0)],
                2,
                vec![Some("a"), None],
                0,
            ),
            (
                "first match only, the next rule after it is spent",
                vec![rule("a", 0, 1), rule("b", 0, 1)],
                3,
                vec![Some("a"), Some("b"), None],
                0,
            ),
            (
                "still armed",
                vec![rule("a", 0, 5)],
                2,
                vec![Some("a"), Some("a")],
                1,
            ),
        ];
        for (name, rules, requests, want, left) in cases {
            assert_eq!(fire_all(rules, requests), (want, left), "{name}");
        }
    }

    #[test]
    fn method_and_path_matching() {
        let cases = [
            (Some("PUT"), "/pools", "put", "/v2/pools/1", true),
            (None, "/pools", "GET", "/v2/pools", true),
            (Some("PUT"), "/pools", "POST", "/v2/pools", false),
            (Some("PUT"), "/Pools", "PUT", "/v2/pools", false),
            (None, "", "DELETE", "/anything", true),
        ];
        for (rule_method, contains, method, path, want) in cases {
            assert_eq!(
                method_and_path_match(rule_method, contains, method, path),
                want,
                "{rule_method:?} {contains} vs {method} {path}"
            );
        }
    }
}
