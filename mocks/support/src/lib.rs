//! The part every kube-lb cloud mock (GCE, Azure, OpenStack, Tencent, Baidu) has in common, so
//! each mock keeps only its API:
//!
//! * [`server`]: binding a loopback port, serving an axum router in a background task, a
//!   per-request latency knob, graceful shutdown when the handle is dropped, and the typed
//!   handle ([`MockServer`]) through which tests read the journal and arm faults;
//! * [`journal`]: what a journaled request must tell ([`Recorded`]) and the views tests take;
//! * [`faults`]: the "let `skip` through, then fire `times` times" countdown of armed fault
//!   rules and the method/path matching most mocks use;
//! * [`cli`]: the standalone binaries' argument parsing (`--listen`, the config-out flag, the
//!   mock's own flags) and their run-until-interrupted tail (config first, then the URL line).
//!
//! What a mock records per request, which faults it knows and how it answers stay in the mock.

pub mod cli;
pub mod faults;
pub mod journal;
pub mod server;

pub use faults::Armed;
pub use journal::Recorded;
pub use server::{MockServer, MockState, Shared, lock_shared};

/// Implements [`MockState`] for a mock's state type that keeps its journal in a `journal` field
/// and its fault rules in a `faults` field, optionally with a `settle` function (see
/// [`MockState::settle`]), and [`Recorded`] for the journal entry through the entry's own
/// inherent `is_mutation`:
///
/// ```ignore
/// kube_lb_mock_support::impl_mock_state!(State { journal: JournalEntry, faults: Fault, settle: State::settle });
/// ```
#[macro_export]
macro_rules! impl_mock_state {
    ($state:ty { journal: $entry:ty, faults: $fault:ty $(, settle: $settle:path)? $(,)? }) => {
        impl $crate::MockState for $state {
            type Entry = $entry;
            type Fault = $fault;

            fn journal(&mut self) -> &mut Vec<$entry> {
                &mut self.journal
            }

            fn faults(&mut self) -> &mut Vec<$fault> {
                &mut self.faults
            }

            $(
                fn settle(&mut self) {
                    $settle(self)
                }
            )?
        }

        impl $crate::Recorded for $entry {
            fn is_mutation(&self) -> bool {
                <$entry>::is_mutation(self)
            }
        }
    };
}

/// Gives a mock's test handle (a struct holding its [`MockServer`] in a field) the views and
/// knobs every mock shares, as inherent methods forwarding to that server: `addr`, `journal`,
/// `journal_len`, `journal_since`, `mutations`, `mutations_since`, `clear_journal`, `inject`,
/// `pending_faults`, `clear_faults`, `set_latency`, and a private `lock` for the mock's own
/// methods. It also implements [`MockState`] and [`Recorded`] as [`impl_mock_state!`] does.
///
/// A macro rather than a trait with default methods (or `Deref` to the server) because the
/// mocks' state types are crate-private: a trait impl or `Deref` target would have to name the
/// state in the handle's public interface, which Rust refuses (E0446). Inherent methods also
/// spare every test an import. What differs per mock (`url` returning `String` or `&str`,
/// `endpoint`, `host`) stays in the mock.
///
/// ```ignore
/// kube_lb_mock_support::impl_mock_handle!(MockTencent.server: State {
///     journal: JournalEntry,
///     faults: Fault,
///     settle: State::settle,
/// });
/// ```
#[macro_export]
macro_rules! impl_mock_handle {
    ($handle:ident . $server:ident : $state:ty {
        journal: $entry:ty, faults: $fault:ty $(, settle: $settle:path)? $(,)?
    }) => {
        $crate::impl_mock_state!($state { journal: $entry, faults: $fault $(, settle: $settle)? });

        impl $handle {
            /// The bound address (`127.0.0.1:PORT`).
            pub fn addr(&self) -> ::std::net::SocketAddr {
                self.$server.addr()
            }

            /// Every request so far, oldest first.
            pub fn journal(&self) -> ::std::vec::Vec<$entry> {
                self.$server.journal()
            }

            #[doc = concat!("How many requests so far (a mark for [`", stringify!($handle), "::journal_since`]).")]
            pub fn journal_len(&self) -> usize {
                self.$server.journal_len()
            }

            /// Requests after the first `from` (an exclusive start index into the journal).
            pub fn journal_since(&self, from: usize) -> ::std::vec::Vec<$entry> {
                self.$server.journal_since(from)
            }

            #[doc = concat!("Requests that may have changed state (see [`", stringify!($entry), "::is_mutation`]), answered or refused.")]
            pub fn mutations(&self) -> ::std::vec::Vec<$entry> {
                self.$server.mutations()
            }

            /// Requests after the first `from` that may have changed state.
            pub fn mutations_since(&self, from: usize) -> ::std::vec::Vec<$entry> {
                self.$server.mutations_since(from)
            }

            /// Forgets the journal (e.g. before a resync whose calls are asserted).
            pub fn clear_journal(&self) {
                self.$server.clear_journal();
            }

            /// Arms a fault (after those already armed).
            pub fn inject(&self, fault: $fault) {
                self.$server.inject(fault);
            }

            /// Faults not yet spent.
            pub fn pending_faults(&self) -> usize {
                self.$server.pending_faults()
            }

            /// Disarms every fault not yet spent.
            pub fn clear_faults(&self) {
                self.$server.clear_faults();
            }

            /// Delays every later request by `per_request` before it is answered (zero: no
            /// delay), so benchmarks see a cloud's round trip instead of loopback's.
            pub fn set_latency(&self, per_request: ::std::time::Duration) {
                self.$server.set_latency(per_request);
            }

            /// The mock's state, settled, for the mock's own inspection and seeding methods.
            #[allow(dead_code)] // a mock may have no methods of its own that need it
            fn lock(&self) -> ::std::sync::MutexGuard<'_, $state> {
                self.$server.lock()
            }
        }
    };
}

