//! The service secret: 256 random bits `pedelecd` makes when it starts and
//! hands to every service it spawns over the service's stdin — never through
//! the environment, which agents inherit from ProviderService, nor on argv,
//! which `ps` shows to every local user. Internal RPCs, the ones only other
//! Pedelec services call (docs/security.md lists them), require it as
//! [`SERVICE_SECRET_HEADER`] metadata: [`crate::Clients`] attaches it and
//! [`InternalGate`] checks it, in constant time.
//!
//! A service started by hand, without `--service-secret-stdin`, has no
//! secret: its internal RPCs then answer every process of the user (as
//! before the secret existed), and it says so in its log at start.

use std::fmt;
use std::io::Read;

use tonic::metadata::{Ascii, MetadataValue};

use crate::error::CommonError;
use crate::{SERVICE_SECRET_HEADER, ids};

/// The secret as 64 hex digits: how it travels on stdin and in metadata.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceSecret(String);

/// Hex digits of a secret.
const SECRET_LEN: usize = 64;

impl ServiceSecret {
    /// A new secret: 256 bits from the OS generator.
    pub fn generate() -> ServiceSecret {
        ServiceSecret(ids::new_secret())
    }

    /// Reads the secret a launcher handed over: 64 hex digits, an optional
    /// line end, then the end of the stream.
    pub fn read_from(reader: impl Read) -> Result<ServiceSecret, CommonError> {
        let mut text = String::new();
        // One byte more than a secret and its line end: anything longer is not one.
        reader
            .take(SECRET_LEN as u64 + 2)
            .read_to_string(&mut text)
            .map_err(|e| CommonError::BadServiceSecret(format!("cannot read it: {e}")))?;
        let hex = text.strip_suffix('\n').unwrap_or(&text);
        if hex.len() != SECRET_LEN || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(CommonError::BadServiceSecret(format!(
                "expected {SECRET_LEN} hex digits, got {} bytes",
                text.len()
            )));
        }
        Ok(ServiceSecret(hex.to_ascii_lowercase()))
    }

    /// The form [`ServiceSecret::read_from`] reads.
    pub fn to_line(&self) -> String {
        format!("{}\n", self.0)
    }

    pub(crate) fn header_value(&self) -> MetadataValue<Ascii> {
        MetadataValue::try_from(self.0.as_str()).expect("hex digits are a valid header value")
    }

    fn matches(&self, given: &[u8]) -> bool {
        ids::same_secret(self.0.as_bytes(), given)
    }
}

/// Never printed: logs and panics must not carry it.
impl fmt::Debug for ServiceSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServiceSecret(…)")
    }
}

/// What a service asks of the callers of its internal RPCs: the secret it
/// was handed, or nothing when it was started without one.
#[derive(Clone, Debug, Default)]
pub struct InternalGate(Option<ServiceSecret>);

impl InternalGate {
    pub fn new(secret: Option<ServiceSecret>) -> InternalGate {
        InternalGate(secret)
    }

    /// Lets `request` through to the internal RPC `rpc` when it carries the
    /// service secret; `SERVICE_ACCESS_DENIED` otherwise. Call it first, so a
    /// refused request changes nothing.
    pub fn check<T>(
        &self,
        request: &tonic::Request<T>,
        rpc: &'static str,
    ) -> Result<(), tonic::Status> {
        let Some(secret) = &self.0 else {
            return Ok(());
        };
        let given = request.metadata().get(SERVICE_SECRET_HEADER);
        if given.is_some_and(|v| secret.matches(v.as_bytes())) {
            return Ok(());
        }
        tracing::warn!(
            rpc,
            presented = given.is_some(),
            "refused an internal RPC from a caller without the service secret"
        );
        let e = CommonError::ServiceAccessDenied {
            rpc,
            presented: given.is_some(),
        };
        Err(crate::CodedError::from(e).to_status())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Code;

    fn request(secret: Option<&str>) -> tonic::Request<()> {
        let mut req = tonic::Request::new(());
        if let Some(s) = secret {
            req.metadata_mut()
                .insert(SERVICE_SECRET_HEADER, s.parse().unwrap());
        }
        req
    }

    #[test]
    fn a_secret_reads_back_from_its_line() {
        let secret = ServiceSecret::generate();
        let read = ServiceSecret::read_from(secret.to_line().as_bytes()).unwrap();
        assert_eq!(read, secret);
        // Without the line end, too.
        let bare = secret.to_line();
        let read = ServiceSecret::read_from(bare.trim_end().as_bytes()).unwrap();
        assert_eq!(read, secret);
    }

    #[test]
    fn anything_but_a_secret_on_stdin_is_refused() {
        let good = ServiceSecret::generate().to_line();
        for bad in [
            String::new(),
            "abc\n".to_string(),
            format!("{good}x"),
            format!("{}zz\n", &good[..62]),
            format!("{good}{good}"),
        ] {
            let err = ServiceSecret::read_from(bad.as_bytes()).unwrap_err();
            assert!(
                matches!(err, CommonError::BadServiceSecret(_)),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn the_gate_admits_only_the_secret() {
        let secret = ServiceSecret::generate();
        let gate = InternalGate::new(Some(secret.clone()));
        gate.check(&request(Some(&secret.0)), "Register").unwrap();
        let other = ServiceSecret::generate();
        for given in [
            None,
            Some(other.0.as_str()),
            Some(""),
            Some(&secret.0[..63]),
        ] {
            let status = gate.check(&request(given), "Register").unwrap_err();
            assert_eq!(
                crate::code_of_status(&status).as_deref(),
                Some(Code::SERVICE_ACCESS_DENIED.as_str()),
                "{given:?}"
            );
            assert!(status.message().contains("Register"), "{status:?}");
        }
    }

    #[test]
    fn a_gate_without_a_secret_admits_everyone() {
        InternalGate::default()
            .check(&request(None), "Register")
            .unwrap();
    }

    #[test]
    fn the_secret_is_never_printed() {
        let secret = ServiceSecret::generate();
        let shown = format!("{secret:?} {:?}", InternalGate::new(Some(secret.clone())));
        assert!(!shown.contains(&secret.0), "{shown}");
    }
}
