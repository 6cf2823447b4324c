//! The console's page: plain HTML, CSS and JavaScript modules in `assets/`, embedded in the
//! binary (no build step, no Node toolchain, nothing fetched from elsewhere: the page works
//! offline). Served without a token: the data comes from the API, which wants one.

use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

/// An embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const JS: &str = "text/javascript; charset=utf-8";

/// Every file under `/ui/`, by name.
const ASSETS: &[Asset] = &[
    Asset {
        name: "console.css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("assets/console.css"),
    },
    Asset {
        name: "app.js",
        content_type: JS,
        body: include_str!("assets/app.js"),
    },
    Asset {
        name: "api.js",
        content_type: JS,
        body: include_str!("assets/api.js"),
    },
    Asset {
        name: "dom.js",
        content_type: JS,
        body: include_str!("assets/dom.js"),
    },
    Asset {
        name: "overview.js",
        content_type: JS,
        body: include_str!("assets/overview.js"),
    },
    Asset {
        name: "runs.js",
        content_type: JS,
        body: include_str!("assets/runs.js"),
    },
    Asset {
        name: "run.js",
        content_type: JS,
        body: include_str!("assets/run.js"),
    },
    Asset {
        name: "graph.js",
        content_type: JS,
        body: include_str!("assets/graph.js"),
    },
    Asset {
        name: "catalog.js",
        content_type: JS,
        body: include_str!("assets/catalog.js"),
    },
];

/// Only this origin's scripts, styles and API; no frames.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; \
                                       frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

fn asset_response(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // A new binary brings new files: the browser asks again each time.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the page.
pub(crate) async fn index() -> Response {
    asset_response(
        "text/html; charset=utf-8",
        include_str!("assets/index.html"),
    )
}

/// `GET /ui/{file}`.
pub(crate) async fn file(
    path: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let name = path.map(|Path(n)| n).unwrap_or_default();
    match ASSETS.iter().find(|a| a.name == name) {
        Some(a) => asset_response(a.content_type, a.body),
        None => (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    }
}

/// Bytes of every embedded file (the page's weight, uncompressed).
#[cfg(test)]
fn total_bytes() -> usize {
    include_str!("assets/index.html").len() + ASSETS.iter().map(|a| a.body.len()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_module_the_page_imports_is_embedded() {
        let names: Vec<&str> = ASSETS.iter().map(|a| a.name).collect();
        let sources = ASSETS
            .iter()
            .map(|a| a.body)
            .chain([include_str!("assets/index.html")]);
        for source in sources {
            for part in source.split(['"', '\'']) {
                let Some(file) = part.strip_prefix("./").or(part.strip_prefix("/ui/")) else {
                    continue;
                };
                if file.ends_with(".js") || file.ends_with(".css") {
                    assert!(names.contains(&file), "{file} is imported but not embedded");
                }
            }
        }
        assert!(
            total_bytes() < 256 << 10,
            "the page stays small: {}",
            total_bytes()
        );
    }
}
