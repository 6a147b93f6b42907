//! In-memory Kubernetes API server.