/// Implements [`Armed`] for a fault rule with `skip` and `times` counters whose outcome is a
/// clone of one of its fields:
///
/// ```ignore
/// kube_lb_mock_support::impl_armed!(Fault { outcome: action: FaultAction });
/// ```
#[macro_export]
macro_rules! impl_armed {
    ($fault:ty { outcome: $field:ident: $outcome:ty $(,)? }) => {
        impl $crate::Armed for $fault {
            type Outcome = $outcome;

            fn countdown(&mut self) -> (&mut u32, &mut u32) {
                (&mut self.skip, &mut self.times)
            }

            fn outcome(&self) -> $outcome {
                self.$field.clone()
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use crate::MockServer;

    #[derive(Debug, Clone, PartialEq)]
    struct Call(&'static str);

    impl Call {
        fn is_mutation(&self) -> bool {
            self.0 != "GET"
        }
    }

    #[derive(Default)]
    struct State {
        journal: Vec<Call>,
        faults: Vec<&'static str>,
        settled: usize,
    }

    impl State {
        fn settle(&mut self) {
            self.settled += 1;
        }
    }

    #[derive(Debug)]
    struct Handle {
        server: MockServer<State>,
    }

    crate::impl_mock_handle!(Handle.server: State {
        journal: Call,
        faults: &'static str,
        settle: State::settle,
    });

    #[tokio::test]
    async fn handle_methods_read_and_arm_the_server() -> std::io::Result<()> {
        let server = MockServer::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            "handle-test",
            |_| State::default(),
            |state| axum::Router::new().with_state(state),
        )
        .await?;
        let handle = Handle { server };
        assert_eq!(handle.addr().ip().to_string(), "127.0.0.1");
        handle
            .lock()
            .journal
            .extend([Call("GET"), Call("PUT"), Call("DELETE")]);
        assert_eq!(handle.journal_len(), 3);
        assert_eq!(handle.journal_since(1), [Call("PUT"), Call("DELETE")]);
        assert_eq!(handle.mutations(), [Call("PUT"), Call("DELETE")]);
        assert_eq!(handle.mutations_since(2), [Call("DELETE")]);
        handle.clear_journal();
        assert!(handle.journal().is_empty());

        handle.inject("first");
        handle.inject("second");
        assert_eq!(handle.pending_faults(), 2);
        assert_eq!(handle.lock().faults, ["first", "second"]);
        handle.clear_faults();
        assert_eq!(handle.pending_faults(), 0);
        handle.set_latency(Duration::from_millis(1));
        // A read through the handle settles the state first, as a request would.
        let before = handle.lock().settled;
        handle.journal_len();
        assert_eq!(handle.lock().settled, before + 2);
        Ok(())
    }
}
