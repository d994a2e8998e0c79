//! `GET /v1/manifests`: the publisher's signed epoch manifests (`docs/spec/signed.md` §4.2),
//! the file of `--manifests` as it is when the request comes; `GET /v1/tables/NAME/manifests`:
//! the table's, its file of `--table-manifests NAME=FILE`.
//!
//! The file is read at every request (a client reads it about once per epoch), so an operator
//! installs a new one by renaming it over the old. The gateway checks its shape, not its
//! signatures: each manifest is signed by the publisher and the client verifies it, so a
//! party can withhold manifests but never forge them. Open like `/v1/info`: a client reads
//! them before it trusts an answer.

use std::io::Read;
use std::path::Path;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use pirq_shared::error::ErrorCode;
use pirq_shared::signing::Manifest;
use pirq_shared::wire::JSON;

use crate::error::ApiError;
use crate::state::AppState;

/// The largest manifest file served (and what a client reads at most): one manifest per epoch,
/// about 250 bytes plus 8 to 20 a replaced page.
pub const MAX_MANIFESTS_BYTES: u64 = 32 << 20;

pub async fn manifests(State(st): State<AppState>) -> Result<Response, ApiError> {
    let Some(path) = st.config.manifests_of(&st.table).map(Path::to_path_buf) else {
        let message = if &*st.table == pirq_shared::layout::DEFAULT_TABLE {
            "this party serves no publisher manifests (its gateway runs without --manifests)"
                .to_string()
        } else {
            format!(
                "this party serves no publisher manifests for the table {} (its gateway runs \
                 without --table-manifests {0}=FILE)",
                st.table
            )
        };
        return Err(ApiError::new(ErrorCode::NoManifests, message));
    };
    let bytes = tokio::task::spawn_blocking(move || read(&path))
        .await
        .map_err(|_| ApiError::new(ErrorCode::Internal, "reading the manifest file failed"))??;
    Ok((
        [
            (header::CONTENT_TYPE, JSON),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        bytes,
    )
        .into_response())
}

/// The file's bytes, once they are known to be a manifest list of at most
/// [`MAX_MANIFESTS_BYTES`]. A missing file is "none yet" (404); an unreadable, oversized or
/// malformed one is the operator's to fix (500, and a warning naming the file).
fn read(path: &Path) -> Result<Vec<u8>, ApiError> {
    let broken = |why: String| {
        tracing::warn!(file = %path.display(), "--manifests: {why}");
        ApiError::new(
            ErrorCode::Internal,
            "the party's manifest file cannot be served (its operator is told why)",
        )
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ApiError::new(
                ErrorCode::NoManifests,
                "this party has no publisher manifests yet (its --manifests file is not there)",
            ))
        }
        Err(e) => return Err(broken(e.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_MANIFESTS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| broken(e.to_string()))?;
    if bytes.len() as u64 > MAX_MANIFESTS_BYTES {
        return Err(broken(format!(
            "larger than {MAX_MANIFESTS_BYTES} bytes, the most a client reads"
        )));
    }
    Manifest::parse_list(&bytes).map_err(|e| broken(e.to_string()))?;
    Ok(bytes)
}
