//! `ocm-lab dashboard`: serves the lab picture ([`super::picture`]) to a browser, live.
//!
//! One page, one stylesheet and one script, all compiled into the binary (`dashboard/`), so the page works
//! with the network off; its Content-Security-Policy lets it load nothing from anywhere else. The page
//! opens `/events`, a server-sent event stream that sends the picture as JSON at once and again each time
//! the lookout publishes a different one; `/picture.json` is the current picture for scripts.
//!
//! It serves on 127.0.0.1 unless `--listen` names another address; then every request for the lab's data
//! must carry a random token (`?token=` in the URL, which the page passes on to its event stream, or
//! `Authorization: Bearer`). The stylesheet and the script hold no lab data and need none.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::picture::{Looker, Picture};
use super::runner::runtime;
use crate::cli::{DashboardArgs, RunArgs};
use crate::error::Error;

const PAGE: &str = include_str!("dashboard/index.html");
const STYLE: &str = include_str!("dashboard/dashboard.css");
const SCRIPT: &str = include_str!("dashboard/dashboard.js");

/// Nothing but the page's own origin: no CDN, no font service, no image from elsewhere.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// What every request handler shares.
#[derive(Clone)]
struct App {
    pictures: watch::Receiver<Arc<Picture>>,
    /// Required when serving beyond loopback.
    token: Option<Arc<str>>,
    /// Cancelled on Ctrl-C: the event streams end, so the server can stop.
    stop: CancellationToken,
}

/// `ocm-lab dashboard`: serves until Ctrl-C, then exits 0.
pub fn run(args: &DashboardArgs, host: &crate::topology::Host) -> Result<(), Error> {
    let run_args = RunArgs::from(args);
    let (lab, state, patches) = super::runner::look_at(&run_args, host)?;
    let mut looker = Looker::new(run_args, lab, state, patches)?;
    let first = looker.look()?;
    let rt = runtime()?;
    let wanted = SocketAddr::new(args.listen, args.port);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(wanted))
        .map_err(|source| Error::Serve {
            addr: wanted,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Serve {
        addr: wanted,
        source,
    })?;
    let token = (!args.listen.is_loopback()).then(new_token).transpose()?;
    super::stdout(&announce(&first, addr, token.as_deref()))?;
    let stop = CancellationToken::new();
    let (pictures, lookout) = looker.keep_looking(first, stop.clone());
    let app = App {
        pictures,
        token: token.map(Arc::from),
        stop: stop.clone(),
    };
    let served = rt.block_on(async move {
        axum::serve(listener, router(app))
            .with_graceful_shutdown(async move {
                let _ = tokio::signal::ctrl_c().await;
                stop.cancel();
            })
            .await
    });
    rt.shutdown_background();
    let _ = lookout.join();
    served.map_err(|source| Error::Serve { addr, source })
}

fn router(app: App) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/dashboard.css", get(|| async { asset("text/css", STYLE) }))
        .route(
            "/dashboard.js",
            get(|| async { asset("text/javascript", SCRIPT) }),
        )
        .route("/picture.json", get(picture))
        .route("/events", get(events))
        .with_state(app)
}

/// Where to point a browser, printed once the port is known.
fn announce(first: &Picture, addr: SocketAddr, token: Option<&str>) -> String {
    let sim = if first.simulated {
        " (SIMULATED lab: a test double, not real clusters)"
    } else {
        ""
    };
    let query = token.map(|t| format!("?token={t}")).unwrap_or_default();
    let mut text = format!("Dashboard of lab `{}`{sim}\n", first.lab);
    if addr.ip().is_unspecified() {
        let local = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), addr.port());
        text.push_str(&format!(
            "  http://{local}/{query}\n  from other machines: this machine's address, port {}, the same token\n",
            addr.port()
        ));
    } else {
        text.push_str(&format!("  http://{addr}/{query}\n"));
    }
    if token.is_some() {
        text.push_str("  Anyone with this URL sees the lab: share it only with the room.\n");
    }
    text.push_str("Ctrl-C stops it.\n");
    text
}

/// 128 random bits, hex: the token a dashboard beyond loopback requires.
fn new_token() -> Result<String, Error> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| Error::Runtime(std::io::Error::other("no system randomness for the token")))?;
    Ok(hex::encode(bytes))
}

impl App {
    /// Whether no token is required, or the request carries it.
    fn admits(&self, uri: &Uri, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let from_query = uri
            .query()
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter_map(|kv| kv.strip_prefix("token="));
        let from_header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        from_query.chain(from_header).any(|t| same(t, token))
    }
}

/// The answer to a request without the token.
fn denied() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        "This dashboard serves beyond 127.0.0.1 and needs its token: open the URL `ocm-lab dashboard` printed, with its ?token=.\n",
    )
        .into_response()
}

/// Compares in time that does not depend on where the strings differ.
fn same(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut r = body.into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

async fn page(State(app): State<App>, uri: Uri, headers: HeaderMap) -> Response {
    if !app.admits(&uri, &headers) {
        return denied();
    }
    let mut r = asset("text/html; charset=utf-8", PAGE);
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

async fn picture(State(app): State<App>, uri: Uri, headers: HeaderMap) -> Response {
    if !app.admits(&uri, &headers) {
        return denied();
    }
    let json = serde_json::to_string(&**app.pictures.borrow()).expect("pictures serialize");
    let mut r = json.into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// The picture now, then each new one, until the dashboard stops.
async fn events(State(app): State<App>, uri: Uri, headers: HeaderMap) -> Response {
    if !app.admits(&uri, &headers) {
        return denied();
    }
    let start = (app.pictures.clone(), app.stop.clone(), true);
    let stream = futures::stream::unfold(start, |(mut rx, stop, first)| async move {
        if !first {
            tokio::select! {
                changed = rx.changed() => changed.ok()?,
                () = stop.cancelled() => return None,
            }
        }
        let json = serde_json::to_string(&**rx.borrow_and_update()).expect("pictures serialize");
        let event = Event::default().event("picture").data(json);
        Some((Ok::<_, Infallible>(event), (rx, stop, false)))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_matches_only_itself() {
        assert!(same("0a1b", "0a1b"));
        assert!(!same("0a1c", "0a1b"));
        assert!(!same("0a1", "0a1b"));
        assert!(!same("", "0a1b"));
    }
}
