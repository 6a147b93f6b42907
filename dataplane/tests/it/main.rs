//! The crate's integration tests, linked as one test binary: a file under `tests/` is a binary
//! of its own that links every dependency again, which cost CI minutes of linking and gigabytes
//! of disk. Each former binary is a module here, so its tests keep their names under it.

#[macro_use]
mod support;
mod bgp_netns;
mod l2_netns;
mod maglev_netns;
mod nft_in_process;
mod nft_netns;
mod nft_node_netns;
mod nft_repair_netns;
mod proxy_apiserver;
mod topology_field;
mod userspace;
mod userspace_netns;
mod userspace_state;
