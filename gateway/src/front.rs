//! The one middleware of every route: what each request passes between the router and its
//! handler, in this order:
//!
//! 1. the head's size ([`crate::server::check_head`]: 414, 431);
//! 2. axum's default body limit turned off (bodies are read by [`crate::body`] with each
//!    route's own limit);
//! 3. the request counted and timed by route, method, status and table
//!    ([`crate::metrics::Tracked`]);
//! 4. on the query routes, the tokens and rates of [`crate::access`] (401, 429), before any
//!    body is read.
//!
//! Why one hand-written layer and not a `from_fn` middleware each: axum's `from_fn` boxes the
//! inner service and the future once more per layer per request, clones the inner service chain
//! (and the state inside it) per request, and moves the handler's large future through each
//! box; on one gateway thread that was ~10 % of the CPU a query (docs/bench/host-path.md).
//! Here a request costs the one box axum's `route_layer` makes anyway. The router's 404 and 405
//! fallbacks check the head themselves, so the 414 and 431 answers do not depend on a route.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::{DefaultBodyLimit, Request};
use axum::response::{IntoResponse, Response};
use tower::{Layer, Service};

use crate::access::Access;
use crate::metrics::{RouteMetrics, Tracked};

/// The layer of one route: its template for the metrics, and the access rules when the route
/// needs them (`Route::needs_query_access`).
#[derive(Clone)]
pub struct Front {
    /// The route's request metrics, their handles kept ([`RouteMetrics`]).
    metrics: Arc<RouteMetrics>,
    access: Option<Access>,
}

impl Front {
    /// The layer of the route at `route` (its template, `/v1/queries/{id}`), checked against
    /// `access` when given.
    pub fn new(route: &'static str, access: Option<Access>) -> Front {
        Front {
            metrics: Arc::new(RouteMetrics::new(route)),
            access,
        }
    }
}

impl<S> Layer<S> for Front {
    type Service = FrontService<S>;

    fn layer(&self, inner: S) -> FrontService<S> {
        FrontService {
            front: self.clone(),
            inner,
        }
    }
}

/// A route's service behind its [`Front`].
#[derive(Clone)]
pub struct FrontService<S> {
    front: Front,
    inner: S,
}

impl<S> Service<Request> for FrontService<S>
where
    S: Service<Request, Response = Response, Error = Infallible>,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request) -> Self::Future {
        if let Err(refused) = crate::server::check_head(&req) {
            return Box::pin(std::future::ready(Ok(refused.into_response())));
        }
        DefaultBodyLimit::disable().apply(&mut req);
        let tracked = Tracked::start(&req);
        let admitted = match &self.front.access {
            Some(access) => access.check(&req),
            None => Ok(()),
        };
        // The handler's future is made here, outside the box below: only its handle moves.
        let answer = admitted.map(|()| self.inner.call(req));
        let metrics = self.front.metrics.clone();
        Box::pin(async move {
            let resp = match answer {
                Ok(handled) => handled.await?,
                Err(denied) => denied.into_response(),
            };
            tracked.finish(&metrics, &resp);
            Ok(resp)
        })
    }
}
