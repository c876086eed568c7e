//! A minimal HTTP/1.1 client (hyper 1): one connection per request, over
//! TCP for `http://` and over TLS (rustls, the Mozilla roots of webpki-roots
//! plus an optional extra CA file) for `https://`: a local Ollama speaks
//! plain HTTP, hosted Ollama and Tavily only HTTPS.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};

/// How long connecting may take before the server counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A parsed `http://host[:port][/base]` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as configured, for messages.
    pub url: String,
    host: String,
    port: u16,
    /// `host[:port]` as sent in the Host header.
    authority: String,
    /// The path prefix, without a trailing slash ("" for none).
    base_path: String,
    tls: bool,
}

impl Endpoint {
    /// Whether a key may be sent here: over https, or plain http only to a
    /// loopback host (a local Ollama), where nothing crosses the network.
    pub fn may_carry_key(&self) -> bool {
        self.tls
            || self.host.eq_ignore_ascii_case("localhost")
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }

    pub fn parse(url: &str) -> Result<Endpoint, String> {
        let lower = url.to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("https://") {
            (true, &url["https://".len()..])
        } else if lower.starts_with("http://") {
            (false, &url["http://".len()..])
        } else {
            return Err(format!("{url}: not an http:// or https:// URL"));
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{url}: unclosed IPv6 address"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{url}: no host"));
        }
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("{url}: bad port {p:?}"))?,
            None if tls => 443,
            None => 80,
        };
        let path = path.split(['?', '#']).next().unwrap_or_default();
        Ok(Endpoint {
            url: url.to_string(),
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            base_path: path.trim_end_matches('/').to_string(),
            tls,
        })
    }

    /// The request target for `path` (which starts with `/`).
    pub fn target(&self, path: &str) -> String {
        format!("{}{path}", self.base_path)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// Nothing answered (refused, no route, timeout): the server is unreachable.
    #[error("{0}")]
    Connect(String),
    /// The connection broke or the server spoke something other than HTTP.
    #[error("{0}")]
    Protocol(String),
    /// A key would go in clear text: plain `http://` to a host that is not
    /// loopback. Refused before connecting, so nothing is sent.
    #[error(
        "{0}: refusing to send the API key over plain http to a host that is not loopback; use https://"
    )]
    KeyOverPlainHttp(String),
}

/// The client side of every request: the TLS trust for https endpoints.
#[derive(Clone)]
pub struct Http {
    tls: Arc<ClientConfig>,
}

impl Http {
    /// Trusts the Mozilla roots, plus the PEM certificates of `extra_ca`
    /// (a private CA, or a test's self-signed certificate).
    pub fn new(extra_ca: Option<&Path>) -> Result<Http, String> {
        let mut roots = RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = extra_ca {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("{}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!("{}: no PEM certificate", path.display()));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Http { tls: Arc::new(tls) })
    }

    /// POSTs a JSON body; the response body is left to stream.
    pub async fn post_json(
        &self,
        endpoint: &Endpoint,
        path: &str,
        bearer: Option<&str>,
        body: Vec<u8>,
    ) -> Result<Response<Incoming>, HttpError> {
        if bearer.is_some() && !endpoint.may_carry_key() {
            return Err(HttpError::KeyOverPlainHttp(endpoint.url.clone()));
        }
        let stream = connect(endpoint).await?;
        let mut req = Request::post(endpoint.target(path))
            .header(hyper::header::HOST, &endpoint.authority)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(
                hyper::header::ACCEPT,
                "application/x-ndjson, application/json",
            );
        if let Some(key) = bearer {
            req = req.header(hyper::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        let req = req
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| HttpError::Protocol(format!("cannot build the request: {e}")))?;
        if !endpoint.tls {
            return send(stream, req).await;
        }
        let name = ServerName::try_from(endpoint.host.clone())
            .map_err(|e| HttpError::Connect(format!("{}: {e}", endpoint.host)))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::clone(&self.tls))
            .connect(name, stream)
            .await
            // A failed handshake (unknown CA, wrong name) is no answer from the server we want.
            .map_err(|e| HttpError::Connect(format!("TLS: {e}")))?;
        send(tls, req).await
    }
}

async fn send<S>(io: S, req: Request<Full<Bytes>>) -> Result<Response<Incoming>, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| HttpError::Protocol(e.to_string()))?;
    // The connection task ends when the response body is done or dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| HttpError::Protocol(e.to_string()))
}

async fn connect(endpoint: &Endpoint) -> Result<TcpStream, HttpError> {
    let connect = TcpStream::connect((endpoint.host.as_str(), endpoint.port));
    let stream = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(HttpError::Connect(e.to_string())),
        Err(_) => {
            return Err(HttpError::Connect(format!(
                "no connection within {}s",
                CONNECT_TIMEOUT.as_secs()
            )));
        }
    };
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Reads a whole (error or small) body, keeping at most `limit` bytes.
pub async fn read_body(body: &mut Incoming, limit: usize) -> Result<Vec<u8>, HttpError> {
    let mut out = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| HttpError::Protocol(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            let room = limit.saturating_sub(out.len());
            out.extend_from_slice(&data[..data.len().min(room)]);
        }
    }
    Ok(out)
}

