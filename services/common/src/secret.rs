//! The service secret: 256 random bits `pedelecd` makes when it starts and
//! hands to every service it spawns over the service's stdin — never through
//! the environment, which agents inherit from ProviderService, nor on argv,
//! which `ps` shows to every local user. Internal RPCs, the ones only other
//! Pedelec services call (docs/security.md lists them), require it as
//! [`SERVICE_SECRET_HEADER`] metadata: [`crate::Clients`] attaches it and
//! [`InternalGate`] checks it, in constant time.
//!
//! The hand-over ([`hand_over`], [`receive`]): the launcher starts a service
//! with one end of a socket pair as stdin; the service makes itself
//! non-dumpable, writes [`READY`] on it, and only then does the launcher
//! write the secret — once it has seen that no process traces the service
//! (an attach from the short time before the service was non-dumpable would
//! survive it). The launcher then closes its end, so the service reads the
//! secret to the end of the stream.
//!
//! A service started by hand, without `--service-secret-stdin`, has no
//! secret: its internal RPCs then answer every process of the user (as
//! before the secret existed), and it says so in its log at start.

use std::fmt;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use tonic::metadata::{Ascii, MetadataValue};

use crate::error::CommonError;
use crate::{SERVICE_SECRET_HEADER, ids};

/// The secret as 64 hex digits: how it travels on stdin and in metadata.
#[derive(Clone, PartialEq, Eq)]
pub struct ServiceSecret(String);

/// Hex digits of a secret.
const SECRET_LEN: usize = 64;

/// What a service writes on its stdin once it is non-dumpable.
pub const READY: u8 = b'R';

/// How long the launcher waits for a fresh service's [`READY`]: as long as
/// it waits for its health.
pub const READY_WITHIN: Duration = Duration::from_secs(10);

/// The launcher's side of the hand-over to the service process `pid`, on the
/// launcher's end of the socket pair that is the service's stdin. Writes the
/// secret only after the service said it is non-dumpable and while nothing
/// traces it; otherwise closes the socket unwritten, and the service, which
/// then reads no secret, exits (to be restarted).
pub async fn hand_over(
    mut socket: tokio::net::UnixStream,
    pid: u32,
    secret: &ServiceSecret,
) -> Result<(), String> {
    let mut ready = [0u8; 1];
    match tokio::time::timeout(READY_WITHIN, socket.read(&mut ready)).await {
        Err(_) => return Err(format!("no word from the service within {READY_WITHIN:?}")),
        Ok(Err(e)) => return Err(format!("reading its word: {e}")),
        Ok(Ok(0)) => return Err("it exited or closed its stdin first".into()),
        Ok(Ok(_)) if ready[0] != READY => return Err(format!("unexpected word {:?}", ready[0])),
        Ok(Ok(_)) => {}
    }
    if let Some(tracer) = crate::process::tracer(pid) {
        return Err(format!(
            "process {tracer} traces it (attached before it was non-dumpable); not handing it the secret"
        ));
    }
    socket
        .write_all(secret.to_line().as_bytes())
        .await
        .map_err(|e| format!("writing the secret: {e}"))
}

/// The service's side of the hand-over: says [`READY`] on stdin when stdin
/// is a socket (the launcher's), then reads the secret from it. Call it only
/// once the process is non-dumpable ([`crate::process::make_non_dumpable`]).
/// Stdin that is not a socket (a file fed by hand) is read as it is.
pub fn receive() -> Result<ServiceSecret, CommonError> {
    let stdin = std::io::stdin();
    let socket = stdin
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .ok()
        .filter(|f| {
            use std::os::unix::fs::FileTypeExt;
            f.metadata().is_ok_and(|m| m.file_type().is_socket())
        });
    if let Some(mut socket) = socket {
        socket
            .write_all(&[READY])
            .map_err(|e| CommonError::BadServiceSecret(format!("cannot say ready: {e}")))?;
    }
    ServiceSecret::read_from(stdin.lock())
}

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

    /// The launcher's side: the secret is written after READY, and not at
    /// all to a service that closes its side without saying it.
    #[tokio::test]
    async fn the_secret_is_handed_over_after_ready_only() {
        let secret = ServiceSecret::generate();
        let me = std::process::id();

        let (ours, mut theirs) = tokio::net::UnixStream::pair().unwrap();
        theirs.shutdown().await.unwrap(); // no READY
        let err = hand_over(ours, me, &secret).await.unwrap_err();
        assert!(err.contains("closed its stdin"), "{err}");
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "written without READY");

        let (ours, mut theirs) = tokio::net::UnixStream::pair().unwrap();
        theirs.write_all(&[READY]).await.unwrap();
        hand_over(ours, me, &secret).await.unwrap();
        let mut line = String::new();
        theirs.read_to_string(&mut line).await.unwrap();
        assert_eq!(ServiceSecret::read_from(line.as_bytes()).unwrap(), secret);
    }

    #[tokio::test]
    async fn a_traced_service_gets_no_secret() {
        // A child this test traces, as a process that attached before the
        // service was non-dumpable would.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        crate::process::tests::seize(pid);
        assert!(crate::process::tracer(pid).is_some());
        let (ours, mut theirs) = tokio::net::UnixStream::pair().unwrap();
        theirs.write_all(&[READY]).await.unwrap();
        let err = hand_over(ours, pid, &ServiceSecret::generate())
            .await
            .unwrap_err();
        assert!(err.contains("traces it"), "{err}");
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "the secret was written");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn the_secret_is_never_printed() {
        let secret = ServiceSecret::generate();
        let shown = format!("{secret:?} {:?}", InternalGate::new(Some(secret.clone())));
        assert!(!shown.contains(&secret.0), "{shown}");
    }
}

/// A secret value held in a struct that derives `Debug` — a tool token, an
/// API key. Its `Debug` prints `Secret([redacted])` and never the value, so a
/// `{:?}` in a log line or a panic message cannot show it; serde reads and
/// writes it as the plain string, so a serialized struct keeps its format.
#[derive(Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself, for where it must be sent or compared.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn into_inner(self) -> String {
        self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Secret {
        Secret(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Secret {
        Secret(value.to_string())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

#[cfg(test)]
mod secret_value_tests {
    use super::Secret;

    #[test]
    fn debug_prints_nothing_of_the_value_and_serde_is_the_plain_string() {
        let s = Secret::new("hunter2-value");
        assert!(!format!("{s:?}").contains("hunter2"));
        assert!(!format!("{:?}", Some(s.clone())).contains("hunter2"));
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2-value\"");
        let back: Secret = serde_json::from_str("\"hunter2-value\"").unwrap();
        assert_eq!(back.expose(), "hunter2-value");
    }
}
