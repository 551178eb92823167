//! The emulator's PKI: a fresh self-signed CA (rcgen) and a server certificate signed by it for
//! `127.0.0.1`, `localhost` and `antrea.kube-system.svc` (the name the Go agent verifies for
//! antrea-controller), and the rustls 0.23 (ring) server configuration serving it.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// Why certificates or the TLS configuration could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("generating certificates: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS server configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// Subject alternative names of the server certificate (plus any extra ones asked for).
pub const SERVER_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "antrea.kube-system.svc"];

/// A CA and the server certificate it signed.
pub struct Pki {
    pub ca_pem: String,
    pub server_cert_pem: String,
    server_cert_der: CertificateDer<'static>,
    ca_der: CertificateDer<'static>,
    server_key_der: Vec<u8>,
}

impl Pki {
    /// Generates a new CA and server certificate (ECDSA P-256).
    pub fn generate(extra_names: &[String]) -> Result<Pki, CertError> {
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "antrea-api-emulator-ca");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, &ca_key);

        let mut names: Vec<String> = SERVER_NAMES.iter().map(|s| s.to_string()).collect();
        names.extend(extra_names.iter().cloned());
        let server_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params
            .distinguished_name
            .push(DnType::CommonName, "antrea-api-emulator");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let server_cert = params.signed_by(&server_key, &issuer)?;
        Ok(Pki {
            ca_pem: ca_cert.pem(),
            server_cert_pem: server_cert.pem(),
            server_cert_der: server_cert.der().clone(),
            ca_der: ca_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
        })
    }

    /// The rustls server configuration: the server certificate followed by the CA (chain),
    /// HTTP/1.1 only (actix adds the ALPN protocol).
    pub fn server_config(&self) -> Result<rustls::ServerConfig, CertError> {
        // An explicit provider: the process may have several rustls backends compiled in.
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.server_key_der.clone()));
        Ok(rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.server_cert_der.clone(), self.ca_der.clone()], key)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_a_usable_server_config() {
        let pki = Pki::generate(&["emulator.test".into()]).unwrap();
        assert!(pki.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_ne!(pki.ca_pem, pki.server_cert_pem);
        pki.server_config().unwrap();
    }
}
