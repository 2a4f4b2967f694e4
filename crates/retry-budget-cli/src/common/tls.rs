//! TLS for `retry-budget get https://…`: rustls (with the *ring* provider)
//! through hyper-rustls.
//!
//! The roots are the platform's (the system certificate store, read by
//! `rustls-native-certs`), or, with `--cacert FILE`, only the certificates
//! in that PEM file, as curl's `--cacert` does: the way to trust a private
//! CA. Plain `http://` URLs need no roots at all.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

/// The client's TLS configuration; `https` says whether the URL needs one
/// (for `http://` an empty root store is enough and nothing is read).
///
/// # Errors
///
/// A one-line message for the user: an unreadable or empty `--cacert`
/// file, or no usable platform roots.
pub fn client_config(cacert: Option<&Path>, https: bool) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore::empty();
    match cacert {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    format!(
                        "--cacert {}: cannot read PEM certificates ({e})",
                        path.display()
                    )
                })?;
            if certs.is_empty() {
                return Err(format!(
                    "--cacert {}: no certificate in the file",
                    path.display()
                ));
            }
            for cert in certs {
                roots.add(cert).map_err(|e| {
                    format!(
                        "--cacert {}: not a usable CA certificate ({e})",
                        path.display()
                    )
                })?;
            }
        }
        None if https => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
            if roots.is_empty() {
                return Err("no trusted root certificates found on this system: give one with --cacert FILE".into());
            }
        }
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_needs_no_roots() {
        assert!(client_config(None, false).is_ok());
    }

    #[test]
    fn a_missing_or_empty_cacert_is_a_clear_error() {
        let err = client_config(Some(Path::new("/nonexistent/ca.pem")), true).unwrap_err();
        assert!(
            err.starts_with("--cacert /nonexistent/ca.pem: cannot read"),
            "{err}"
        );
        let empty =
            std::env::temp_dir().join(format!("retry-budget-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let err = client_config(Some(&empty), true).unwrap_err();
        let _ = std::fs::remove_file(&empty);
        assert!(err.contains("no certificate"), "{err}");
    }
}
