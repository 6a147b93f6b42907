//! Embedded provider: IP pool on this machine.
