//! Error codes shared by the gateway and the worker.
