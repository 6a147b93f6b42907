//! AWS Classic ELB and NLB provider.
