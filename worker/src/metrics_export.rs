//! The worker's listener (`--metrics-listen`): `GET /metrics` (Prometheus, with the catalog's
//! buckets and help), `GET /healthz` and `GET /readyz` ([`crate::health`]); any other path is
//! 404 and any other method 405.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use pirq_shared::metrics::Emitter;
use serde_json::json;

use crate::health::Health;

#[derive(Clone)]
struct Listener {
    metrics: PrometheusHandle,
    health: Arc<Health>,
}

/// Installs the recorder, binds `addr` and serves it on the current Tokio runtime. A shard's
/// worker labels every series with `shard="I/S"`, so dashboards split pass time, keys and jobs
/// per shard. Binding is done before this returns, so a taken port is a start-up error.
pub async fn install(
    addr: SocketAddr,
    shard: Option<pirq_shared::shard::ShardSpec>,
    health: Arc<Health>,
) -> anyhow::Result<()> {
    let mut builder = pirq_party::metrics::builder(Emitter::Worker)?;
    if let Some(spec) = shard {
        builder = builder.add_global_label("shard", spec.to_string());
    }
    let metrics = builder.install_recorder()?;
    pirq_party::metrics::described(Emitter::Worker);
    pirq_party::metrics::spawn_upkeep(metrics.clone());

    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = router(Listener { metrics, health });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

fn router(state: Listener) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

async fn metrics(State(st): State<Listener>) -> impl IntoResponse {
    // Readiness as a series too, for alerts (no ready worker) and the dashboard.
    let ready = st.health.ready().await.is_ok();
    metrics::gauge!(pirq_shared::metrics::WORKER_READY).set(if ready { 1.0 } else { 0.0 });
    st.metrics.run_upkeep();
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        st.metrics.render(),
    )
}

/// Liveness: this answer itself shows the runtime that runs the worker's loops is not stuck.
async fn healthz(State(st): State<Listener>) -> impl IntoResponse {
    Json(json!({"status": "ok", "stage": format!("{:?}", st.health.stage()).to_lowercase()}))
}

async fn readyz(State(st): State<Listener>) -> impl IntoResponse {
    match st.health.ready().await {
        Ok(()) => (StatusCode::OK, Json(json!({"status": "ready"}))),
        Err(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "not_ready", "reason": reason})),
        ),
    }
}
