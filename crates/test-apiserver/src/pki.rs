//! The throwaway key material of one control plane: a CA that signs the API server's serving
//! certificate and every client certificate, and the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use crate::Error;

/// A certificate and its private key, both PEM.
#[derive(Clone)]
pub struct KeyPairPem {
    /// The certificate.
    pub cert_pem: String,
    /// Its private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for KeyPairPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPairPem").finish_non_exhaustive()
    }
}

/// A CA that exists for one control plane only.
pub struct Authority {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl Authority {
    pub(crate) fn generate() -> Result<Self, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "omni-operator test control plane CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        Ok(Self { issuer })
    }

    /// The CA certificate, PEM (a kubeconfig's `certificate-authority-data`, a `caBundle`).
    pub fn cert_pem(&self) -> String {
        self.issuer.pem()
    }

    /// A serving certificate for `hosts` (DNS names or IP addresses).
    pub fn server(&self, hosts: &[&str]) -> Result<KeyPairPem, Error> {
        let mut params =
            CertificateParams::new(hosts.iter().map(|h| (*h).to_string()).collect::<Vec<_>>())?;
        if let Some(first) = hosts.first() {
            params.distinguished_name.push(DnType::CommonName, *first);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate the API server authenticates as `user` in `groups` (CN and O).
    pub fn client(&self, user: &str, groups: &[&str]) -> Result<KeyPairPem, Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        // rcgen keeps one value per attribute type; the API server reads every O, so a second
        // group needs a second attribute of the same OID under another key.
        for (i, group) in groups.iter().enumerate() {
            let ty = match i {
                0 => DnType::OrganizationName,
                _ => DnType::CustomDnType(vec![2, 5, 4, 10]),
            };
            params.distinguished_name.push(ty, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, mut params: CertificateParams) -> Result<KeyPairPem, Error> {
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(KeyPairPem {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A fresh ECDSA P-256 key pair, PEM: the service-account token signing key (PKCS#8) and its
/// public key (SPKI), which the API server verifies tokens with.
pub(crate) fn signing_key() -> Result<(String, String), Error> {
    let key = KeyPair::generate()?;
    Ok((key.serialize_pem(), key.public_key_pem()))
}