/// The `error` member of a JSON error body (Ollama's and Tavily's shape), else
/// the body's text, shortened.
pub fn error_message(body: &[u8]) -> String {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        for key in ["error", "detail", "message"] {
            match v.get(key) {
                Some(serde_json::Value::String(s)) => return s.clone(),
                Some(serde_json::Value::Object(o)) => {
                    if let Some(s) = o.get("error").and_then(|e| e.as_str()) {
                        return s.to_string();
                    }
                }
                _ => {}
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_string();
    }
    text.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_key_goes_only_over_https_or_to_loopback() {
        let ok = |u: &str| super::Endpoint::parse(u).unwrap().may_carry_key();
        assert!(ok("https://ollama.com"));
        assert!(ok("http://localhost:11434"));
        assert!(ok("http://127.0.0.1:11434"));
        assert!(ok("http://[::1]:11434"));
        assert!(!ok("http://ollama.example.com"));
        assert!(!ok("http://10.0.0.5:11434"));
        assert!(!ok("http://localhost.example.com"));
    }

    use super::*;
    use std::path::PathBuf;

    #[test]
    fn endpoints_parse() {
        let e = Endpoint::parse("http://127.0.0.1:11434").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 11434));
        assert_eq!(e.target("/api/chat"), "/api/chat");
        let e = Endpoint::parse("http://ollama.lan/proxy/").unwrap();
        assert_eq!((e.port, e.authority.as_str()), (80, "ollama.lan"));
        assert_eq!(e.target("/api/chat"), "/proxy/api/chat");
        let e = Endpoint::parse("http://[::1]:8080").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 8080));
        for bad in ["ftp://x", "http://", "http://h:port", "localhost:11434"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let https = Endpoint::parse("https://ollama.com").unwrap();
        assert_eq!((https.port, https.tls), (443, true));
        assert_eq!(https.target("/api/chat"), "/api/chat");
    }

    /// A CA and a certificate for 127.0.0.1 signed by it, made with the
    /// openssl CLI; returns (CA certificate, server certificate, server key).
    fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let script = r#"set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj /CN=pedelec-test-ca -keyout ca.key -out ca.pem
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -subj /CN=127.0.0.1 -keyout server.key -out server.csr
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n' > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 \
  -extfile ext.cnf -out server.pem
"#;
        let status = std::process::Command::new("sh")
            .args(["-c", script])
            .current_dir(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("sh");
        assert!(
            status.success(),
            "this test needs the openssl command to make certificates"
        );
        (
            dir.join("ca.pem"),
            dir.join("server.pem"),
            dir.join("server.key"),
        )
    }

    /// An HTTPS server answering one request with `ok`; returns the request head.
    async fn tls_server(cert: &Path, key: &Path) -> (u16, tokio::task::JoinHandle<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_rustls::rustls::pki_types::PrivateKeyDer;
        let certs = CertificateDer::pem_file_iter(cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(key).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = match acceptor.accept(tcp).await {
                Ok(t) => t,
                Err(e) => return format!("handshake failed: {e}"),
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tls.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";
            tls.write_all(answer).await.unwrap();
            let _ = tls.shutdown().await;
            String::from_utf8_lossy(&head).into_owned()
        });
        (port, task)
    }

    /// A listener on every address, reached as `http://0.0.0.0:<port>` (not
    /// loopback by name): a request with a key is refused before connecting;
    /// the first request that arrives is the one sent without a key.
    #[tokio::test]
    async fn a_key_is_never_sent_over_plain_http_to_a_host_that_is_not_loopback() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                .await
                .unwrap();
            String::from_utf8_lossy(&head).into_owned()
        });
        let endpoint = Endpoint::parse(&format!("http://0.0.0.0:{port}")).unwrap();
        let http = Http::new(None).unwrap();
        let err = http
            .post_json(&endpoint, "/api/chat", Some("key-value"), b"{}".to_vec())
            .await
            .unwrap_err();
        assert!(matches!(err, HttpError::KeyOverPlainHttp(_)), "{err}");
        assert_eq!(
            crate::error::AgentError::KeyOverPlainHttp(err.to_string()).code(),
            pedelec_common::Code::PROVIDER_AUTH_FAILED
        );
        let resp = http
            .post_json(&endpoint, "/api/chat", None, b"{}".to_vec())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let head = server.await.unwrap();
        assert!(!head.contains("key-value"), "{head}");
        assert!(
            !head.to_ascii_lowercase().contains("authorization"),
            "{head}"
        );
    }

    #[tokio::test]
    async fn https_endpoints_speak_tls_and_check_the_certificate() {
        let dir = tempfile::tempdir().unwrap();
        let (ca, cert, key) = certificates(dir.path());

        let (port, server) = tls_server(&cert, &key).await;
        let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}/base")).unwrap();
        let http = Http::new(Some(&ca)).unwrap();
        let mut resp = http
            .post_json(&endpoint, "/api/chat", Some("k"), b"{}".to_vec())
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        assert_eq!(read_body(resp.body_mut(), 100).await.unwrap(), b"ok");
        let head = server.await.unwrap();
        assert!(head.starts_with("POST /base/api/chat HTTP/1.1"), "{head}");
        assert!(head.contains("authorization: Bearer k"), "{head}");

        // Without the CA among its roots the client refuses the server.
        let (port, server) = tls_server(&cert, &key).await;
        let endpoint = Endpoint::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        let err = Http::new(None)
            .unwrap()
            .post_json(&endpoint, "/api/chat", None, Vec::new())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, HttpError::Connect(m) if m.starts_with("TLS")),
            "{err}"
        );
        server.abort();
    }

    #[test]
    fn error_messages_come_from_the_body() {
        assert_eq!(
            error_message(br#"{"error":"model \"x\" not found"}"#),
            "model \"x\" not found"
        );
        assert_eq!(
            error_message(br#"{"detail":{"error":"Unauthorized"}}"#),
            "Unauthorized"
        );
        assert_eq!(error_message(b"  plain text\n"), "plain text");
        assert_eq!(error_message(b""), "(empty body)");
    }
}
