//! Node dataplane: model, nftables renderer, userspace proxy, health servers.
