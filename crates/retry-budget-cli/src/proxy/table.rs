//! The routes one worker serves, each with its client stack, and which
//! one a request takes:
//!
//! 1. a route whose `match.host` is the request's host: an absolute-form
//!    target's (`GET http://api.example.com/...`, as an `HTTP_PROXY`-style
//!    client sends it), else `Host` (or HTTP/2's `:authority`); a pattern
//!    without a port matches any port;
//! 2. an absolute-form target whose host no route names is refused (421):
//!    it never selects an upstream of its own;
//! 3. the longest `match.prefix` the path is under, at a segment boundary
//!    (`/openai` takes `/openai` and `/openai/x`, not `/openaix`); the
//!    prefix is stripped before the path is mapped under the upstream;
//! 4. the route that takes every request (the flags' one route);
//! 5. otherwise refused: 404 (no prefix matches), or 421 where only host
//!    routes exist.
//!
//! Made once per configuration (at start-up and on each reload), not per
//! request; selecting is a scan of a few strings, no allocation.

use std::sync::Arc;

use http::header::HOST;
use http::request::Parts;
use http::Version;

use super::route::{Match, RouteConfig};
use super::stack::Stack;

/// One route of a worker: its configuration and its client stack.
#[derive(Debug)]
pub struct Route {
    /// The checked route.
    pub config: Arc<RouteConfig>,
    /// Its client stack on this worker.
    pub stack: Stack,
    /// Its name for the log line and span, this worker's own copy (none
    /// for the flags' one route).
    pub name: Option<Arc<str>>,
}

/// Why no route takes a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Miss {
    /// No prefix matches the path (404).
    NoPrefix,
    /// No route names the request's host (421).
    UnknownHost,
}

/// A worker's routes; see the [module docs](self).
#[derive(Debug)]
pub struct Table {
    routes: Vec<Route>,
    /// `(host, port if it must match, route)`.
    hosts: Vec<(String, Option<String>, usize)>,
    /// `(prefix, route)`, longest first.
    prefixes: Vec<(String, usize)>,
    any: Option<usize>,
}

impl Table {
    /// The table of `routes` (in their configured order).
    pub fn new(routes: Vec<Route>) -> Self {
        let mut table = Self {
            hosts: Vec::new(),
            prefixes: Vec::new(),
            any: None,
            routes: Vec::new(),
        };
        for (index, route) in routes.iter().enumerate() {
            match &route.config.matcher {
                Match::Any => table.any = table.any.or(Some(index)),
                Match::Prefix(prefix) => table.prefixes.push((prefix.clone(), index)),
                Match::Host(pattern) => {
                    let (host, port) = split_host(pattern);
                    table
                        .hosts
                        .push((host.to_owned(), port.map(str::to_owned), index));
                }
            }
        }
        table
            .prefixes
            .sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        table.routes = routes;
        table
    }

    /// The route `parts` takes, and how many bytes of its path the route's
    /// prefix covers (stripped before the path is mapped).
    ///
    /// # Errors
    ///
    /// No route takes it ([`Miss`]).
    pub fn select(&self, parts: &Parts) -> Result<(&Route, usize), Miss> {
        if !self.hosts.is_empty() {
            let absolute = parts.version != Version::HTTP_2 && parts.uri.authority().is_some();
            let host = if absolute {
                parts.uri.authority().map(http::uri::Authority::as_str)
            } else {
                parts
                    .headers
                    .get(HOST)
                    .and_then(|v| v.to_str().ok())
                    .or_else(|| parts.uri.authority().map(http::uri::Authority::as_str))
            };
            if let Some(index) = host.and_then(|host| self.host_route(host)) {
                return Ok((&self.routes[index], 0));
            }
            if absolute {
                return Err(Miss::UnknownHost);
            }
        }
        let path = parts.uri.path();
        for (prefix, index) in &self.prefixes {
            if under(path, prefix) {
                return Ok((&self.routes[*index], prefix.len()));
            }
        }
        match self.any {
            Some(index) => Ok((&self.routes[index], 0)),
            None if self.prefixes.is_empty() => Err(Miss::UnknownHost),
            None => Err(Miss::NoPrefix),
        }
    }

    /// The route named by `authority`'s host (and port, if the pattern
    /// has one).
    fn host_route(&self, authority: &str) -> Option<usize> {
        let (host, port) = split_host(authority);
        self.hosts
            .iter()
            .find(|(want, want_port, _)| {
                want.eq_ignore_ascii_case(host)
                    && want_port.as_deref().is_none_or(|p| Some(p) == port)
            })
            .map(|(_, _, index)| *index)
    }
}

/// Whether `path` is `prefix` or under it, at a segment boundary.
fn under(path: &str, prefix: &str) -> bool {
    path.starts_with(prefix)
        && (path.len() == prefix.len() || path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// `host[:port]` split (`[v6]:port` too).
pub fn split_host(authority: &str) -> (&str, Option<&str>) {
    if authority.starts_with('[') {
        return match authority.split_once("]:") {
            Some((host, port)) => (&authority[..=host.len()], Some(port)),
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_match_at_segment_boundaries() {
        assert!(under("/openai", "/openai"));
        assert!(under("/openai/", "/openai"));
        assert!(under("/openai/v1/x", "/openai"));
        assert!(!under("/openaix", "/openai"));
        assert!(!under("/open", "/openai"));
    }

    #[test]
    fn hosts_split_from_their_ports() {
        assert_eq!(split_host("a.test:8080"), ("a.test", Some("8080")));
        assert_eq!(split_host("a.test"), ("a.test", None));
        assert_eq!(split_host("[::1]:80"), ("[::1]", Some("80")));
        assert_eq!(split_host("[::1]"), ("[::1]", None));
    }
}
