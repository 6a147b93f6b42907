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
