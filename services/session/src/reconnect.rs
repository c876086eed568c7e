//! A stream this service keeps open to another service for as long as the
//! process lives (ToolBridgeService's Watch, ProviderService's
//! WatchSettings): opened again whenever it ends or could not be opened, so a
//! restart of the other service is followed. The pause before the next try
//! doubles from 20 ms up to 2 s while the other service is away, and starts
//! over at 20 ms once a stream opens.
//!
//! The first try waits for the other service's socket to appear, then tries at
//! once: the services start together, and a try made before the other one
//! listens fails and leaves the stream closed until the next try 20 ms later,
//! past the first requests. The code that runs only then (error handling,
//! the fallbacks of a closed watch) stays mapped: 0.7 MiB of idle PSS in a
//! third of the starts (docs/decisions.md, "Start order").

use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// The pause after the first try that fails: a restarted service is
/// followed well within a second.
const FIRST_PAUSE: Duration = Duration::from_millis(20);
const LONGEST_PAUSE: Duration = Duration::from_secs(2);
/// How often the first try looks for the socket, and for how long at most
/// (then it tries anyway, and the pauses above take over).
const SOCKET_LOOK: Duration = Duration::from_millis(1);
const SOCKET_WAIT: Duration = Duration::from_secs(1);

/// Keeps the stream `what` (a name for the log) open, forever, to the
/// service listening on `socket`. `open` opens it and returns it with what
/// handles its messages (a new handler per stream, with what that stream
/// needs); `closed` runs each time an open stream ends.
pub(crate) async fn keep_open<T, Handle, Opening>(
    what: &str,
    socket: &Path,
    mut open: impl FnMut() -> Opening,
    mut closed: impl FnMut(),
) where
    Opening: Future<Output = Result<(tonic::Streaming<T>, Handle), tonic::Status>>,
    Handle: FnMut(T),
{
    let _ = tokio::time::timeout(SOCKET_WAIT, async {
        while !socket.exists() {
            tokio::time::sleep(SOCKET_LOOK).await;
        }
    })
    .await;
    let mut pause = FIRST_PAUSE;
    loop {
        match open().await {
            Ok((mut stream, mut handle)) => {
                tracing::debug!("{what} open");
                pause = FIRST_PAUSE;
                loop {
                    match stream.message().await {
                        Ok(Some(message)) => handle(message),
                        Ok(None) => break,
                        Err(status) => {
                            tracing::warn!(error = %status.message(), "{what} interrupted");
                            break;
                        }
                    }
                }
                closed();
            }
            Err(status) => {
                tracing::debug!(error = %status.message(), "{what} not available yet");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}
