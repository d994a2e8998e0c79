//! HTTP request and result bodies (SPEC §4).
